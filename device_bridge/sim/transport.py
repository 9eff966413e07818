"""The device side of an adb transport: the framing (:mod:`protocol.adbwire`) and
:class:`DeviceTransport`, the read loop over one TCP connection from an adb server that the
simulated device and the tunnel's local listener (docs/tunnel.md) both run."""

from __future__ import annotations

import asyncio

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
    "DeviceTransport",
    "FramingError",
    "Message",
    "MessageReader",
    "encode",
]


class DeviceTransport:
    """One TCP connection from an adb server, seen from the device: frames are read in chunks
    and each message handed to :meth:`_dispatch`; :meth:`send` writes one (with checksums
    when the peer's version wants them). Subclasses say what a malformed stream, a failure of
    their own and the end of the connection mean."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.online = False
        self.checksums = False  # the peer speaks version 0x01000000 and may verify them

    def send(self, command: Command, arg0: int, arg1: int, data: bytes = b"") -> None:
        if not self.writer.is_closing():
            self.writer.write(encode(command, arg0, arg1, data, checksum=self.checksums))

    async def run(self) -> None:
        parser = MessageReader()
        try:
            while True:
                chunk = await self.reader.read(256 * 1024)
                if not chunk:
                    return
                for msg in parser.feed(chunk):
                    self._dispatch(msg)
                await self.writer.drain()
        except FramingError as exc:
            self._malformed(exc)
        except (ConnectionError, OSError):
            return
        except Exception:
            self._failed()
        finally:
            self._ended()

    def _dispatch(self, msg: Message) -> None:
        raise NotImplementedError

    def _malformed(self, exc: FramingError) -> None:
        """The peer sent bytes that are not adb messages: the connection ends."""

    def _failed(self) -> None:
        """A failure of our own while dispatching (called in its ``except``): re-raised."""
        raise

    def _ended(self) -> None:
        """The connection is over, whatever ended it."""
        self.writer.close()
