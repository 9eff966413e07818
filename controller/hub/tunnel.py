"""Remote adb tunnels on the controller (docs/tunnel.md): a client's streams relayed
to the device's bridge.

One :class:`Tunnel` per tunnel WebSocket (``/v1/devices/{device}/tunnel``). The client opens adb
streams on it; each becomes a bridge channel (``device.tunnel.open``) whose ``evt`` frames the
hub hands to the :class:`RelayStream` registered for it (like a live screen's, never blocking
the hub's reader). Rules:

* every ``OPEN`` is authorized again (:func:`controller.auth.authorize`, the owner's health
  gate) and audited (``device.tunnel.open``, with the service's name and, if refused, the rule);
* a request the bridge refuses inside a ``sync:`` stream (a ``refused`` evt: its kind, rule and
  path, never file contents) is audited (``device.tunnel.sync``) and in the step log, at most
  :data:`SYNC_REFUSALS_RECORDED` per stream and rule; the rest are counted and recorded as one
  entry (``more``) when the stream ends, so a client cannot flood the audit log;
* what an install stream installed (an ``installed`` evt after it ended, learned from the
  device by the bridge) goes to :attr:`Tunnels.on_installed`: a borrower's is removed when
  their loan ends, as a REST install is; the stream's evts stay routed here until it comes;
* client → device bytes go down as ``device.tunnel.write`` calls, up to
  :data:`WRITES_IN_FLIGHT` at once per stream at increasing offsets (chunks joined up to
  :data:`~protocol.tunnel_methods.MAX_WRITE`; a data frame as the CLI lays it out is read in
  place, :func:`~protocol.tunnel_methods.parse_data_frame`), and each is acknowledged to the
  client (``ack``) once the bridge wrote it: the client never has more than ``window`` bytes
  unacked;
* device → client bytes come within the bridge's window; the client's ``ack`` frames go up as
  ``device.tunnel.ack`` (one call in flight per stream, the rest added up meanwhile);
* bounded: :attr:`Tunnels.per_user` tunnels per user, :attr:`Tunnels.max_streams` streams per
  tunnel, ``window`` bytes per stream and direction; a client that overruns its window, or
  frames that do not parse, end the tunnel (``bad_request``).

A tunnel ends with its WebSocket, when the caller's access lapses (the API's watch), or at
shutdown; it then closes every stream on the bridge. Streams (not the tunnel) end with the
bridge's connection: adb streams do not survive a reconnect.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.hub.channels import FrameOutbox, attach, channel_in, close_later, next_event
from controller.hub.user_calls import vouch, vouched
from protocol.alloc import keep_freed_memory
from protocol.envelope import Evt
from protocol.errors import ErrorCode, RpcError
from protocol.tunnel_methods import (
    MAX_WINDOW,
    MAX_WRITE,
    TUNNEL_ACK,
    TUNNEL_CLOSE,
    TUNNEL_OPEN,
    TUNNEL_START,
    TUNNEL_WRITE,
    TunnelAckParams,
    TunnelCloseParams,
    decode_frame,
    encode_frame,
    parse_data_frame,
    parse_tunnel_chunk,
)

if TYPE_CHECKING:
    from controller.hub.hub import Hub

__all__ = ["DEFAULT_WINDOW", "RelayStream", "Tunnel", "TunnelSession", "Tunnels"]

log = logging.getLogger("droidwire.controller.tunnel")

DEFAULT_WINDOW = 2 << 20
WRITES_IN_FLIGHT = 8  # device.tunnel.write calls at once per stream
DEFAULT_MAX_STREAMS = 16
DEFAULT_PER_USER = 4
_OPENS_WAITING = 16  # OPENs being answered at once per tunnel
_AUDITS_WAITING = 64  # audit entries of OPENs being written at once per tunnel
STEPS_KEPT = 200  # OPENs a tunnel remembers for its page and API
SYNC_REFUSALS_RECORDED = 8  # refused sync requests audited one by one per stream and rule
_SYNC_RULES_COUNTED = 16  # distinct rules counted per stream (more: counted as "other")


class TunnelSession(Protocol):
    """What the tunnel's WebSocket handler drives: a :class:`Tunnel` here, or (cluster mode)
    one running on the replica that holds the device's bridge, relayed
    (:class:`controller.cluster.tunnels.RemoteTunnel`)."""

    id: str
    opened: int
    refused: int
    ended: str | None

    async def start(self) -> bytes:
        """Start the tunnel on the bridge; the client's ``hello`` frame."""
        ...

    async def receive(self, data: bytes) -> None:
        """One client frame; :class:`RpcError` ``bad_request`` when it does not parse."""
        ...

    async def next_frame(self) -> bytes | None:
        """The next frame for the client; None after the ``end`` frame went out."""
        ...

    def end(self, reason: str) -> None:
        """End the whole tunnel (idempotent)."""
        ...

    async def finished(self) -> None:
        """Wait until the counts (``opened``, ``refused``) are final, bounded."""
        ...


