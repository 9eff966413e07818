"""(Support, no tests.) The agent toolkit over the real adb server and the simulated device.

:func:`ui_sleep` is the bridge's ``sleep`` in these tests: instead of waiting, it advances the
simulated device's UI clock (set to manual), so the at-action and settled frames are taken
at exact UI times and no test depends on the wall clock.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

from PIL import Image

from device_bridge.rpc import Dispatcher
from device_bridge.sim.apk import SimPackage, build_apk
from device_bridge.sim.ui_demo import DEMO_PACKAGE
from tests.adb_support import ConnectedSim

__all__ = ["DEMO_APK", "image", "install_demo", "shell_log", "toast_shown", "ui_sleep"]

DEMO_APK = build_apk(SimPackage(DEMO_PACKAGE, "app"))


def ui_sleep(sim: ConnectedSim) -> Callable[[float], Awaitable[None]]:
    clock = sim.device.app_ui.clock
    clock.set_manual(1000.0)

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    return sleep


async def install_demo(dispatcher: Dispatcher, serial: str) -> None:
    """Install the demo app through droidwire (so app.start/stop may name it) and start it."""
    await dispatcher("device.install", {"serial": serial, "apk": DEMO_APK})
    await dispatcher("app.start", {"serial": serial, "package": DEMO_PACKAGE})


def shell_log(sim: ConnectedSim) -> list[str]:
    """Every command line the device ran (its ``SimShell`` log lines)."""
    entries: list[Any] = sim.call(lambda: sim.device.logbuf.entries())
    return [e.message for e in entries if e.tag == "SimShell"]


def image(png: bytes) -> Image.Image:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    return Image.open(io.BytesIO(png)).convert("RGB")


def toast_shown(png: bytes) -> bool:
    """The demo app's toast box (50,50,50) at its place (ui_demo.DemoView.draw)."""
    img = image(png)
    bar = img.height // 40
    return img.getpixel((img.width // 2, bar * 32 + bar // 2)) == (50, 50, 50)
