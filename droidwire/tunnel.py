"""``droidwire device tunnel DEVICE [--port PORT]``: a lent phone that looks plugged in
(docs/tunnel.md).

A TCP listener on ``127.0.0.1`` (loopback only) that speaks the adb *device* protocol, so the
real adb server takes it for a phone (``adb connect 127.0.0.1:PORT``), and carries every adb
stream the server opens over one WebSocket (``/v1/devices/{device}/tunnel``, the token in its
header, once) to the controller, which relays it to the device's bridge. The bridge checks each
stream against the caller's rights and the device's profile; a refused one is answered here as
adbd answers a failed ``OPEN`` — the refusal as the service's output where the adb client prints
that (a shell's stderr and exit code 1, ``adb root``'s message), else a bare ``CLSE``.

Flow control end to end: the adb server sends one ``WRTE`` at a time per stream and waits for
our ``OKAY``; we ``OKAY`` while fewer than ``window`` bytes of the stream are unacknowledged by
the controller, so a slow device slows the adb client and nothing here grows without bound.
Device bytes are sent to the adb server one ``WRTE`` at a time (at most the agreed ``maxdata``),
each acknowledged to the controller once the server's ``OKAY`` came.

The tunnel lives as long as this process and its WebSocket: when the controller ends it (the
grant or token ended, the tunnel was refused), every adb connection and the listener close at
once and the adb server lists the device ``offline``; when this process ends, so does the
WebSocket, and the controller closes the device's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

import typer

from droidwire.client import (
    ApiError,
    Client,
    ControllerOption,
    JsonOption,
    TokenOption,
    cli_errors,
)
from protocol.adbwire import (
    A_VERSION,
    HEADER,
    Command,
    FramingError,
    Message,
    encode,
    read_header,
)
from protocol.alloc import keep_freed_memory
from protocol.errors import RpcError
from protocol.tunnel_methods import (
    DATA_HEAD_MAX,
    MAX_CLIENT_FRAME,
    data_frame_head,
    decode_frame,
    encode_frame,
    refusal_reply,
)

__all__ = ["TunnelClient", "TunnelEnded", "open_tunnel", "tunnel"]

log = logging.getLogger("droidwire.cli.tunnel")

MAXDATA = 1024 * 1024  # what the local adbd side announces: the adb server's WRTEs are at most this
MAX_PAYLOAD = 1 << 20  # the largest payload adb's server ever sends (MAX_PAYLOAD): more is broken
_SMALL_READ = 64 * 1024  # one read of headers and small messages; a large payload's rest: in place
LOOPBACK = "127.0.0.1"


class TunnelEnded(Exception):
    """The controller ended the tunnel (or refused it); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unreachable(TunnelEnded):
    """Nothing answered at the controller's URL (refused, unreachable, timed out, not a
    WebSocket server): another URL may serve the tunnel."""

    def __init__(self, url: str, exc: BaseException) -> None:
        super().__init__(f"unavailable: cannot reach {url}: {exc or type(exc).__name__}")


@dataclass(eq=False)
class _Stream:
    transport: _Transport
    s: int
    remote: int
    service: str
    opened: bool = False
    inflight: int = 0  # bytes sent to the controller, not yet acknowledged
    owe_okay: bool = False  # an OKAY held back until the controller acknowledges
    pending: deque[bytes] = field(default_factory=deque)  # device bytes for the adb server
    wrte_size: int = 0  # the WRTE in flight to the adb server (0: none)
    delivered: int = 0  # device bytes the adb server took, not yet acknowledged upstream
    device_closed: bool = False  # no more device bytes will come: CLSE once drained
    done: bool = False