@dataclass(eq=False)
class RelayStream:
    """One adb stream of a tunnel: client id ``s``, bridge ``channel``."""

    tunnel: Tunnel
    s: int
    service: str
    channel: str | None = None
    pending: collections.deque[bytes | memoryview] = field(default_factory=collections.deque)
    pending_bytes: int = 0
    writing: bool = False  # open on the bridge: pending bytes go down as they come
    calls: set[asyncio.Task[None]] = field(default_factory=set)  # its writes in flight
    offset: int = 0
    ack_due: int = 0
    acking: bool = False
    next_seq: int = 0
    closed: bool = False
    sent_down: int = 0
    sent_up: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # rule → refused sync requests
    installs: bool = False  # an install stream: the bridge says what it installed once ended
    learned: bool = False  # … and it did (its ``installed`` evt came)

    # -- the hub's side (ScreenChannel protocol) -------------------------------------------

    def on_event(self, evt: Evt) -> None:
        chunk = next_event(self, evt, parse_tunnel_chunk, "tunnel chunk")
        if chunk is None:
            return
        if chunk.installed is not None:
            self.learned = True
            self.tunnel.installed(self, chunk.installed)
            if self.closed:
                self.tunnel.unroute(self)
            return
        if self.closed:
            if chunk.eof:
                self.tunnel.unroute(self)
            return  # an install stream's, kept routed for its ``installed`` evt
        if chunk.refused is not None:
            self.tunnel.sync_refused(self, chunk.refused)
            return
        if chunk.eof:
            self.tunnel.stream_ended(self, chunk.reason or "closed", on_bridge=False)
            return
        self.sent_up += len(chunk.data)
        self.tunnel.push(encode_frame("data", s=self.s, data=chunk.data), len(chunk.data))

    def end(self, reason: str) -> None:
        self.tunnel.stream_ended(self, reason, on_bridge=False)


