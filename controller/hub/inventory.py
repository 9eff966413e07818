"""What a bridge may announce as a device: serials checked where the inventory comes in.

A device's id is ``BRIDGE~SERIAL`` and users name devices by serial, so a serial is part of
how a user's selectors resolve. A bridge is trusted only for the devices it serves, never
for how other bridges' devices are named: a serial that could pass for another id
(``alice-br~127.0.0.1:5555``), or look like one to a person (a fullwidth or Cyrillic
look-alike, an invisible or control character, whitespace), is dropped from the inventory
with a logged, typed reason (:class:`SerialRefusal`) — the rest of the inventory stands.

The wire model already requires printable ASCII (``protocol.envelope.Serial``); this check
holds on the controller whatever a bridge's protocol version lets through, and also filters
the store's record of devices seen before it existed.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

__all__ = ["MAX_SERIAL_CHARS", "SerialRefusal", "admissible", "serial_refusal"]

log = logging.getLogger("droidwire.controller.hub")

MAX_SERIAL_CHARS = 128  # as the wire model's
SEPARATOR = "~"


class SerialRefusal(StrEnum):
    """Why a serial was refused (the log's ``reason``)."""

    EMPTY = "empty"
    TOO_LONG = "too_long"
    SEPARATOR = "separator"  # "~" separates BRIDGE~SERIAL
    CONTROL_CHARACTER = "control_character"
    WHITESPACE = "whitespace"
    NON_ASCII = "non_ascii"  # look-alikes, invisible characters


def serial_refusal(serial: object) -> SerialRefusal | None:
    """None when ``serial`` may name a device, else why not."""
    if not isinstance(serial, str) or not serial:
        return SerialRefusal.EMPTY
    if len(serial) > MAX_SERIAL_CHARS:
        return SerialRefusal.TOO_LONG
    for char in serial:
        if char == SEPARATOR:
            return SerialRefusal.SEPARATOR
        if char.isspace():
            return SerialRefusal.WHITESPACE
        if unicodedata.category(char).startswith("C"):  # Cc, Cf (zero-width), Co, Cs, Cn
            return SerialRefusal.CONTROL_CHARACTER
        if not char.isascii():
            return SerialRefusal.NON_ASCII
    return None


_D = TypeVar("_D")


def admissible(bridge: str, devices: Mapping[str, _D]) -> dict[str, _D]:
    """``devices`` (serial → info) without the refused serials, each refusal logged."""
    out: dict[str, _D] = {}
    for serial, info in devices.items():
        reason = serial_refusal(serial)
        if reason is None:
            out[serial] = info
        else:
            log.warning("bridge %s: device refused: serial %s (reason %s)", bridge,
                        ascii(serial)[:80], reason.value)
    return out
