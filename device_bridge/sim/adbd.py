"""The device side of the adb transport: one TCP connection from the adb server, its streams.

AOSP ``protocol.txt``; what the device answers is in ``docs/simulated-device.md``:

* handshake: the server's CNXN is answered with ours (version 0x01000001, our maxdata, the
  banner); nothing is sent before it; a repeated CNXN restarts the transport. A secure phone
  (``device.auth`` set) first runs adb's RSA handshake (:mod:`device_bridge.sim.auth`): AUTH
  TOKEN, the host's signatures, its public key and the user's "Allow" — nothing but AUTH and
  CNXN is read from the host until it is authorized;
* streams: OPEN → OKAY, or CLSE(0, id) to refuse; WRTE payloads are cut to the agreed
  maxdata (the server rejects bigger ones and wedges the transport) and sent one at a
  time, each waiting for the host's OKAY; host data is acknowledged once the service has read
  it, so a slow service slows the sender instead of growing a buffer;
* late OKAY/CLSE for streams already gone are ignored; a host CLSE cancels the service and is
  answered with our own CLSE, as adbd does (``local_socket_close`` → ``remote_socket_shutdown``):
  clients that talk to the device directly (adb-shell) wait for it;
* the device opens streams to the host too (``adb reverse``): OPEN(local, 0, service), answered
  by the host's OKAY (connected) or CLSE (refused).

What a service *does* is the host's business (:class:`ServiceHost`, i.e. the ``SimDevice``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from device_bridge.sim.auth import (
    AUTH_RSAPUBLICKEY,
    AUTH_SIGNATURE,
    AUTH_TOKEN,
    AdbAuth,
    AdbKeyError,
)
from device_bridge.sim.transport import (
    A_VERSION,
    MAX_CNXN_PAYLOAD,
    Command,
    DeviceTransport,
    FramingError,
    Message,
)
from device_bridge.sim.waiters import Waiters

__all__ = ["Connection", "CrLfSink", "Handler", "ServiceHost", "Stream", "StreamSink", "V2Sink", "V2Source"]

logger = logging.getLogger("droidwire.sim.adbd")

_IN_HIGH_WATER = 256 * 1024  # host data buffered before we stop acknowledging it
_OUT_HIGH_WATER = 1024 * 1024  # device data queued before a writer waits
_V2_PACKET = 16 * 1024  # shell-v2 packet payload cap (client buffers are small)
MAX_STREAMS = 512  # open streams per connection; more OPENs are refused
MAX_BAD_SIGNATURES = 64  # AUTH signatures that match no key before the connection is dropped

Handler = Callable[["Stream"], Awaitable[None]]


class ServiceHost(Protocol):
    """What a connection needs from the device behind it."""

    maxdata: int
    auth: AdbAuth | None

    @property
    def serial(self) -> str: ...

    def banner(self) -> str: ...

    def service_for(self, service: str, conn: Connection) -> Handler | None:
        """The coroutine function serving ``service`` on a stream, or None to refuse it."""
        ...

    def connection_lost(self, conn: Connection) -> None:
        """``conn`` is gone: drop what belonged to it (its reverse listeners)."""
        ...


class Stream:
    """One adb stream: ordered, acknowledged byte pipes in both directions.

    Single-threaded on the event loop, so state is checked and changed without locks; readers
    and writers park in :class:`Waiters` until the state they wait for holds.
    """

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self._waiters = Waiters()
        self._inbound = bytearray()
        self._owe_okay = False
        self._pending = bytearray()
        self._acked = True
        self._flusher = asyncio.create_task(self._flush_loop())
        # A stream the device opened waits for the host's OKAY (connected) or CLSE (refused).
        self.opened: asyncio.Future[bool] | None = None

    # host → device

    def on_data(self, data: bytes) -> None:
        self._inbound += data
        if len(self._inbound) < _IN_HIGH_WATER:
            self.conn.send(Command.OKAY, self.local_id, self.remote_id)
        else:
            self._owe_okay = True  # acknowledged once the service has read it
        self._waiters.notify()

    async def read(self, n: int = -1) -> bytes:
        await self._waiters.wait_for(lambda: bool(self._inbound) or self.closed)
        take = len(self._inbound) if n < 0 else min(n, len(self._inbound))
        out = bytes(self._inbound[:take])
        del self._inbound[:take]
        self._maybe_okay()
        return out

    async def read_exactly(self, n: int) -> bytes:
        await self._waiters.wait_for(lambda: len(self._inbound) >= n or self.closed)
        if len(self._inbound) < n:
            raise EOFError("stream closed")
        out = bytes(self._inbound[:n])
        del self._inbound[:n]
        self._maybe_okay()
        return out

    def _maybe_okay(self) -> None:
        if self._owe_okay and len(self._inbound) < _IN_HIGH_WATER and not self.closed:
            self._owe_okay = False
            self.conn.send(Command.OKAY, self.local_id, self.remote_id)

    # device → host

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("stream closed by the host")
        if not data:
            return
        self._pending += data
        self._waiters.notify()
        await self._waiters.wait_for(lambda: len(self._pending) < _OUT_HIGH_WATER or self.closed)

    def on_okay(self) -> None:
        self._acked = True
        self._waiters.notify()

    async def _flush_loop(self) -> None:
        # One WRTE in flight per stream; the next waits for the host's OKAY.
        while True:
            await self._waiters.wait_for(lambda: (self._pending and self._acked) or self.closed)
            if self.closed:
                return
            size = self.conn.max_out
            chunk = bytes(self._pending[:size])
            del self._pending[:size]
            self._acked = False
            self.conn.send(Command.WRTE, self.local_id, self.remote_id, chunk)
            self._waiters.notify()

    async def finish(self) -> None:
        """Device-side end of service: send what is queued, then CLSE."""
        await self._waiters.wait_for(lambda: not self._pending or self.closed)
        if self.closed:
            return
        # The last WRTE may still be unacknowledged: CLSE may overtake its OKAY.
        self.conn.send(Command.CLSE, self.local_id, self.remote_id)
        self._close()

    def on_close(self) -> None:
        """The host closed the stream (or the connection died): stop everything."""
        self._close()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    def _close(self) -> None:
        if self.opened is not None and not self.opened.done():
            self.opened.set_result(False)
        if not self.closed:
            self.closed = True
            self.conn.streams.pop(self.local_id, None)
            self._flusher.cancel()
            self._waiters.notify()


class StreamSink:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    async def write(self, data: bytes) -> None:
        await self.stream.write(data)


class CrLfSink:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def write(self, data: bytes) -> None:
        await self.inner.write(data.replace(b"\n", b"\r\n"))


class V2Sink:
    """Shell protocol v2 packets: id, u32 length, data."""

    def __init__(self, stream: Stream, packet_id: int) -> None:
        self.stream = stream
        self.packet_id = packet_id

    async def write(self, data: bytes) -> None:
        for off in range(0, len(data), _V2_PACKET):
            chunk = data[off : off + _V2_PACKET]
            await self.stream.write(struct.pack("<BI", self.packet_id, len(chunk)) + chunk)


class V2Source:
    """Stdin from shell-v2 packets: id 0 data, id 4 close-stdin; others (5 = window) ignored."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self._buf = bytearray()
        self._eof = False

    async def read(self, n: int = -1) -> bytes:
        while not self._buf and not self._eof:
            try:
                head = await self.stream.read_exactly(5)
                body = await self.stream.read_exactly(struct.unpack_from("<I", head, 1)[0])
            except EOFError:
                self._eof = True
                break
            if head[0] == 0:
                self._buf += body
            elif head[0] == 4:
                self._eof = True
        take = len(self._buf) if n < 0 else min(n, len(self._buf))
        out = bytes(self._buf[:take])
        del self._buf[:take]
        return out


