"""Remote adb through the link, bridge side (docs/tunnel.md).

:class:`TunnelService` serves ``device.tunnel.*`` (merged into the dispatcher's table, which has
applied the exposure and pause checks to the device-bound ones). Each adb stream a tunnel's
client opens is one channel here:

* **open** — :meth:`Policy.check_tunnel` decides first, with the caller's rights (``full`` is
  the owner's alone) and the device's profile: a refused service never reaches the device, and
  what is opened is the checked, re-quoted command, never the client's text. Then one raw socket
  on the device's service through the adb server (:meth:`AdbDevices.open_socket`);
* **device → client** — the socket is read on the event loop and sent as ``evt`` frames
  (``{"data"}``, at most :data:`READ_CHUNK` bytes each; the link's send queue is the
  back-pressure), never more than the stream's ``window`` bytes the client has not acknowledged
  (``device.tunnel.ack``): a client that stops reading stops the device's stream;
* **client → device** — ``device.tunnel.write`` calls, in order (``offset``), each answered once
  the socket took the bytes; a ``sync:`` stream's requests pass :class:`SyncGate` first, which
  checks every path and answers a refused one as adbd answers a failed request (``FAIL`` and
  the reason); each refusal also goes to the controller as an ``evt`` of the stream
  (``{"refused": {request, rule, path}}``, never file contents), which audits it;
* the end — the device closes (``{"eof": true, "reason": "closed"}``), the client closes
  (``device.tunnel.close``), sharing is paused (``paused``), or the link drops (every stream
  ends; a tunnel does not survive a reconnect).

Bounded: at most :data:`MAX_TUNNEL_STREAMS` streams per bridge (and the adb layer's own stream
cap), ``window`` bytes in flight per stream and direction.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import struct
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from protocol.alloc import keep_freed_memory
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Method, validate_params
from protocol.tunnel_methods import (
    MAX_INSTALLED,
    TUNNEL_ACK,
    TUNNEL_CLOSE,
    TUNNEL_FEATURES,
    TUNNEL_OPEN,
    TUNNEL_START,
    TUNNEL_WRITE,
    TunnelAckParams,
    TunnelChunk,
    TunnelCloseParams,
    TunnelOpenParams,
    TunnelStartParams,
    TunnelWriteParams,
)

if TYPE_CHECKING:
    from device_bridge.adb import ShellSocket
    from device_bridge.policy import Policy
    from device_bridge.rpc import Dispatcher

__all__ = ["MAX_TUNNEL_STREAMS", "READ_CHUNK", "SyncGate", "SyncRefusal", "TunnelService"]

log = logging.getLogger("droidwire.bridge.tunnel")

MAX_TUNNEL_STREAMS = 64
# Device bytes per evt: under the controller's threshold for decoding a frame in a worker
# thread (LARGE_FRAME_BYTES, 256 KiB), so a tunnel's chunks cost no thread hop there.
READ_CHUNK = 192 * 1024
_SYNC_PATH_MAX = 1024
_SYNC_DATA_MAX = 256 * 1024  # adb sends DATA chunks of at most 64 KiB
_SYNC_PATH_REQUESTS = frozenset({"STAT", "LST2", "STA2", "LIST", "LIS2", "RECV", "SEND"})


@dataclass(frozen=True, slots=True)
class SyncRefusal:
    """A request :class:`SyncGate` refused: its kind, the rule and its path (bounded)."""

    request: str
    rule: str
    path: str

    def to_wire(self) -> dict[str, str]:
        return {"request": self.request, "rule": self.rule, "path": self.path}


class SyncGate:
    """The client's side of a ``sync:`` stream, parsed as bytes (any split), each request's
    path checked before the request goes on. Sans I/O.

    :meth:`feed` returns the bytes that may go to the device and the answers to send the client
    in the device's stead for requests it refused, in the request's own format, so the adb
    client goes on and prints the reason where it can:

    * ``STAT``/``STA2``/``LST2`` of a path outside what the caller may see: "no such file";
      ``LIST``/``LIS2``: an empty listing — what is not yours is not there;
    * ``RECV``: ``FAIL`` with the rule's message (``adb pull`` prints it);
    * ``SEND``: its ``DATA`` is swallowed up to ``DONE``, then ``FAIL`` with the message
      (``adb push`` prints it).

    Requests: ``id(4) + u32 length + path`` (``SEND``'s path is ``path,mode``), then for
    ``SEND`` a run of ``DATA u32 n + n bytes`` closed by ``DONE u32 mtime``. Anything else is a
    broken client: ``broken`` is set and the stream ends.

    Each refusal is also kept in ``refusals`` (:class:`SyncRefusal`) until the caller takes
    them (:meth:`take_refusals`) to report them.
    """

    def __init__(self, check: Callable[[str, str], None]) -> None:
        self._check = check
        self._buf = bytearray()
        self._data_left = 0  # bytes of a DATA chunk still to pass through (or swallow)
        self._in_send = False
        self._refused_send: RpcError | None = None  # a SEND being swallowed
        self.refusals: list[SyncRefusal] = []
        self.broken: str | None = None

    def feed(self, data: bytes) -> tuple[bytes, list[bytes]]:
        """:meth:`feed_parts`, the bytes for the device joined."""
        parts, answers = self.feed_parts(data)
        return b"".join(parts), answers

    def feed_parts(self, data: bytes) -> tuple[list[bytes | memoryview], list[bytes]]:
        """As :meth:`feed`, the bytes for the device as pieces of ``data`` (views, no copy:
        a push's ``DATA`` passes through as it came); the pieces stay valid after the call."""
        answers: list[bytes] = []
        if self.broken is not None:
            return [], answers
        if self._buf:
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:
            buf = data  # the usual case: parsed in place, nothing carried over
        view = memoryview(buf)
        spans: list[list[int]] = []  # [start, stop) of view that go to the device, in order
        pos, end = 0, len(buf)
        try:
            pos = self._parse(view, pos, end, spans, answers)
        finally:
            rest = bytes(view[pos:]) if pos < end else b""
            parts: list[bytes | memoryview] = [
                buf if (a, b) == (0, end) and isinstance(buf, bytes) else view[a:b]
                for a, b in spans]
            view.release()  # the pieces are views of their own
        self._buf = bytearray(rest)
        return parts, answers

    def _parse(self, view: memoryview, pos: int, end: int, spans: list[list[int]],
               answers: list[bytes]) -> int:
        """Parse ``view[pos:end]`` (one offset, no copy of what is still to come), adding the
        spans that go to the device to ``spans``; where the unparsed rest starts."""

        def out(a: int, b: int) -> None:
            if spans and spans[-1][1] == a:
                spans[-1][1] = b
            elif b > a:
                spans.append([a, b])

        while True:
            if self._data_left:
                take = min(self._data_left, end - pos)
                if self._refused_send is None:
                    out(pos, pos + take)
                pos += take
                self._data_left -= take
                if self._data_left:
                    return pos
            if end - pos < 8:
                return pos
            ident = bytes(view[pos : pos + 4]).decode("latin-1")
            length = struct.unpack_from("<I", view, pos + 4)[0]
            if self._in_send:
                if ident == "DATA" and length <= _SYNC_DATA_MAX:
                    if self._refused_send is None:
                        out(pos, pos + 8)
                    pos += 8
                    self._data_left = length
                    continue
                if ident == "DONE":
                    if self._refused_send is None:
                        out(pos, pos + 8)
                    else:
                        answers.append(sync_fail(self._refused_send.message))
                        self._refused_send = None
                    pos += 8
                    self._in_send = False
                    continue
                self.broken = f"unexpected {ident!r} inside a SEND"
                return end
            if ident == "QUIT":
                out(pos, end)
                return end
            if ident not in _SYNC_PATH_REQUESTS or length > _SYNC_PATH_MAX:
                self.broken = f"sync request {ident!r} ({length} bytes) is not carried"
                return end
            if end - pos < 8 + length:
                return pos
            path = bytes(view[pos + 8 : pos + 8 + length]).decode("utf-8", errors="replace")
            start = pos
            pos += 8 + length
            try:
                self._check(ident, path)
            except RpcError as exc:
                self.refusals.append(_refusal(ident, path, exc))
                if ident == "SEND":
                    self._in_send = True
                    self._refused_send = exc
                else:
                    answers.append(_refused_answer(ident, exc.message))
                continue
            out(start, pos)
            self._in_send = ident == "SEND"

    def take_refusals(self) -> list[SyncRefusal]:
        taken, self.refusals = self.refusals, []
        return taken


def _refusal(ident: str, path: str, exc: RpcError) -> SyncRefusal:
    if ident == "SEND" and "," in path:
        path = path.rpartition(",")[0]  # ``path,mode``
    rule = str((exc.data or {}).get("rule") or exc.code.value)
    path = "".join(ch if ch.isprintable() else "?" for ch in path[:256])
    return SyncRefusal(ident, rule[:64], path)


def _refused_answer(ident: str, message: str) -> bytes:
    if ident == "STAT":
        return b"STAT" + bytes(12)  # mode 0: nothing there
    if ident in ("STA2", "LST2"):
        return ident.encode() + struct.pack("<I", errno.ENOENT) + bytes(64)
    if ident == "LIST":
        return b"DONE" + bytes(16)
    if ident == "LIS2":
        return b"DONE" + bytes(72)
    return sync_fail(message)


def sync_fail(message: str) -> bytes:
    """A sync ``FAIL`` answer: what adbd sends for a request it refuses."""
    body = message.encode("utf-8", errors="replace")[:1000]
    return b"FAIL" + struct.pack("<I", len(body)) + body


@dataclass(eq=False)
class _Stream:
    channel: str
    serial: str
    service: str
    sock: ShellSocket
    window: int
    gate: SyncGate | None = None
    offset: int = 0  # client → device bytes taken
    unacked: int = 0  # device → client bytes not acknowledged
    room: asyncio.Event = field(default_factory=asyncio.Event)
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)
    reader: asyncio.Task[None] | None = None
    installs_before: dict[str, str] | None = None  # package → path, before an install stream
    ended: bool = False
    reason: str = "closed"


class TunnelService:
    """``device.tunnel.*`` on one bridge."""

    def __init__(self, rpc: Dispatcher, *, max_streams: int = MAX_TUNNEL_STREAMS) -> None:
        self.rpc = rpc
        self.max_streams = max_streams
        self._streams: dict[str, _Stream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.opened = 0  # streams opened (tests, logs)
        self.refused = 0

    @classmethod
    def install(cls, rpc: Dispatcher, **options: Any) -> TunnelService:
        service = cls(rpc, **options)
        for method, handler in service.handlers().items():
            rpc.add(method, handler, replace=True)
        rpc.stream_enders.append(service.end_streams)
        return service

    def handlers(
        self,
    ) -> dict[Method[Any, Any], Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        return {
            TUNNEL_START: self._start,
            TUNNEL_OPEN: self._open,
            TUNNEL_WRITE: self._write,
            TUNNEL_ACK: self._ack,
            TUNNEL_CLOSE: self._close,
        }

    @property
    def streams(self) -> list[str]:
        return list(self._streams)

    # -- handlers --------------------------------------------------------------------------

    async def _start(self, params: dict[str, Any]) -> dict[str, Any]:
        p = validate_params("device.tunnel.start", params)
        assert isinstance(p, TunnelStartParams)
        policy = self.rpc.policy
        profile = policy.check_exposed(p.serial)
        features = await self.rpc.adb().features(p.serial)
        return {"features": [f for f in TUNNEL_FEATURES if f in features],
                "profile": profile.value}

    async def _open(self, params: dict[str, Any]) -> dict[str, Any]:
        p = validate_params("device.tunnel.open", params)
        assert isinstance(p, TunnelOpenParams)
        policy = self.rpc.policy
        try:
            opening = policy.check_tunnel(p.serial, p.service, self.rpc.context(p.serial))
        except RpcError:
            self.refused += 1
            raise
        sink = self.rpc.sink
        if sink is None:
            raise RpcError(ErrorCode.UNAVAILABLE, "streams need an open link")
        if len(self._streams) >= self.max_streams:
            raise RpcError(ErrorCode.BUSY, f"at most {self.max_streams} tunnel streams per bridge")
        keep_freed_memory()  # this process relays megabyte frames from now on: protocol/alloc.py
        before = await self.rpc.adb().package_paths(p.serial) if opening.installs else None
        sock = await self.rpc.adb().open_socket(p.serial, opening.service,
                                             what=f"open {opening.service.split(':', 1)[0]}")
        sock.sock.setblocking(False)
        stream = _Stream(f"tn-{uuid.uuid4().hex}", p.serial, opening.service, sock, p.window,
                         installs_before=before)
        stream.room.set()
        if opening.kind == "sync":
            # The view of the policy for this caller, kept for the stream's life.
            stream.gate = SyncGate(_sync_checker(policy, p.serial))
        self._streams[stream.channel] = stream
        self.opened += 1
        # The result goes out before the first evt: the reader starts after this returns.
        stream.reader = asyncio.get_running_loop().create_task(self._read_later(stream))
        return {"channel": stream.channel, "kind": opening.kind, "installs": opening.installs}

    async def _write(self, params: dict[str, Any]) -> dict[str, Any]:
        p = validate_params("device.tunnel.write", params)
        assert isinstance(p, TunnelWriteParams)
        stream = self._live(p.channel)
        # Writes may be pipelined: each waits for its turn (its offset), bounded by the window.
        if not stream.offset <= p.offset <= stream.offset + stream.window + len(p.data):
            raise RpcError(ErrorCode.CONFLICT, f"write at {p.offset}, expected {stream.offset}",
                           {"reason": "out_of_order"})
        async with stream.turn:
            await stream.turn.wait_for(lambda: stream.offset == p.offset or stream.ended)
        if stream.ended:
            raise RpcError(ErrorCode.NOT_FOUND, "no such tunnel stream", {"reason": "closed"})
        async with stream.writing:
            self._still_shared(stream)
            parts: list[bytes | memoryview] = [p.data]
            answers: list[bytes] = []
            if stream.gate is not None:
                parts, answers = stream.gate.feed_parts(p.data)
            loop = asyncio.get_running_loop()
            try:
                for part in parts:  # most often one: the client's bytes as they came
                    await loop.sock_sendall(stream.sock.sock, part)
            except OSError as exc:
                await self._end(stream, f"device stream lost: {exc}")
                raise RpcError(ErrorCode.DEVICE_OFFLINE, "the device's stream is gone") from None
            stream.offset += len(p.data)
            async with stream.turn:
                stream.turn.notify_all()
            if stream.gate is not None:
                # Each refusal before the answers: the controller records it before the
                # client sees the answer.
                for refusal in stream.gate.take_refusals():
                    self.refused += 1
                    log.info("tunnel %s: sync %s refused (%s)", stream.channel,
                             refusal.request, refusal.rule)
                    await self._emit(stream, TunnelChunk(refused=refusal.to_wire()))
            for answer in answers:
                stream.unacked += len(answer)
                await self._emit(stream, TunnelChunk(answer))
            if stream.gate is not None and stream.gate.broken is not None:
                await self._end(stream, f"bad_request: {stream.gate.broken}")
            return {"written": len(p.data)}

    async def _ack(self, params: dict[str, Any]) -> dict[str, Any]:
        p = validate_params("device.tunnel.ack", params)
        assert isinstance(p, TunnelAckParams)
        stream = self._streams.get(p.channel)
        if stream is not None:
            stream.unacked = max(0, stream.unacked - p.n)
            if stream.unacked < stream.window:
                stream.room.set()
        return {}

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        p = validate_params("device.tunnel.close", params)
        assert isinstance(p, TunnelCloseParams)
        stream = self._streams.get(p.channel)
        if stream is not None:
            await self._end(stream, "closed by the client", emit=False)
        return {}

    # -- streams ---------------------------------------------------------------------------

    def _live(self, channel: str) -> _Stream:
        stream = self._streams.get(channel)
        if stream is None or stream.ended:
            raise RpcError(ErrorCode.NOT_FOUND, "no such tunnel stream", {"reason": "closed"})
        return stream

    def _still_shared(self, stream: _Stream) -> None:
        """The owner's switches hold for a stream's whole life, not only at its open."""
        self.rpc.policy.check_exposed(stream.serial)

    async def _read_later(self, stream: _Stream) -> None:
        await asyncio.sleep(0)  # let the open's result go out first
        await self._read(stream)

    async def _read(self, stream: _Stream) -> None:
        loop = asyncio.get_running_loop()
        reason = "closed"
        try:
            while not stream.ended:
                await stream.room.wait()
                try:
                    self._still_shared(stream)
                except RpcError as exc:
                    reason = str((exc.data or {}).get("rule") or exc.message)
                    break
                try:
                    data = await loop.sock_recv(stream.sock.sock, READ_CHUNK)
                except OSError as exc:
                    reason = f"device stream lost: {exc}"
                    break
                if not data:
                    break
                stream.unacked += len(data)
                if stream.unacked >= stream.window:
                    stream.room.clear()
                if not await self._emit(stream, TunnelChunk(data)):
                    reason = "link"
                    break
        except asyncio.CancelledError:
            return
        except Exception:  # a bug must end the stream, never hang the client
            log.exception("tunnel %s: reader failed", stream.channel)
            reason = "internal"
        await self._end(stream, reason, from_reader=True)

    async def _emit(self, stream: _Stream, chunk: TunnelChunk) -> bool:
        sink = self.rpc.sink
        if sink is None:
            return False
        return await sink.emit(stream.channel, chunk.to_wire())

    async def _end(self, stream: _Stream, reason: str, *, emit: bool = True,
                   from_reader: bool = False) -> None:
        if stream.ended:
            return
        stream.ended = True
        stream.reason = reason
        self._streams.pop(stream.channel, None)
        stream.sock.close()
        async with stream.turn:
            stream.turn.notify_all()
        if stream.reader is not None and not from_reader:
            stream.reader.cancel()
        if stream.installs_before is not None:
            # What it installed, learned from the device now that it ended, goes to the
            # controller before the stream's end (however it ended, while the link is up): a
            # borrower's installs are removed when their loan ends, as REST installs are.
            installed = await self._learn_install(stream.serial, stream.installs_before)
            if reason != "link":
                with contextlib.suppress(Exception):
                    await self._emit(stream, TunnelChunk(installed=installed[:MAX_INSTALLED]))
        if emit and reason != "link":
            with contextlib.suppress(Exception):
                await self._emit(stream, TunnelChunk(eof=True, reason=reason))

    async def _learn_install(self, serial: str, before: dict[str, str]) -> list[str]:
        """What an install through a tunnel installed, learned from the device (never from the
        APK): it counts as installed through droidwire, as ``device.install``'s do — the
        borrower may start, stop and clear it, the owner's apps that were there stay theirs.
        Returns the packages new on the device (not the ones it updated)."""
        try:
            after = await self.rpc.adb().package_paths(serial)
        except RpcError as exc:
            log.info("tunnel install on %s: cannot read the package list: %s", serial, exc.message)
            return []
        new: list[str] = []
        for name, path in after.items():
            if before.get(name) == path:
                continue
            if name in before:
                self.rpc.updated.setdefault(serial, set()).add(name)
            else:
                self.rpc.installed.setdefault(serial, set()).add(name)
                new.append(name)
        return sorted(new)

    def _later(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def end_streams(self) -> None:
        """The link dropped: end every stream (a tunnel does not survive a reconnect)."""
        for stream in list(self._streams.values()):
            await self._end(stream, "link", emit=False)

    def end_all(self, serial: str | None = None) -> None:
        """End streams (of ``serial``) at once, without telling the link (tests, shutdown)."""
        for stream in list(self._streams.values()):
            if serial is None or stream.serial == serial:
                stream.ended = True
                self._streams.pop(stream.channel, None)
                stream.sock.close()
                if stream.reader is not None:
                    stream.reader.cancel()


def _sync_checker(policy: Policy, serial: str) -> Callable[[str, str], None]:
    def check(request: str, path: str) -> None:
        policy.check_sync(serial, request, path)

    return check

