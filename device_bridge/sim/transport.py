"""adb transport framing for the simulated device: :mod:`protocol.adbwire` (shared with the
tunnel's local listener, docs/tunnel.md)."""

from __future__ import annotations

from protocol.adbwire import (
    A_VERSION,
    HEADER,
    MAX_CNXN_PAYLOAD,
    Command,
    FramingError,
    Message,
    MessageReader,
    encode,
)

__all__ = [
    "A_VERSION",
    "HEADER",
    "MAX_CNXN_PAYLOAD",
    "Command",
    "FramingError",
    "Message",
    "MessageReader",
    "encode",
]
