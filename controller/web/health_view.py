"""How the dashboard shows a device's health in one line (controller.health readings)."""

from __future__ import annotations

from typing import Any

from controller.web.html import Markup, esc

__all__ = ["health_summary"]


def health_summary(reading: dict[str, Any] | None) -> Markup:
    """One line for the device list: battery, temperature, and a refusal when not serving."""
    if reading is None:
        return Markup("")
    bits = []
    if reading.get("battery_level") is not None:
        bits.append(f"{reading['battery_level']}%")
    if reading.get("battery_temperature_c") is not None:
        bits.append(f"{reading['battery_temperature_c']:g} °C")
    text = esc(" · ".join(bits))
    if not reading.get("serving", True):
        text = Markup(f'{text} <span class="unhealthy">not serving: '
                      f'{esc(reading.get("reason") or "")}</span>')
    return Markup(text)
