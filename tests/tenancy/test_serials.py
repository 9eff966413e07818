"""The serial check itself (controller/hub/inventory.py): what a bridge may call a device.

The wire model already refuses most of these; the controller refuses them whatever a
bridge's protocol version lets through (the forged-device client: test_selection.py)."""

from __future__ import annotations

import logging

import pytest

from controller.hub.inventory import SerialRefusal, admissible, serial_refusal

REFUSED = [
    ("alice-br~127.0.0.1:5555", SerialRefusal.SEPARATOR),
    ("~", SerialRefusal.SEPARATOR),
    ("two words", SerialRefusal.WHITESPACE),
    ("tab\there", SerialRefusal.WHITESPACE),
    ("nbsp\u00a0x", SerialRefusal.WHITESPACE),
    ("bell\x07", SerialRefusal.CONTROL_CHARACTER),
    ("nul\x00", SerialRefusal.CONTROL_CHARACTER),
    ("zero\u200bwidth", SerialRefusal.CONTROL_CHARACTER),
    ("rtl\u202eoverride", SerialRefusal.CONTROL_CHARACTER),
    ("ｅｍｕｌａｔｏｒ-5554", SerialRefusal.NON_ASCII),
    ("emulator\uff5e5554", SerialRefusal.NON_ASCII),  # a fullwidth tilde
    ("R58M\u0405ABC", SerialRefusal.NON_ASCII),  # a Cyrillic look-alike
    ("", SerialRefusal.EMPTY),
    ("x" * 129, SerialRefusal.TOO_LONG),
]
ACCEPTED = ["emulator-5554", "127.0.0.1:5555", "R58M123ABC", "[::1]:5555",
            "adb-R58M123ABC-xyz._adb-tls-connect._tcp", "x" * 128]


@pytest.mark.parametrize(("serial", "reason"), REFUSED)
def test_refused_serials_say_why(serial: str, reason: SerialRefusal) -> None:
    assert serial_refusal(serial) is reason


@pytest.mark.parametrize("serial", ACCEPTED)
def test_real_serials_pass(serial: str) -> None:
    assert serial_refusal(serial) is None


def test_an_inventory_keeps_its_good_devices_and_logs_each_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="droidwire.controller.hub")
    inventory = {s: i for i, (s, _) in enumerate(REFUSED)} | {"emulator-5554": 99}
    assert admissible("mallory-br", inventory) == {"emulator-5554": 99}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == len(REFUSED)
    assert all(m.startswith("bridge mallory-br: device refused") for m in messages)
    assert all("\x00" not in m and "\u202e" not in m for m in messages)  # shown escaped