class Tunnel:
    """One client's tunnel to one device."""

    def __init__(self, tunnels: Tunnels, principal: Principal, device: DeviceRef) -> None:
        self.tunnels = tunnels
        self.hub = tunnels.hub
        self.principal = principal
        self.device = device
        self.id = uuid.uuid4().hex[:12]
        self.started_at = time.time()
        self.window = tunnels.window
        self.max_streams = tunnels.max_streams
        self.streams: dict[int, RelayStream] = {}
        self.ended: str | None = None
        self.opened = 0
        self.refused = 0
        # The tunnel's step log: every OPEN, allowed or refused, newest last (bounded).
        self.steps: collections.deque[dict[str, Any]] = collections.deque(maxlen=STEPS_KEPT)
        self._out = FrameOutbox(tunnels.queue_limit())  # then the ``end`` frame
        self._opening = 0
        self._audits = asyncio.Semaphore(_AUDITS_WAITING)
        self._tasks: set[asyncio.Task[Any]] = set()

    def info(self) -> dict[str, Any]:
        """What the device page and the API show of a live tunnel."""
        return {"id": self.id, "user": self.principal.user_name, "device": str(self.device),
                "since": self.started_at, "streams": len(self.streams),
                "opened": self.opened, "refused": self.refused, "steps": list(self.steps)}

    # -- start -----------------------------------------------------------------------------

    async def start(self) -> bytes:
        """Ask the bridge for the device's features; the client's ``hello`` frame."""
        result = await self.hub.call(self.device, TUNNEL_START, vouched(
            self.principal, self.device, TUNNEL_START.parse_params({"serial": self.device.serial})))
        features = list(result.features)
        record = await self._record()
        props = ";".join(f"{k}={v}" for k, v in record.items() if v)
        banner = f"device::{props};" if props else "device::"
        return encode_frame("hello", serial=self.device.serial, banner=banner[:1024],
                            features=features, window=self.window, max_streams=self.max_streams)

    async def _record(self) -> dict[str, str]:
        entry = self.hub.entry(self.device.bridge_id)
        info = entry.devices.get(self.device.serial) if entry is not None else None
        if info is None:
            return {}
        model = (info.model or "").replace(" ", "_").replace(";", "_")[:64]
        return {"ro.product.name": model, "ro.product.model": model,
                "ro.product.device": model}

    # -- client frames (from the WebSocket's reader; never blocks) ---------------------------

    async def receive(self, data: bytes) -> None:
        self.take(data)

    def take(self, data: bytes) -> None:
        """One client frame as it came (:class:`RpcError` ``bad_request`` when it does not
        parse). A push's hot path: a data frame as the CLI lays it out, its payload a view of
        the message (neither unpacked nor copied) that goes on to the bridge as it came."""
        fast = parse_data_frame(data)
        if fast is not None:
            self.data(*fast)
        else:
            self.handle(decode_frame(data))

    async def finished(self) -> None:
        return None

    def handle(self, frame: dict[str, Any]) -> None:
        op = frame["op"]
        log.debug("tunnel %s: client %s s=%s", self.id, op, frame.get("s"))
        stream: RelayStream | None
        if op == "open":
            s = frame["s"]
            if s in self.streams or self._opening >= _OPENS_WAITING:
                self._refuse_now(s, "busy", "too many streams opening at once")
                return
            if len(self.streams) >= self.max_streams:
                self._refuse_now(s, "busy", f"at most {self.max_streams} streams per tunnel")
                return
            stream = RelayStream(self, s, frame["service"])
            self.streams[s] = stream
            self._opening += 1
            self._spawn(self._open(stream))
        elif op == "data":
            self.data(frame["s"], frame["data"])
        elif op == "ack":
            stream = self.streams.get(frame["s"])
            if stream is not None and not stream.closed and stream.channel is not None:
                stream.ack_due += frame["n"]
                if not stream.acking:
                    stream.acking = True
                    self._spawn(self._acks(stream))
        elif op == "close":
            stream = self.streams.get(frame["s"])
            if stream is not None:
                self.stream_ended(stream, "closed by the client", on_bridge=True, tell=False)
        else:
            raise RpcError(ErrorCode.BAD_REQUEST, f"a client does not send {op!r}")

    def data(self, s: int, data: bytes | memoryview) -> None:
        """Client bytes for stream ``s``: queued for the bridge, within the window."""
        stream = self.streams.get(s)
        if stream is None or stream.closed:
            return  # data racing a close: dropped, as adbd drops it
        if stream.pending_bytes + len(data) > self.window + MAX_WRITE:
            raise RpcError(ErrorCode.BAD_REQUEST, "the client overran its window")
        stream.pending.append(data)
        stream.pending_bytes += len(data)
        self._pump(stream)

    def _refuse_now(self, s: int, rule: str, message: str) -> None:
        self.push(encode_frame("refused", s=s, message=message, rule=rule))

    # -- frames to the client --------------------------------------------------------------

    def push(self, frame: bytes, size: int = 0) -> None:
        """Queue a frame for the client (``size``: the device bytes it carries, bounded)."""
        if self.ended is not None:
            return
        if not self._out.put(frame, size):
            self.end("the bridge overran the tunnel's windows")

    async def next_frame(self) -> bytes | None:
        """The next frame for the client; None after the ``end`` frame went out."""
        return await self._out.next_frame()

    # -- streams ---------------------------------------------------------------------------

    async def _open(self, stream: RelayStream) -> None:
        """Open ``stream`` on the bridge, answer the client, audit it. It counts among the
        OPENs being answered (:data:`_OPENS_WAITING`) until the bridge answered, not until its
        audit entry is written: a slow audit log must not refuse a client's next streams. The
        audit entries a tunnel has in flight are bounded (:data:`_AUDITS_WAITING`): past it, new
        OPENs wait for room before they reach the bridge."""
        hub, principal, device = self.hub, self.principal, self.device
        action = "device.tunnel.open"
        detail = {"service": _service_label(stream.service), "tunnel": self.id}
        answered = False

        def answer() -> None:
            nonlocal answered
            if not answered:
                answered = True
                self._opening -= 1

        try:
            async with self._audits:
                try:
                    await authorize(principal, device, Action.USE, store=hub.store)
                    if hub.gate is not None:
                        hub.gate(device)

                    def register(result: dict[str, Any]) -> None:
                        channel = channel_in(result)
                        if channel is None or hub.entry(device.bridge_id) is None:
                            return
                        stream.channel = channel
                        stream.installs = result.get("installs") is True
                        if stream.closed:
                            return  # closed meanwhile: _open closes it on the bridge
                        attach(hub, device.bridge_id, channel, stream)
                        # Before any of them: the hub reads them right after this result.
                        self.push(encode_frame("opened", s=stream.s))

                    params = vouch(principal, device, TUNNEL_OPEN.name,
                                   {"service": stream.service, "window": self.window})
                    await hub.call_wire(device, TUNNEL_OPEN.name, params, on_result=register)
                    if stream.channel is None:
                        raise RpcError(ErrorCode.INTERNAL,
                                       "the bridge answered without a channel")
                except RpcError as exc:
                    answer()
                    self.refused += 1
                    rule = str((exc.data or {}).get("rule") or exc.code.value)
                    self.steps.append({"at": time.time(), "service": detail["service"],
                                       "outcome": exc.code.value, "rule": rule[:128],
                                       "message": exc.message[:300]})
                    self.streams.pop(stream.s, None)
                    stream.closed = True
                    # Audited before the client hears of it.
                    await self._audit(action, exc.code.value, {**detail, "rule": rule[:128]})
                    message = exc.message if exc.code is ErrorCode.FORBIDDEN else \
                        f"{exc.code.value}: {exc.message}"
                    self.push(encode_frame("refused", s=stream.s, message=message[:1000],
                                           rule=rule))
                    return
                answer()
                self.opened += 1
                self.steps.append({"at": time.time(), "service": detail["service"],
                                   "outcome": "ok"})
                if self.ended is not None or stream.closed:
                    self._close_on_bridge(stream)
                else:
                    stream.writing = True
                    self._pump(stream)  # what the client sent meanwhile
                await self._audit(action, "ok", detail)
        finally:
            answer()

    def sync_refused(self, stream: RelayStream, refused: dict[str, str]) -> None:
        """The bridge refused a request inside ``stream`` (a ``sync:`` one): recorded in the
        step log and audited, the first :data:`SYNC_REFUSALS_RECORDED` per rule; the rest
        counted, recorded when the stream ends."""
        self.refused += 1
        rule = refused["rule"]
        if rule not in stream.refusals and len(stream.refusals) >= _SYNC_RULES_COUNTED:
            rule = "other"
        count = stream.refusals[rule] = stream.refusals.get(rule, 0) + 1
        if count > SYNC_REFUSALS_RECORDED:
            return
        detail = {"service": _service_label(stream.service), "tunnel": self.id, "rule": rule,
                  "request": refused["request"], "path": refused["path"]}
        self.steps.append({"at": time.time(), "outcome": ErrorCode.FORBIDDEN.value, **detail})
        self.hub._spawn(self._audit("device.tunnel.sync", ErrorCode.FORBIDDEN.value, detail))

    def _sync_refusals_over(self, stream: RelayStream) -> None:
        """``stream`` ended: what it had refused past the recorded ones, as one entry a rule."""
        for rule, count in stream.refusals.items():
            more = count - SYNC_REFUSALS_RECORDED
            if more <= 0:
                continue
            detail = {"service": _service_label(stream.service), "tunnel": self.id,
                      "rule": rule, "more": more}
            self.steps.append({"at": time.time(), "outcome": ErrorCode.FORBIDDEN.value,
                               **detail})
            self.hub._spawn(self._audit("device.tunnel.sync", ErrorCode.FORBIDDEN.value,
                                        detail))
        stream.refusals.clear()

    async def _audit(self, action: str, outcome: str, detail: dict[str, Any]) -> None:
        try:
            await self.hub.audit.record(self.principal, action, device=str(self.device),
                                        outcome=outcome, detail=detail)
        except Exception:  # an audit write that fails never hides the outcome
            log.exception("audit write failed for %s on %s", action, self.device)

    def _pump(self, stream: RelayStream) -> None:
        """Client bytes down to the bridge: up to :data:`WRITES_IN_FLIGHT` calls at once, at
        increasing offsets (the bridge writes them in order), each acknowledged to the client
        once the bridge wrote it. Started as bytes come and as writes end, in their own steps:
        no task of the stream's waits for them."""
        loop = asyncio.get_running_loop()
        while (stream.pending and stream.writing and not stream.closed
               and len(stream.calls) < WRITES_IN_FLIGHT):
            parts: list[bytes | memoryview] = []
            size = 0
            while stream.pending and (not parts or size + len(stream.pending[0]) <= MAX_WRITE):
                part = stream.pending.popleft()
                parts.append(part)
                size += len(part)
            offset = stream.offset
            stream.offset += size
            data = parts[0] if len(parts) == 1 else b"".join(parts)  # most often one
            call = loop.create_task(self._write_one(stream, offset, data))
            stream.calls.add(call)

    async def _write_one(self, stream: RelayStream, offset: int,
                         data: bytes | memoryview) -> None:
        me = asyncio.current_task()
        try:
            # The hot path of a push: plain params, checked as they were built (the channel the
            # bridge gave, our offset, 1..MAX_WRITE bytes, maybe a view of the client's frame)
            # and again by the bridge, which validates every request.
            await self.hub.call_wire(self.device.bridge_id, TUNNEL_WRITE.name,
                                     {"channel": stream.channel, "offset": offset, "data": data},
                                     validate=False)
        except RpcError as exc:
            if not stream.closed:
                self.stream_ended(stream, f"{exc.code.value}: {exc.message}", on_bridge=True)
            return
        finally:
            stream.calls.discard(me)
        stream.pending_bytes -= len(data)
        stream.sent_down += len(data)
        self.push(encode_frame("ack", s=stream.s, n=len(data)))
        self._pump(stream)

    async def _acks(self, stream: RelayStream) -> None:
        try:
            while stream.ack_due and not stream.closed and stream.channel is not None:
                n = min(stream.ack_due, MAX_WINDOW)
                stream.ack_due -= n
                await self.hub.call(self.device.bridge_id, TUNNEL_ACK,
                                    TunnelAckParams(channel=stream.channel, n=n))
        except RpcError as exc:
            log.debug("tunnel %s: ack failed: %s", self.id, exc.message)
        finally:
            stream.acking = False

    def stream_ended(self, stream: RelayStream, reason: str, *, on_bridge: bool,
                     tell: bool = True) -> None:
        """``stream`` is over: tell the client (``tell``), and the bridge (``on_bridge``)."""
        if stream.closed:
            return
        stream.closed = True
        self.streams.pop(stream.s, None)
        self._sync_refusals_over(stream)
        if stream.installs and not stream.learned and stream.channel is not None:
            # What it installed comes after its end: keep its evts routed here until then
            # (bounded: a bridge that never says is forgotten after a call's timeout).
            asyncio.get_running_loop().call_later(self.hub.settings.rpc_timeout_s,
                                                  self.unroute, stream)
        else:
            self.unroute(stream)
        for call in list(stream.calls):
            if call is not asyncio.current_task():
                call.cancel()
        stream.calls.clear()
        if tell:
            self.push(encode_frame("close", s=stream.s, reason=reason[:200]))
        if on_bridge:
            self._close_on_bridge(stream)

    def unroute(self, stream: RelayStream) -> None:
        """``stream``'s evts are no longer this tunnel's."""
        entry = self.hub.entry(self.device.bridge_id)
        if entry is not None and stream.channel is not None \
                and entry.screens.get(stream.channel) is stream:
            entry.screens.pop(stream.channel, None)

    def installed(self, stream: RelayStream, packages: list[str]) -> None:
        """An install stream ended, and the bridge learned from the device what it installed:
        in the step log, and (:attr:`Tunnels.on_installed`) remembered as the caller's install
        — a borrower's goes when their loan ends, as a REST install does."""
        if not packages:
            return
        self.steps.append({"at": time.time(), "service": _service_label(stream.service),
                           "outcome": "ok", "installed": packages})
        remember = self.tunnels.on_installed
        if remember is None:
            log.warning("tunnel %s: installed %s, but installs are not tracked", self.id,
                        packages)
            return
        for package in packages:
            self.hub._spawn(self._remember(remember, package))

    async def _remember(self, remember: Callable[[Principal, DeviceRef, str], Awaitable[None]],
                        package: str) -> None:
        try:
            await remember(self.principal, self.device, package)
        except Exception:
            log.exception("tunnel %s: could not note the install of %s", self.id, package)

    def _close_on_bridge(self, stream: RelayStream) -> None:
        if stream.channel is not None:
            close_later(self.hub, self.device.bridge_id, TUNNEL_CLOSE,
                        TunnelCloseParams(channel=stream.channel))

    def end(self, reason: str) -> None:
        """The whole tunnel ends: every stream closed on the bridge, the client told."""
        if self.ended is not None:
            return
        for stream in list(self.streams.values()):
            self.stream_ended(stream, reason, on_bridge=True, tell=False)
        self.ended = reason
        # What was queued is moot: the end goes out next.
        self._out.finish(encode_frame("end", reason=reason[:200]), drop_queued=True)
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self.tunnels.forget(self)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _service_label(service: str) -> str:
    """What the audit log keeps of a service: its name and a command's first word."""
    head, _, rest = service.partition(":")
    word = rest.strip().split(" ", 1)[0][:40] if head.split(",")[0] in ("shell", "exec") else ""
    return f"{head.split(',')[0][:32]}:{word}" if word else head[:32]