# -- connection -------------------------------------------------------------------------------


class Connection(DeviceTransport):
    """One TCP connection from an adb server: the transport and its streams."""

    def __init__(self, device: ServiceHost, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.device = device
        self.streams: dict[int, Stream] = {}
        self.max_out = min(device.maxdata, 1 << 20)
        self._next_id = 0
        self._token: bytes | None = None  # the AUTH TOKEN the host must sign
        self.authorized = device.auth is None
        self._bad_signatures = 0

    def _malformed(self, exc: FramingError) -> None:
        logger.warning("device %s: closing connection: %s", self.device.serial, exc)

    def _failed(self) -> None:
        # A bug of ours: drop this transport (adb reconnects), keep serving.
        logger.exception("device %s: transport failed", self.device.serial)

    def _ended(self) -> None:
        for stream in list(self.streams.values()):
            stream.on_close()
        if self.device.auth is not None:
            self.device.auth.forget(self._allowed)
        self.device.connection_lost(self)
        self.writer.close()

    def _dispatch(self, msg: Message) -> None:
        if msg.command == Command.CNXN:
            # Effective maxdata is the smaller of both announcements, in both directions.
            self.max_out = max(256, min(self.device.maxdata, msg.arg1 or 4096, 1 << 20))
            self.checksums = msg.arg0 < A_VERSION
            for old in list(self.streams.values()):
                old.on_close()
            self.online = False
            if self.authorized:
                self._go_online()
            else:
                self._send_token()
            return
        if msg.command == Command.AUTH:
            self._auth(msg)
            return
        if not self.online:
            return  # nothing but CNXN (and AUTH) is meaningful before the handshake
        if msg.command == Command.OPEN:
            self._open(msg.arg0, msg.data.rstrip(b"\0").decode("utf-8", errors="replace"))
            return
        stream = self.streams.get(msg.arg1)
        if stream is None:
            return  # late OKAY/CLSE for a stream we already closed
        if stream.opened is not None and not stream.opened.done():
            # The host's answer to a stream we opened: OKAY(its id, ours) or CLSE(0, ours).
            if msg.command == Command.OKAY and msg.arg0:
                stream.remote_id = msg.arg0
                stream.opened.set_result(True)
            elif msg.command == Command.CLSE:
                stream.on_close()
            return
        if stream.remote_id != msg.arg0:
            return
        if msg.command == Command.OKAY:
            stream.on_okay()
        elif msg.command == Command.WRTE:
            stream.on_data(msg.data)
        elif msg.command == Command.CLSE:
            # adbd answers the host's CLSE with its own (local_socket_close); clients that
            # talk to the device directly wait for it.
            self.send(Command.CLSE, stream.local_id, stream.remote_id)
            stream.on_close()

    # -- authentication (secure phones) ------------------------------------------------

    def _go_online(self) -> None:
        self.send(Command.CNXN, A_VERSION, self.device.maxdata, self.device.banner().encode())
        self.online = True

    def _send_token(self) -> None:
        assert self.device.auth is not None
        self._token = self.device.auth.new_token()
        self.send(Command.AUTH, AUTH_TOKEN, 0, self._token)

    def _allowed(self) -> None:
        """The user tapped Allow for the key this connection offered."""
        if not self.authorized and not self.writer.is_closing():
            self.authorized = True
            self._token = None
            self._go_online()

    def _auth(self, msg: Message) -> None:
        auth = self.device.auth
        if auth is None or self.authorized or self._token is None:
            return  # adbd ignores AUTH it did not ask for
        if len(msg.data) > MAX_CNXN_PAYLOAD:
            raise FramingError(f"AUTH payload of {len(msg.data)} bytes")
        if msg.arg0 == AUTH_SIGNATURE:
            if auth.verify(self._token, msg.data):
                self.authorized = True
                self._token = None
                self._go_online()
            else:
                self._bad_signatures += 1
                if self._bad_signatures > MAX_BAD_SIGNATURES:
                    # A host has a handful of keys; hundreds of signatures are a guessing game.
                    raise FramingError(f"{self._bad_signatures} bad AUTH signatures")
                self._send_token()  # the host tries its next key, then sends its public key
        elif msg.arg0 == AUTH_RSAPUBLICKEY:
            try:
                auth.request(msg.data, self._allowed)
            except AdbKeyError as exc:
                logger.warning("device %s: ignoring a bad adb public key: %s",
                               self.device.serial, exc)

    # -- streams the device opens ------------------------------------------------------

    async def open_stream(self, service: str) -> Stream | None:
        """Open ``service`` on the host (``adb reverse``): the stream, or None if refused."""
        if not self.online or len(self.streams) >= MAX_STREAMS or self.writer.is_closing():
            return None
        self._next_id += 1
        stream = Stream(self, self._next_id, 0)
        stream.opened = asyncio.get_running_loop().create_future()
        self.streams[stream.local_id] = stream
        self.send(Command.OPEN, stream.local_id, 0, service.encode() + b"\0")
        if not await stream.opened:
            stream.on_close()
            return None
        return stream

    def _open(self, remote_id: int, service: str) -> None:
        handler = self.device.service_for(service, self)
        if handler is None or remote_id == 0 or len(self.streams) >= MAX_STREAMS:
            logger.debug("device %s: refusing service %r", self.device.serial, service[:80])
            self.send(Command.CLSE, 0, remote_id)
            return
        self._next_id += 1
        stream = Stream(self, self._next_id, remote_id)
        self.streams[stream.local_id] = stream
        self.send(Command.OKAY, stream.local_id, remote_id)
        stream.task = asyncio.create_task(self._serve(stream, handler))

    async def _serve(self, stream: Stream, handler: Handler) -> None:
        try:
            await handler(stream)
            await stream.finish()
        except asyncio.CancelledError:
            stream.on_close()
        except (ConnectionError, EOFError):
            stream.on_close()
        except Exception:
            logger.exception("device %s: service failed", self.device.serial)
            with contextlib.suppress(Exception):
                await stream.finish()

    def close(self) -> None:
        for stream in list(self.streams.values()):
            stream.on_close()
        self.writer.close()