class _Transport(asyncio.BufferedProtocol):
    """One TCP connection from the adb server: the device side of the adb transport.

    Read into place (a buffered protocol, no stream buffer): headers and small messages in
    reads of up to 64 KiB, and the rest of a ``WRTE``'s payload straight into the ``data`` frame
    that carries it to the controller, after room for the frame's head
    (:func:`~protocol.tunnel_methods.data_frame_head`) — a push's bytes are not copied in Python
    on the way up, but for what came with their header. While the adb server is slow to take
    what we write, reading pauses (as a stream's ``drain`` did)."""

    def __init__(self, client: TunnelClient) -> None:
        self.client = client
        self.writer: asyncio.Transport | None = None
        self.online = False
        self.checksums = False  # the peer speaks version 0x01000000 and may verify them
        self.max_out = 4096
        self.streams: dict[int, _Stream] = {}
        self._small = bytearray(_SMALL_READ)  # headers and small payloads are read here
        self._have = 0  # bytes in _small not parsed yet
        self._payload: bytearray | None = None  # a payload being read straight into place
        self._at = 0  # … its bytes read so far, and its end
        self._end = 0
        self._msg: tuple[Command, int, int] = (Command.OKAY, 0, 0)  # … and its header

    # -- asyncio ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.writer = cast(asyncio.Transport, transport)  # a TCP connection's
        if self.client.ended:
            self.writer.close()
            return
        self.client._transports.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._transports.discard(self)
        self.close()

    def pause_writing(self) -> None:
        if self.writer is not None:
            self.writer.pause_reading()

    def resume_writing(self) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._payload is not None:
            return memoryview(self._payload)[self._at : self._end]
        return memoryview(self._small)[self._have :]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._payload is not None:
                self._at += nbytes
                if self._at == self._end:
                    self._delivered()
            else:
                self._have += nbytes
                self._parse_small()
        except FramingError as exc:
            log.warning("adb connection: %s", exc)
            self.close()
        except Exception:  # a bug of ours ends this connection, never the tunnel
            log.exception("adb connection: failed")
            self.close()

    def _parse_small(self) -> None:
        """Every message whole in ``_small``; a payload that is not goes on in place."""
        small, pos = self._small, 0
        while self._payload is None and self._have - pos >= HEADER.size:
            command, arg0, arg1, length = read_header(small, pos, MAX_PAYLOAD)
            pos += HEADER.size
            if not length:
                self._dispatch(Message(command, arg0, arg1))
                continue
            at = DATA_HEAD_MAX if command == Command.WRTE else 0
            take = min(length, self._have - pos)
            payload = bytearray(at + length)
            payload[at : at + take] = small[pos : pos + take]
            pos += take
            self._msg, self._payload, self._at, self._end = (command, arg0, arg1), payload, \
                at + take, at + length
            if take == length:
                self._delivered()
        rest = self._have - pos
        if rest and pos:
            small[:rest] = small[pos : self._have]
        self._have = rest

    def _delivered(self) -> None:
        """The payload being read is whole."""
        (command, arg0, arg1), payload = self._msg, self._payload
        assert payload is not None
        self._payload = None
        if command == Command.WRTE:
            self._wrte(arg0, arg1, payload)
        else:
            self._dispatch(Message(command, arg0, arg1, bytes(payload)))

    # -- adb --------------------------------------------------------------------------------

    def send(self, command: Command, arg0: int, arg1: int, data: bytes = b"") -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(encode(command, arg0, arg1, data, checksum=self.checksums))

    def close(self) -> None:
        for stream in list(self.streams.values()):
            self.client.drop(stream, tell=True)
        if self.writer is not None:
            self.writer.close()

    def _stream(self, msg_remote: int, s: int) -> _Stream | None:
        found = self.streams.get(s)
        if found is None or found.remote != msg_remote:
            return None  # late OKAY/CLSE/WRTE for a stream already gone
        return found

    def _wrte(self, remote: int, s: int, buf: bytearray) -> None:
        """A ``WRTE``, its payload in ``buf`` after :data:`DATA_HEAD_MAX` bytes of room."""
        if not self.online:
            return
        stream = self._stream(remote, s)
        if stream is not None:
            self.client.to_device(stream, buf)

    def _dispatch(self, msg: Message) -> None:
        if msg.command == Command.CNXN:
            self.max_out = max(256, min(MAXDATA, msg.arg1 or 4096, 1 << 20))
            self.checksums = msg.arg0 < A_VERSION
            for stream in list(self.streams.values()):
                self.client.drop(stream, tell=True)
            self.send(Command.CNXN, A_VERSION, MAXDATA, self.client.banner.encode())
            self.online = True
            return
        if not self.online:
            return  # nothing but CNXN is meaningful before the handshake (we ask no AUTH)
        log.debug("adb server → %s", msg)
        if msg.command == Command.OPEN:
            service = msg.data.rstrip(b"\0").decode("utf-8", errors="replace")
            self.client.open(self, msg.arg0, service)
            return
        found = self._stream(msg.arg0, msg.arg1)
        if found is None:
            return
        if msg.command == Command.OKAY:
            self.client.server_took(found)
        elif msg.command == Command.CLSE:
            self.send(Command.CLSE, found.s, found.remote)  # as adbd answers the host's CLSE
            self.client.drop(found, tell=True)


