"""adb transport framing, sans I/O: 24-byte headers in, messages out (and back).

Shared by both ends that speak the adb *device* protocol: the simulated device
(:mod:`device_bridge.sim.adbd`) and the tunnel's local listener (``droidwire device tunnel``,
docs/tunnel.md).

Follows AOSP adb ``protocol.txt``: six little-endian
u32 fields (command, arg0, arg1, data_length, data_check, magic = command ^ 0xFFFFFFFF) then
``data_length`` payload bytes. Both announce protocol version 0x01000001 ("skip
checksum"), so they send ``data_check = 0`` and never verify the peer's.

:class:`MessageReader` is fed arbitrary TCP chunks and yields whole messages: the server writes
header and payload separately and TCP may split or join them anywhere.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "A_VERSION",
    "HEADER",
    "MAX_CNXN_PAYLOAD",
    "Command",
    "FramingError",
    "Message",
    "MessageReader",
    "encode",
    "read_header",
]

A_VERSION = 0x01000001  # "skip checksum" protocol version (Dec 2017)
MAX_CNXN_PAYLOAD = 4096  # CNXN/AUTH payloads stay small for old-device compatibility
HEADER = struct.Struct("<6I")


class Command(IntEnum):
    """The 4 ASCII letters of each command, stored little-endian."""

    CNXN = 0x4E584E43
    AUTH = 0x48545541
    OPEN = 0x4E45504F
    OKAY = 0x59414B4F
    WRTE = 0x45545257
    CLSE = 0x45534C43
    SYNC = 0x434E5953


class FramingError(ValueError):
    """The peer sent bytes that are not an adb message (bad magic, unknown command, oversize)."""


@dataclass(frozen=True, slots=True)
class Message:
    command: Command
    arg0: int
    arg1: int
    data: bytes = b""

    def __str__(self) -> str:  # safe for logs: payloads are truncated
        shown = self.data[:40]
        more = "…" if len(self.data) > 40 else ""
        return f"{self.command.name}({self.arg0:#x}, {self.arg1:#x}, {shown!r}{more} [{len(self.data)}])"


def encode(command: Command, arg0: int, arg1: int, data: bytes = b"", *,
           checksum: bool = False) -> bytes:
    """One message's bytes: header + payload.

    ``data_check`` is 0 (version 0x01000001 skips it) unless ``checksum``: a peer that announced
    the original version 0x01000000 gets the byte sum it may verify.
    """
    check = (sum(data) & 0xFFFFFFFF) if checksum else 0
    return HEADER.pack(command, arg0, arg1, len(data), check, command ^ 0xFFFFFFFF) + data


def read_header(buf: bytes | bytearray | memoryview, pos: int,
                max_payload: int) -> tuple[Command, int, int, int]:
    """The message header at ``buf[pos:]`` (at least :data:`HEADER` ``.size`` bytes there):
    ``(command, arg0, arg1, payload length)``; :class:`FramingError` for a bad magic, an
    unknown command or a payload over ``max_payload``."""
    cmd, arg0, arg1, length, _check, magic = HEADER.unpack_from(buf, pos)
    if magic != cmd ^ 0xFFFFFFFF:
        raise FramingError(f"bad magic {magic:#x} for command {cmd:#x}")
    try:
        command = Command(cmd)
    except ValueError:
        raise FramingError(f"unknown command {cmd:#x}") from None
    if length > max_payload:
        raise FramingError(f"payload of {length} bytes exceeds {max_payload}")
    return command, arg0, arg1, length


class MessageReader:
    """Reassemble messages from a byte stream.

    ``max_payload`` bounds what we accept: the largest payload adb's server ever sends is
    1 MiB (MAX_PAYLOAD), and anything bigger is a broken or hostile peer.
    """

    def __init__(self, *, max_payload: int = 1 << 20) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload

    def feed(self, chunk: bytes) -> list[Message]:
        """Add ``chunk``; return every message completed by it. Raise :class:`FramingError`."""
        self._buf += chunk
        out: list[Message] = []
        while len(self._buf) >= HEADER.size:
            command, arg0, arg1, length = read_header(self._buf, 0, self._max_payload)
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            out.append(Message(command, arg0, arg1, bytes(self._buf[HEADER.size : end])))
            del self._buf[:end]
        return out