class Tunnels:
    """Every live tunnel of a hub (the device page lists them)."""

    def __init__(self, hub: Hub, *, window: int = DEFAULT_WINDOW,
                 max_streams: int = DEFAULT_MAX_STREAMS, per_user: int = DEFAULT_PER_USER) -> None:
        self.hub = hub
        self.window = window
        self.max_streams = max_streams
        self.per_user = per_user
        self._live: dict[str, Tunnel] = {}
        self.on_change: Callable[[], None] | None = None
        # What a tunnel's install stream installed, for the caller (the app sets it:
        # controller.loans.Loans.installed_through_tunnel).
        self.on_installed: Callable[[Principal, DeviceRef, str], Awaitable[None]] | None = None

    def queue_limit(self, per_frame: int = 0) -> int:
        """The most bytes a tunnel holds for its client: every stream's window and one write,
        plus ``per_frame`` bytes of framing per stream where whole frames are counted."""
        return self.max_streams * (self.window + MAX_WRITE + per_frame) + (1 << 20)

    def open(self, principal: Principal, device: DeviceRef) -> Tunnel:
        """A new tunnel (the caller is authorized already); ``busy`` past the user's quota."""
        mine = sum(1 for t in self._live.values() if t.principal.user_id == principal.user_id)
        if mine >= self.per_user:
            raise RpcError(ErrorCode.BUSY, f"at most {self.per_user} tunnels per user",
                           {"reason": "tunnel_quota"})
        keep_freed_memory()  # this process relays megabyte frames from now on: protocol/alloc.py
        tunnel = Tunnel(self, principal, device)
        self._live[tunnel.id] = tunnel
        return tunnel

    def forget(self, tunnel: Tunnel) -> None:
        self._live.pop(tunnel.id, None)

    def live(self, device: DeviceRef | None = None) -> list[Tunnel]:
        return [t for t in self._live.values()
                if device is None or (t.device.bridge_id, t.device.serial)
                == (device.bridge_id, device.serial)]

    def end_all(self, reason: str) -> None:
        for tunnel in list(self._live.values()):
            tunnel.end(reason)