class TunnelClient:
    """The tunnel's local end: ``async with TunnelClient(url, token, device) as t:`` then
    ``t.port``; :meth:`wait` returns (or raises :class:`TunnelEnded`) when it ends."""

    def __init__(self, base_url: str, token: str, device: str, *, port: int = 0) -> None:
        from urllib.parse import quote, urlsplit, urlunsplit

        parts = urlsplit(base_url.rstrip("/"))
        scheme = "wss" if parts.scheme == "https" else "ws"
        path = f"{parts.path}/v1/devices/{quote(device, safe='~:')}/tunnel"
        self.url = urlunsplit((scheme, parts.netloc, path, "", ""))
        self._token = token
        self.requested_port = port
        self.port = 0
        self.serial = ""
        self.banner = "device::"
        self.window = 1 << 20
        self.max_streams = 32
        self._ws: Any = None
        self._server: asyncio.Server | None = None
        self._transports: set[_Transport] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._streams: dict[int, _Stream] = {}
        self._next = 0
        self._out: asyncio.Queue[bytes | memoryview] = asyncio.Queue()
        self._ended = asyncio.Event()
        self.reason: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> TunnelClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

        keep_freed_memory()  # a relay of megabyte frames: protocol/alloc.py

        try:
            self._ws = await connect(
                self.url, additional_headers={"Authorization": f"Bearer {self._token}"},
                compression=None, max_size=MAX_CLIENT_FRAME, open_timeout=30.0,
                ping_interval=10.0, ping_timeout=20.0)
        except (OSError, TimeoutError, InvalidURI) as exc:
            raise Unreachable(self.url, exc) from None
        except InvalidHandshake as exc:
            if not isinstance(exc, InvalidStatus):  # not a WebSocket server, or a broken one
                raise Unreachable(self.url, exc) from None
            body = bytes(exc.response.body or b"")
            try:
                error = json.loads(body or b"{}")["error"]
                raise TunnelEnded(f"{error['code']}: {error['message']}") from None
            except (ValueError, KeyError, TypeError):
                raise TunnelEnded(f"refused: HTTP {exc.response.status_code}") from None
        hello = decode_frame(await self._ws.recv())
        if hello["op"] != "hello":
            await self._ws.close()
            raise TunnelEnded(f"the controller sent {hello['op']!r} first")
        self.serial = hello["serial"]
        self.window = hello["window"]
        self.max_streams = hello["max_streams"]
        features = ",".join(str(f) for f in hello["features"])
        self.banner = f"{hello['banner']}features={features}"
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Transport(self), LOOPBACK, self.requested_port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._spawn(self._receive())
        self._spawn(self._send())

    async def wait(self) -> str:
        """Wait until the tunnel ends; its reason."""
        await self._ended.wait()
        return self.reason or "closed"

    async def aclose(self) -> None:
        self._finish(self.reason or "closed by the client")
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)

    def _finish(self, reason: str) -> None:
        """End everything local at once: the adb server sees the device go offline."""
        if self._ended.is_set():
            return
        log.info("tunnel to %s ends: %s", self.serial or self.url, reason)
        self.reason = reason
        self._ended.set()
        if self._server is not None:
            self._server.close()
        for transport in list(self._transports):
            transport.close()
        self._transports.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def round_trip(self) -> float:
        """The tunnel's WebSocket round trip now, in seconds: a ping and its pong (answered by
        the controller's WebSocket layer)."""
        return float(await (await self._ws.ping()))

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    # -- the WebSocket ---------------------------------------------------------------------

    async def _send(self) -> None:
        try:
            while True:
                frame = await self._out.get()
                await self._ws.send(frame)
        except Exception as exc:  # the socket went: the tunnel is over
            self._finish(f"connection to the controller lost: {exc}")

    async def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for message in self._ws:
                frame = decode_frame(message)
                if frame["op"] == "end":
                    self._finish(str(frame["reason"]))
                    return
                self._on_frame(frame)
            close = self._ws.close_reason or "closed"
            self._finish(f"the controller closed the tunnel: {close}")
        except ConnectionClosed as exc:
            self._finish(f"connection to the controller lost: {exc}")
        except RpcError as exc:
            self._finish(f"bad frame from the controller: {exc.message}")

    def _on_frame(self, frame: dict[str, Any]) -> None:
        op = frame["op"]
        log.debug("controller → %s s=%s", op, frame.get("s"))
        stream = self._streams.get(frame.get("s", 0))
        if stream is None or stream.done:
            return
        t = stream.transport
        if op == "opened":
            stream.opened = True
            t.send(Command.OKAY, stream.s, stream.remote)
        elif op == "refused":
            reply = refusal_reply(stream.service, str(frame["message"]))
            print(f"droidwire: refused {stream.service.split(':', 1)[0]}: {frame['message']}",
                  file=sys.stderr)
            if reply is None:
                t.send(Command.CLSE, 0, stream.remote)
                self.drop(stream, tell=False)
                return
            stream.opened = True
            t.send(Command.OKAY, stream.s, stream.remote)
            stream.pending.append(reply)
            stream.device_closed = True
            self._flush(stream)
        elif op == "data":
            stream.pending.append(frame["data"])
            self._flush(stream)
        elif op == "ack":
            stream.inflight = max(0, stream.inflight - frame["n"])
            if stream.owe_okay and stream.inflight < self.window:
                stream.owe_okay = False
                t.send(Command.OKAY, stream.s, stream.remote)
        elif op == "close":
            stream.device_closed = True
            self._flush(stream)

    # -- streams ---------------------------------------------------------------------------

    def open(self, transport: _Transport, remote: int, service: str) -> None:
        if remote == 0 or len(self._streams) >= self.max_streams or self._ended.is_set():
            transport.send(Command.CLSE, 0, remote)
            return
        self._next += 1
        stream = _Stream(transport, self._next, remote, service)
        self._streams[stream.s] = stream
        transport.streams[stream.s] = stream
        self._out.put_nowait(encode_frame("open", s=stream.s, service=service))

    def to_device(self, stream: _Stream, buf: bytearray) -> None:
        """A ``WRTE`` from the adb server: its payload in ``buf`` after
        :data:`~protocol.tunnel_methods.DATA_HEAD_MAX` bytes of room for the frame's head."""
        if not stream.opened or stream.device_closed:
            return
        n = len(buf) - DATA_HEAD_MAX
        stream.inflight += n
        if stream.inflight < self.window:  # first: the adb server reads on meanwhile
            stream.transport.send(Command.OKAY, stream.s, stream.remote)
        else:
            stream.owe_okay = True
        head = data_frame_head(stream.s, n)
        start = DATA_HEAD_MAX - len(head)
        buf[start:DATA_HEAD_MAX] = head
        self._out.put_nowait(memoryview(buf)[start:])  # the frame, its payload never copied

    def server_took(self, stream: _Stream) -> None:
        """The adb server's OKAY for our WRTE."""
        if not stream.wrte_size:
            return
        stream.delivered += stream.wrte_size
        stream.wrte_size = 0
        if stream.delivered and (stream.delivered * 4 >= self.window or not stream.pending):
            if not stream.device_closed:
                self._out.put_nowait(encode_frame("ack", s=stream.s, n=stream.delivered))
            stream.delivered = 0
        self._flush(stream)

    def _flush(self, stream: _Stream) -> None:
        t = stream.transport
        if stream.done:
            return
        if stream.pending and not stream.wrte_size:  # one WRTE in flight, each waits its OKAY
            size = t.max_out
            head = stream.pending[0]
            if len(head) > size:
                chunk, stream.pending[0] = head[:size], head[size:]
            else:
                chunk = stream.pending.popleft()
            stream.wrte_size = len(chunk)
            t.send(Command.WRTE, stream.s, stream.remote, chunk)
        if stream.device_closed and not stream.pending:
            # The device ended the stream: its CLSE goes right behind the last WRTE, as adbd's
            # does — the adb server still hands the queued bytes to its client
            # (docs/simulated-device.md, "Transport"). Waiting for that WRTE's OKAY first cost
            # every stream one more round trip with the adb server before its client saw EOF.
            t.send(Command.CLSE, stream.s, stream.remote)
            self.drop(stream, tell=False)

    def drop(self, stream: _Stream, *, tell: bool) -> None:
        if stream.done:
            return
        stream.done = True
        self._streams.pop(stream.s, None)
        stream.transport.streams.pop(stream.s, None)
        if tell and not stream.device_closed:
            self._out.put_nowait(encode_frame("close", s=stream.s))


# -- the command ------------------------------------------------------------------------------


def tunnel(
    device: Annotated[str, typer.Argument(metavar="DEVICE", help="BRIDGE~SERIAL, or SERIAL.")],
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Local port (default: any free one).")] = 0,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Make DEVICE look plugged in: a local adb port for `adb connect` (Ctrl-C ends it).

    Every adb stream goes through the device's policy; refusals are printed by adb.
    --json prints {"address", "port", "serial"} once listening."""
    with cli_errors():
        with Client(controller, token) as client:
            urls = list(client.urls)
        try:
            reason = asyncio.run(_serve(urls, token or "", device, port, json_out))
        except KeyboardInterrupt:  # before the tunnel was open
            return
        except TunnelEnded as exc:
            raise _ended(exc.reason) from None
        if reason is None:  # Ctrl-C
            return
        raise _ended(reason)


async def open_tunnel(urls: list[str], token: str, device: str, *, port: int = 0) -> TunnelClient:
    """A started tunnel through the first of ``urls`` that answers: any replica of a cluster
    serves one (docs/tunnel.md). A URL nothing answers at (refused, unreachable, timed out, not
    a WebSocket server) is skipped; a controller's answer — a refusal too — stands
    (:class:`TunnelEnded`)."""
    failures: list[str] = []
    for url in urls:
        t = TunnelClient(url, token, device, port=port)
        try:
            await t.start()
            return t
        except Unreachable as exc:
            failures.append(exc.reason.removeprefix("unavailable: cannot reach "))
            log.info("tunnel: %s", exc.reason)
    raise TunnelEnded("unavailable: cannot reach " + "; ".join(failures)[:1000])


async def _serve(urls: list[str], token: str, device: str, port: int,
                 json_out: bool) -> str | None:
    """Serve the tunnel until it ends: its reason, or None after Ctrl-C.

    Once the tunnel is open, Ctrl-C is the loop's own signal handler: it ends the tunnel as the
    controller's end does, and the closing runs as usual. Without it, asyncio cancels the main
    task from the signal, wherever the loop is — under load once the process was still running
    a minute after Ctrl-C (a docs test)."""
    t = await open_tunnel(urls, token, device, port=port)
    loop = asyncio.get_running_loop()
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        t._finish("interrupted (Ctrl-C)")

    try:
        loop.add_signal_handler(signal.SIGINT, interrupt)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, not POSIX
        handled = False
    try:
        address = f"{LOOPBACK}:{t.port}"
        if json_out:
            typer.echo(json.dumps({"address": address, "port": t.port, "serial": t.serial}))
        else:
            typer.echo(f"tunnel to {t.serial} open: adb connect {address}")
        sys.stdout.flush()
        reason = await t.wait()
        return None if interrupted else reason
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
        await t.aclose()


def _ended(reason: str) -> ApiError:
    """A tunnel the controller ended or refused: access ended → exit 3, else 5 (not found 4)."""
    if reason.startswith("forbidden"):
        return ApiError(403, "forbidden", f"the tunnel ended: {reason}")
    if reason.startswith("not_found"):
        return ApiError(404, "not_found", reason)
    return ApiError(0, "unavailable", f"the tunnel ended: {reason}")
