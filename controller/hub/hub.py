"""The bridge hub: one live WebSocket per bridge, the registry, and ``call()``.

docs/design.md §3–4, docs/protocol.md. The delivery rules live in
:class:`protocol.session.ControllerSession` (sans I/O); this module is the I/O around it:

* one :class:`BridgeEntry` per bridge, created at its first connection and kept while the
  controller runs. Its session outlives connections, so requests in flight survive a
  reconnect: ``hello.held`` says what the bridge has, the rest is re-sent, ``welcome.waiting``
  lists what we still wait for;
* one live connection per bridge: a new one replaces the old, which is closed with 4409
  (terminal for the bridge, so two copies of one bridge do not evict each other forever) —
  but only once the new one has sent a valid ``hello`` of our protocol version: garbage, a
  probe or another version is closed without touching the live one (:meth:`Hub._await_hello`);
* frames are decoded within their kind's limits (:mod:`protocol.codec`), large ones in a
  worker thread (:meth:`Hub.decode`), so a hostile frame neither stalls the loop nor balloons;
* per connection, a reader (frames → session → outcomes: the task serving the WebSocket)
  and a writer that alone drains :meth:`~protocol.session.ControllerSession.frames_to_send`,
  so frames leave in the order the session produced them and a stalled socket holds up
  nobody but its writer. The writer runs only while there is something to send, started
  eagerly in the step that queued it (:meth:`Connection.wake`): an idle bridge costs one
  task, and a request leaves :meth:`Hub.call` without a trip through the event loop;
* :meth:`Hub.call` registers a call in the session (sent now, or on resume), then waits for
  its one completion, its deadline, or its caller's cancellation (→ a ``cancel`` frame).
  Deadlines are enforced by one timer per bridge, set for the earliest pending deadline
  (:meth:`~protocol.session.ControllerSession.expire` / ``next_deadline``), not one per call:
  sequential calls with the same timeout never touch it;
* grace (§4.7): a bridge that dropped is *reconnecting* for ``grace_period_s``: calls made
  meanwhile are queued and go out when it is back; after that it is *disconnected*, its calls
  fail with ``unavailable`` and new ones fail at once. After a controller restart, every
  bridge in the store gets the same grace from the start;
* liveness (§4.6): an application-level ping to an idle, silent bridge every
  ``liveness_interval_s``, skipped while it has calls pending; ``liveness_missed_max`` misses
  in a row close the connection (1011; the bridge reconnects if it is alive at all);
* logcat streams (:mod:`controller.hub.streams`) outlive connections: the bridge ends its
  readers with the link, so after a resume the hub subscribes again and the stream skips
  what its consumer already got.

Device calls from users go through :meth:`Hub.device_call`: THE authorization check
(:func:`controller.auth.authorize`), the call, and an audit entry, in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import BaseModel, ValidationError

from controller.audit import AuditLog
from controller.auth import Action, DeviceRef, Principal, authorize
from controller.config import DEFAULT_BORROWER_STREAMS_PER_BRIDGE, DEFAULT_STREAMS_PER_USER
from controller.hub.inventory import admissible
from controller.hub.screen import ScreenFeeds
from controller.hub.streams import LogStream
from controller.store import Store, Token, devices_seen, utcnow
from protocol.closecodes import CloseCode
from protocol.codec import Codec
from protocol.eager import start_eagerly
from protocol.envelope import (
    DEVICES_CHANNEL,
    PROTOCOL_VERSION,
    Capabilities,
    DeviceInfo,
    Evt,
    Hello,
    Req,
    Res,
    is_channel,
)
from protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    HandshakeRefused,
    InvalidState,
    RpcError,
    UnexpectedFrame,
)
from protocol.methods import (
    LOGCAT_SUBSCRIBE,
    LOGCAT_UNSUBSCRIBE,
    METHODS,
    DevicesChanged,
    LogBatch,
    LogcatUnsubscribeParams,
    Method,
)
from protocol.session import (
    ACK_BATCH,
    Completion,
    ControllerSession,
    Duplicate,
    Liveness,
    Pending,
    Relay,
    Resume,
)
from protocol.settings import Settings

__all__ = ["BridgeEntry", "BridgeSocket", "BridgeState", "ClusterHooks", "Connection", "Hub"]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
log = logging.getLogger("droidwire.controller.hub")

# Liveness is checked this many times per interval, so a ping goes out close to on time.
_LIVENESS_TICKS = 4
# Acks are batched (docs/design.md §3 only needs them eventually: an unacked result is re-sent on
# resume and dropped as no longer waited for): one ``ack`` frame per this delay, or at once
# when ACK_BATCH ids wait, instead of one frame per result on the RPC hot path.
ACK_DELAY_S = 0.02
# Frames larger than this are decoded in a worker thread, at most _LARGE_DECODES at once.
LARGE_FRAME_BYTES = 256 * 1024
_LARGE_DECODES = 2
# A resumed logcat stream asks for at most this many lines of the buffer's tail (the
# protocol's bound on ``tail``).
RESYNC_TAIL_MAX = 5000


class HubMetrics:
    """The hub's Prometheus metrics (labels: methods and outcomes, never serials or names)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.bridges = Gauge(
            "droidwire_bridges_connected", "Bridges with a live connection", registry=registry
        )
        self.calls = Counter(
            "droidwire_rpc_calls", "RPCs to bridges, by method and outcome",
            ["method", "outcome"], registry=registry,
        )
        self.duration = Histogram(
            "droidwire_rpc_duration_seconds", "RPC time from call to result, by method",
            ["method"], registry=registry,
        )
        self.reconnects = Counter(
            "droidwire_bridge_connections", "Bridge connections accepted", registry=registry
        )
        # Labelled children by label values: ``labels()`` takes a lock and builds a key on
        # every call, which showed on the RPC hot path (the label sets are small and fixed).
        self._calls: dict[tuple[str, str], Any] = {}
        self._durations: dict[str, Any] = {}

    def call_done(self, method: str, outcome: str, seconds: float) -> None:
        """Count one finished call (``method`` a registered name or ``<unknown>``)."""
        counter = self._calls.get((method, outcome))
        if counter is None:
            counter = self._calls[(method, outcome)] = self.calls.labels(method, outcome)
        counter.inc()
        histogram = self._durations.get(method)
        if histogram is None:
            histogram = self._durations[method] = self.duration.labels(method)
        histogram.observe(seconds)


class BridgeSocket(Protocol):
    """What the hub uses of a bridge's WebSocket: Starlette's (the ASGI endpoint,
    :mod:`controller.hub.endpoint`) or websockets' own server connection
    (:mod:`controller.hub.wsserver`, what ``droidwire controller`` serves)."""

    async def receive(self) -> Any: ...  # an ASGI message: websocket.receive / .disconnect
    async def send_bytes(self, data: bytes) -> None: ...
    async def close(self, code: int = ..., reason: str = ...) -> None: ...


class BridgeState(StrEnum):
    CONNECTED = "connected"  # a connection is up (handshake or open)
    RECONNECTING = "reconnecting"  # dropped less than grace_period_s ago: calls wait for it
    DISCONNECTED = "disconnected"  # away for longer: calls fail at once


class Connection:
    """One WebSocket of one bridge.

    The task serving the connection reads it (:meth:`Hub.serve`); a writer task exists only
    while the session has frames to send (:meth:`wake`) and ends when it has drained them.
    An idle bridge therefore costs one task and no per-connection events or timers: it is
    what most bridges are most of the time (docs/benchmarks.md, ``idle_bridge_kb``).
    """

    __slots__ = (
        "ack_due", "ack_timer", "again", "close_code", "close_reason", "drain", "ending",
        "failure", "reader", "writer", "ws",
    )

    def __init__(
        self, websocket: BridgeSocket, drain: Callable[[Connection], Coroutine[Any, Any, None]]
    ) -> None:
        self.ws = websocket
        self.drain = drain  # the writer's body: sends what the session has, then returns
        self.reader: asyncio.Task[Any] | None = None  # the serving task, while it reads
        self.writer: asyncio.Task[None] | object | None = None  # _EAGER, a task, or None
        self.again = False  # woken while the writer was sending: it drains once more
        self.ending = False  # kicked, or the writer failed: the reader stops
        self.failure: BaseException | None = None  # what ended the writer, if it failed
        self.close_code: int | None = None
        self.close_reason = ""
        self.ack_due = False  # the batched acks go out with the next drain
        self.ack_timer: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        """The session has frames to send: drain them now, or once more if draining."""
        if self.writer is not None:
            self.again = True
            return
        if self.ending:
            return
        # An eager start (3.12's eager tasks, by hand for 3.11): the drain runs here up to
        # its first real suspension. A send suspends only when the transport pushes back, so
        # a frame usually leaves at once — no task, no extra trip through the event loop on
        # the RPC path; if it does suspend, a task carries the drain on from there.
        self.writer = _EAGER
        try:
            task = start_eagerly(self.drain(self), asyncio.get_running_loop().create_task)
        except Exception as exc:  # e.g. the socket is gone
            self.writer = None
            self._failed(exc)
            return
        if task is None:
            return
        self.writer = task
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        if self.writer is task:
            self.writer = None
        if not task.cancelled() and task.exception() is not None:
            self._failed(task.exception())

    def _failed(self, exc: BaseException | None) -> None:
        self.failure = exc
        self._end()

    def ack_soon(self) -> None:
        """Results were received: their ack goes out within ACK_DELAY_S."""
        if self.ack_timer is None and not self.ack_due:
            self.ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY_S, self._ack_now)

    def _ack_now(self) -> None:
        self.ack_timer = None
        self.ack_due = True
        self.wake()

    def stop_timers(self) -> None:
        if self.ack_timer is not None:
            self.ack_timer.cancel()
            self.ack_timer = None

    def kick(self, code: int, reason: str) -> None:
        """Close this connection with ``code`` (first decision wins)."""
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason
        self._end()

    def _end(self) -> None:
        """Stop the reader: cancel it, unless it is the caller (it returns by itself then)."""
        if self.ending:
            return
        self.ending = True
        reader = self.reader
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()


@dataclass(eq=False, slots=True)
class _Handshake:
    """A bridge connection between its accept and its hello (revocation must reach it)."""

    token_id: str | None
    revoked: bool = False


@dataclass(eq=False, slots=True)
class _StreamHold:
    """A user's logcat stream (or one being opened), for the quotas."""

    user_id: str
    bridge_id: str
    borrower: bool
    stream: LogStream | None = None


# Connection.writer while a drain runs eagerly, in the caller's own step.
_EAGER = object()
# BridgeSocket.frame_hook where the socket has none (Starlette's).
_NO_HOOK = object()
# Results up to this size may be handled in the read callback (Hub._result_now); larger
# ones are left to the reader.
FAST_RESULT_BYTES = 64 * 1024


# What a waiter's future gets when its call's deadline passed (Hub._expire).
_EXPIRED = Completion(id="", method="")


@dataclass(slots=True)
class _Waiter:
    future: asyncio.Future[Completion]
    # Runs in the reader, before the caller resumes: e.g. a stream must exist before its
    # first ``evt`` (which the bridge sends right after the result) is read.
    on_result: Callable[[dict[str, Any]], None] | None = None


@dataclass(eq=False)
class BridgeEntry:
    """What the hub knows about one bridge, across its connections."""

    id: str
    name: str
    owner_id: str
    session: ControllerSession
    token_id: str | None = None
    conn: Connection | None = None
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    caps: Capabilities | None = None
    software: str | None = None
    connected_at: datetime | None = None
    last_seen_at: datetime | None = None
    away_since: float | None = None  # loop time of the drop
    gone: bool = False  # away for longer than the grace period
    connections: int = 0
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    streams: dict[str, LogStream] = field(default_factory=dict)  # by live channel
    subscriptions: set[LogStream] = field(default_factory=set)  # across reconnects
    # Live screens (controller/hub/screen.py) by channel: each takes its evt frames, and
    # ends with the connection (the bridge ends its screen streams with the link).
    screens: dict[str, ScreenChannel] = field(default_factory=dict)
    grace_task: asyncio.Task[None] | None = None
    # Fires at the earliest deadline of the pending calls (Hub._arm), whatever the connection.
    deadline_timer: asyncio.TimerHandle | None = None
    store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # inventory writes in order

    @property
    def state(self) -> BridgeState:
        if self.conn is not None:
            return BridgeState.CONNECTED
        return BridgeState.DISCONNECTED if self.gone else BridgeState.RECONNECTING

    @property
    def is_open(self) -> bool:
        return self.conn is not None and self.session.is_open

    def live_devices(self) -> dict[str, DeviceInfo]:
        """The inventory while the session is open, else nothing."""
        return dict(self.devices) if self.is_open else {}


class ScreenChannel(Protocol):
    """A live screen's end of a channel (:class:`controller.hub.screen.ScreenFeed`)."""

    def on_event(self, evt: Evt) -> None: ...
    def end(self, reason: str) -> None: ...


class ClusterHooks(Protocol):
    """What the hub asks of cluster mode (:class:`controller.cluster.Cluster`), when on.

    ``claimed``/``inventory``/``released`` tell the cluster about this replica's bridges;
    ``owner_elsewhere`` and ``forward`` route a call to the replica holding the bridge;
    ``awaiting``/``settled``/``adopt``/``foreign``/``relay`` share the waits for held results
    (a run resumed on another replica, a bridge that moved); ``stream``/``stop_stream`` relay
    a logcat stream from the replica holding the bridge: docs/cluster.md.
    """

    async def claimed(self, entry: BridgeEntry) -> None: ...
    async def inventory(self, entry: BridgeEntry) -> None: ...
    async def released(self, entry: BridgeEntry) -> None: ...
    async def owner_elsewhere(self, bridge_id: str) -> str | None: ...
    async def forward(
        self, replica: str, target: DeviceRef | str, method: str, params: dict[str, Any],
        *, timeout_s: float | None = None,
    ) -> dict[str, Any]: ...
    async def awaiting(self, bridge_id: str, request_id: str, session: str | None) -> None: ...
    async def settled(self, bridge_id: str, request_id: str) -> None: ...
    def adopt(
        self, device: DeviceRef, request_id: str, method: str, params: dict[str, Any],
        *, sent_session: str, timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]]: ...
    async def foreign(self, entry: BridgeEntry, hello: Hello) -> set[str]: ...
    async def relay(self, entry: BridgeEntry, res: Res) -> bool: ...
    async def stream(
        self, replica: str, device: DeviceRef, params: dict[str, Any]
    ) -> LogStream: ...
    def stop_stream(self, stream: LogStream) -> bool: ...


class Hub:
    """The registry of bridges and the one way to call them. Use as an async context."""

    def __init__(
        self,
        *,
        store: Store,
        audit: AuditLog,
        settings: Settings,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.store = store
        self.metrics = HubMetrics(registry)
        # Counted when scraped: a count on every connect and drop was O(bridges) each time,
        # O(N²) over a reconnect storm (docs/benchmarks.md).
        self.metrics.bridges.set_function(self._connected_count)
        self.audit = audit
        self.settings = settings
        self.codec = Codec(max_frame_bytes=settings.max_frame_bytes)
        self._entries: dict[str, BridgeEntry] = {}
        self._large_decodes = asyncio.Semaphore(_LARGE_DECODES)
        # Tenancy quotas on users' logcat streams (the app sets them from its config).
        self.streams_per_user = DEFAULT_STREAMS_PER_USER
        self.borrower_streams_per_bridge = DEFAULT_BORROWER_STREAMS_PER_BRIDGE
        self._stream_holds: set[_StreamHold] = set()
        self._handshakes: set[_Handshake] = set()  # connections waiting for their hello
        self._tasks: set[asyncio.Task[Any]] = set()
        self._liveness: asyncio.Task[None] | None = None
        self._started = 0.0
        self._closing = False
        self.cluster: ClusterHooks | None = None  # set by the app in cluster mode
        self.screens = ScreenFeeds(self)  # live screens, one bridge stream per device
        # Set by the app: refuses a call on a device that may not serve now (the owner's
        # health thresholds, controller.health); raises RpcError.
        self.gate: Callable[[DeviceRef], None] | None = None

    # -- lifecycle

    async def __aenter__(self) -> Hub:
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        self._liveness = loop.create_task(self._liveness_loop(), name="hub-liveness")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Staged shutdown: close every bridge (1001), fail what waits, stop the timers."""
        self._closing = True
        error = RpcError(
            ErrorCode.UNAVAILABLE, "the controller is shutting down", {"reason": "shutdown"}
        )
        for entry in self._entries.values():
            if entry.conn is not None:
                entry.conn.kick(CloseCode.GOING_AWAY, "controller shutting down")
            for completion in entry.session.fail_all(error):
                self._complete(entry, completion)
            self._end_streams(entry, "shutdown")
            if entry.grace_task is not None:
                entry.grace_task.cancel()
            if entry.deadline_timer is not None:
                entry.deadline_timer.cancel()
                entry.deadline_timer = None
        tasks = [t for t in (self._liveness, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- registry

    def entries(self) -> list[BridgeEntry]:
        return list(self._entries.values())

    def entry(self, bridge_id: str) -> BridgeEntry | None:
        return self._entries.get(bridge_id)

    def _entry_for(self, bridge_id: str, name: str, owner_id: str) -> BridgeEntry:
        entry = self._entries.get(bridge_id)
        if entry is None:
            entry = BridgeEntry(
                id=bridge_id,
                name=name,
                owner_id=owner_id,
                session=ControllerSession(bridge_id=name, settings=self.settings),
            )
            self._entries[bridge_id] = entry
        return entry

    def _startup_entry(self, device: DeviceRef) -> BridgeEntry | None:
        """A bridge known from the store but not (yet) back since this controller started:
        it gets the grace period counted from the start, like any reconnecting bridge."""
        loop = asyncio.get_running_loop()
        remaining = self._started + self.settings.grace_period_s - loop.time()
        if remaining <= 0 or self._closing:
            return None
        entry = self._entry_for(device.bridge_id, device.bridge_name or device.bridge_id,
                                device.owner_id)
        entry.away_since = self._started
        entry.grace_task = self._spawn(self._grace(entry, remaining))
        return entry

    # -- calls

    async def call(
        self,
        target: DeviceRef | str,
        method: Method[P, R],
        params: P,
        *,
        timeout_s: float | None = None,
        request_id: str | None = None,
        settle: bool = True,
    ) -> R:
        """Call ``method`` (its descriptor, :mod:`protocol.methods`) with its params model on
        a device's bridge (``serial`` set to the device's) or on a bridge (its id); returns
        the method's result model (one that does not fit it: ``internal``, ``data["reason"]``
        ``invalid_result``). See :meth:`call_wire` for the other errors and the options."""
        raw = await self.call_wire(
            target, method.name, params.model_dump(exclude_unset=True, exclude_none=True),
            timeout_s=timeout_s, request_id=request_id, settle=settle,
        )
        return method.parse_result(raw)

    async def call_wire(
        self,
        target: DeviceRef | str,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
        on_result: Callable[[dict[str, Any]], None] | None = None,
        route: bool = True,
        request_id: str | None = None,
        settle: bool = True,
    ) -> dict[str, Any]:
        """:meth:`call` by the method's wire name with plain params and result: what a call
        forwarded from another replica or adopted from a recorded step carries.

        ``settle=False`` (with a ``request_id``): the call's shared wait (cluster mode) is left
        for the caller to end with :meth:`settle`, once it has recorded the result — so a
        replica dying in between leaves the wait for its successor, not a lost result.

        Returns the result, or raises :class:`RpcError`: ``bad_request`` (unknown method, bad
        params), ``unavailable`` (bridge away past its grace period, or restarted while a
        non-idempotent call was in flight), ``timeout``, or the bridge's own typed error.
        A call made while the bridge is reconnecting waits for it. In cluster mode, a call
        for a bridge connected to another replica is forwarded there (``route=False``: the
        forwarded end, which never forwards again).
        """
        if route and self.cluster is not None and on_result is None:
            bridge_id = target.bridge_id if isinstance(target, DeviceRef) else target
            local = self._entries.get(bridge_id)
            if local is None or local.conn is None:
                replica = await self.cluster.owner_elsewhere(bridge_id)
                if replica is not None:
                    return await self.cluster.forward(
                        replica, target, method, dict(params or {}), timeout_s=timeout_s
                    )
        p = dict(params or {})
        if isinstance(target, DeviceRef):
            p["serial"] = target.serial
            entry = self._entries.get(target.bridge_id) or self._startup_entry(target)
            label = str(target)
        else:
            entry = self._entries.get(target)
            label = entry.name if entry is not None else target
        if entry is None or entry.gone or self._closing:
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"bridge of {label} is not connected",
                {"reason": "bridge_disconnected"},
            )
        caps = entry.caps
        if caps is not None and caps.methods and not caps.supports(method):
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"bridge {entry.name} does not implement {method[:128]}",
                {"reason": "unsupported_method"},
            )
        cluster = self.cluster if request_id is not None else None
        if cluster is not None and request_id is not None:
            # A call a run may be resumed from: its wait is shared before it goes out, so that
            # a survivor can take it over if this replica dies, and a replica the bridge moves
            # to relays the result here (docs/cluster.md).
            await self._persist(cluster.awaiting(entry.id, request_id, entry.session.session_id))
        try:
            loop = asyncio.get_running_loop()
            pending = entry.session.register(
                method, p, now=loop.time(), timeout_s=timeout_s, request_id=request_id
            )
            waiter = _Waiter(loop.create_future(), on_result)
            entry.waiters[pending.id] = waiter
            self._wake(entry)
            log.debug("call %s %s on %s", pending.id, method, label)
            return await self._await(entry, pending, waiter, method, label)
        finally:
            if cluster is not None and request_id is not None and settle:
                self._spawn(self._persist(cluster.settled(entry.id, request_id)))

    async def settle(self, bridge_id: str, request_id: str) -> None:
        """End a call's shared wait its caller kept (``call(settle=False)``)."""
        if self.cluster is not None:
            await self._persist(self.cluster.settled(bridge_id, request_id))

    def session_of(self, bridge_id: str) -> str | None:
        """The bridge's current session id (its last ``hello``), None before one."""
        entry = self._entries.get(bridge_id)
        return entry.session.session_id if entry is not None else None

    def adopt(
        self,
        device: DeviceRef,
        request_id: str,
        method: str,
        params: dict[str, Any],
        *,
        sent_session: str,
        timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Wait again for a request a previous controller process sent on the bridge's
        session ``sent_session``: registered now (before the bridge's ``hello`` is answered),
        so the ``welcome`` lists it and the bridge re-sends the result it holds. It is never
        sent again: a bridge that restarted or no longer holds the result makes it fail
        ``unavailable``. Raises ``RpcError`` ``unavailable`` when the bridge is unknown.
        In cluster mode the wait is the cluster's: the bridge may come back to any replica."""
        if self.cluster is not None:
            return self.cluster.adopt(device, request_id, method, params,
                                      sent_session=sent_session, timeout_s=timeout_s)
        entry = self._entries.get(device.bridge_id) or self._startup_entry(device)
        if entry is None or entry.gone or self._closing:
            raise RpcError(
                ErrorCode.UNAVAILABLE, f"bridge of {device} is not connected",
                {"reason": "bridge_disconnected"},
            )
        if entry.session.is_open:  # registering now would send it again
            raise RpcError(
                ErrorCode.UNAVAILABLE, f"bridge of {device} reconnected before the adoption",
                {"reason": "adopted_too_late"},
            )
        loop = asyncio.get_running_loop()
        pending = entry.session.register(
            method, {**params, "serial": device.serial}, now=loop.time(), timeout_s=timeout_s,
            request_id=request_id, validate=False,
        )
        pending.resend = False
        pending.sent_session = sent_session
        waiter = _Waiter(loop.create_future(), None)
        entry.waiters[pending.id] = waiter
        self._wake(entry)
        log.info("adopted request %s %s on %s", pending.id, method, device)
        return loop.create_task(self._await(entry, pending, waiter, method, str(device)))

    def deliver(self, bridge_id: str, completion: Completion) -> bool:
        """A result the bridge gave another replica (it moved there) for a call pending here;
        False if it is not pending (a duplicate: dropped)."""
        entry = self._entries.get(bridge_id)
        done = entry.session.resolve(completion) if entry is not None else None
        if entry is None or done is None:
            return False
        self._complete(entry, done)
        return True

    async def _await(
        self, entry: BridgeEntry, pending: Pending, waiter: _Waiter, method: str, label: str
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        outcome = "ok"
        self._arm(entry, pending.deadline)
        try:
            completion = await waiter.future
            if completion is _EXPIRED:
                outcome = ErrorCode.TIMEOUT.value
                raise RpcError(
                    ErrorCode.TIMEOUT, f"{method} on {label} timed out", {"request": pending.id}
                )
            if completion.error is not None:
                outcome = completion.error.code.value
            return completion.unwrap()
        except asyncio.CancelledError:
            outcome = ErrorCode.CANCELLED.value
            entry.waiters.pop(pending.id, None)
            entry.session.cancel(pending.id)
            self._wake(entry)
            raise
        finally:
            spec_known = method in METHODS
            name = method if spec_known else "<unknown>"
            self.metrics.call_done(name, outcome, loop.time() - pending.created)

    def _arm(self, entry: BridgeEntry, deadline: float) -> None:
        """Make the bridge's deadline timer fire by ``deadline`` (a no-op when it already
        does: the common case, each call's deadline later than the earliest one's)."""
        timer = entry.deadline_timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        entry.deadline_timer = asyncio.get_running_loop().call_at(deadline, self._expire, entry)

    def _expire(self, entry: BridgeEntry) -> None:
        """The deadline timer fired: end the calls that are due (each waiter raises
        ``timeout``; the bridge gets a ``cancel`` for those it has), then set it again."""
        timer, entry.deadline_timer = entry.deadline_timer, None
        now = asyncio.get_running_loop().time()
        if timer is not None:
            now = max(now, timer.when())  # the loop may run a timer a hair early
        for completion in entry.session.expire(now):
            waiter = entry.waiters.pop(completion.id, None)
            if waiter is not None and not waiter.future.done():
                waiter.future.set_result(_EXPIRED)
        self._wake(entry)
        following = entry.session.next_deadline()
        if following is not None:
            self._arm(entry, following)

    async def device_call(
        self,
        principal: Principal,
        device: DeviceRef,
        method: Method[P, R],
        params: P | Mapping[str, Any],
        *,
        timeout_s: float | None = None,
        action: str | None = None,
    ) -> R:
        """A user's call on a device: authorize, call, audit (refusals and failures too).

        ``params``: the params model, or the user's plain params without ``serial``
        (validated here: invalid ones are a ``bad_request`` audited as such)."""
        name = action or method.name
        try:
            await authorize(principal, device, Action.USE, store=self.store)
            if self.gate is not None:
                self.gate(device)
        except RpcError as exc:
            await self.audit_device(principal, name, device, exc)
            raise
        try:
            typed = params if isinstance(params, BaseModel) else method.parse_params(
                {**params, "serial": device.serial})
            result = await self.call(device, method, _vouched(principal, device, typed),
                                     timeout_s=timeout_s)
        except RpcError as exc:
            await self.audit_device(principal, name, device, exc)
            raise
        await self.audit_device(principal, name, device, None)
        return result

    async def audit_device(
        self, principal: Principal, action: str, device: DeviceRef, error: RpcError | None
    ) -> None:
        detail: dict[str, Any] = {}
        if error is not None and error.data and "rule" in error.data:
            detail["rule"] = str(error.data["rule"])[:128]
        try:
            await self.audit.record(
                principal,
                action,
                device=str(device),
                outcome="ok" if error is None else error.code.value,
                detail=detail,
            )
        except Exception:  # a failing audit write is logged; it never hides the call's outcome
            log.exception("audit write failed for %s on %s", action, device)

    async def device_stream(
        self, principal: Principal, device: DeviceRef, params: dict[str, Any] | None = None
    ) -> LogStream:
        """A user's logcat stream on a device: authorize, subscribe, audit (here, also when
        the bridge is held by another replica, which then relays it: :meth:`subscribe_logcat`)."""
        action = "device.logcat.stream"
        hold = _StreamHold(principal.user_id, device.bridge_id,
                           principal.user_id != device.owner_id and not principal.is_admin)
        try:
            await authorize(principal, device, Action.USE, store=self.store)
            self._reserve_stream(hold)  # before the await: concurrent opens count too
            stream = await self.subscribe_logcat(device, _vouch(
                principal, device, LOGCAT_SUBSCRIBE.name, params))
            hold.stream = stream
        except RpcError as exc:
            self._stream_holds.discard(hold)
            await self.audit_device(principal, action, device, exc)
            raise
        except BaseException:
            self._stream_holds.discard(hold)
            raise
        await self.audit_device(principal, action, device, None)
        return stream

    def _reserve_stream(self, hold: _StreamHold) -> None:
        """Per-tenant stream quotas, the owner first: a user holds at most
        ``streams_per_user`` live streams; borrowers together hold at most
        ``borrower_streams_per_bridge`` of a bridge's stream slots, the rest stay the
        owner's (docs/security.md, "Bounds and secrets"). ``busy`` (429) beyond."""
        live = {h for h in self._stream_holds if h.stream is None or not h.stream.ended}
        self._stream_holds = live
        mine = sum(1 for h in live if h.user_id == hold.user_id)
        if mine >= self.streams_per_user:
            raise RpcError(ErrorCode.BUSY, f"at most {self.streams_per_user} live logcat "
                           "streams per user", {"rule": "stream_quota",
                                                "limit": self.streams_per_user})
        if hold.borrower:
            lent = sum(1 for h in live if h.borrower and h.bridge_id == hold.bridge_id)
            if lent >= self.borrower_streams_per_bridge:
                raise RpcError(ErrorCode.BUSY, "borrowers hold all the logcat streams this "
                               "device's bridge lends out; its owner's are kept free",
                               {"rule": "borrower_stream_quota",
                                "limit": self.borrower_streams_per_bridge})
        live.add(hold)

    # -- logcat streams

    async def subscribe_logcat(
        self, device: DeviceRef, params: dict[str, Any] | None = None, *, route: bool = True
    ) -> LogStream:
        """Start a logcat stream on ``device`` (caller authorized already); see LogStream.

        In cluster mode, for a bridge connected to another replica, that replica subscribes
        and relays the chunks here (``route=False``: the relaying end, which never routes
        again); the stream returned reads the same way (docs/cluster.md)."""
        made: list[LogStream] = []

        params = {k: v for k, v in (params or {}).items() if k != "serial"}
        if route and self.cluster is not None:
            local = self._entries.get(device.bridge_id)
            if local is None or local.conn is None:
                replica = await self.cluster.owner_elsewhere(device.bridge_id)
                if replica is not None:
                    return await self.cluster.stream(replica, device, params)

        def register(result: dict[str, Any]) -> None:
            channel = result.get("channel")
            entry = self._entries.get(device.bridge_id)
            if entry is None or not isinstance(channel, str) or not _usable(channel):
                return
            stream = LogStream(
                channel=channel,
                bridge_id=device.bridge_id,
                serial=device.serial,
                max_batches=self.settings.stream_queue_batches,
                params=params,
            )
            entry.streams[channel] = stream
            entry.subscriptions.add(stream)
            made.append(stream)

        await self.call_wire(device, LOGCAT_SUBSCRIBE.name, params, on_result=register)
        if not made:
            raise RpcError(ErrorCode.INTERNAL, "the bridge answered without a valid channel")
        return made[0]

    async def _resubscribe(self, entry: BridgeEntry, stream: LogStream) -> None:
        """After a reconnect: the bridge ended its streams with the link; subscribe again,
        with the buffer's tail so the stream resumes where the consumer stopped."""
        tail = min(
            RESYNC_TAIL_MAX, self.settings.logcat_batch_lines * self.settings.stream_queue_batches
        )
        params = {**stream.params, "tail": tail}

        def reroute(result: dict[str, Any]) -> None:
            channel = result.get("channel")
            if stream.ended or not isinstance(channel, str) or not _usable(channel):
                return
            stream.resync(channel, tail)
            entry.streams[channel] = stream

        device = DeviceRef(entry.id, stream.serial, entry.owner_id, entry.name)
        try:
            result = await self.call_wire(device, LOGCAT_SUBSCRIBE.name, params,
                                          on_result=reroute)
        except RpcError as exc:
            log.info("bridge %s: logcat of %s not resumed: %s", entry.name, stream.serial, exc)
            stream.end(f"resume_failed: {exc.code.value}")
            entry.subscriptions.discard(stream)
            return
        channel = result.get("channel")
        if stream.ended and isinstance(channel, str) and _usable(channel):
            # The consumer left while we were subscribing again: stop the new stream too.
            with contextlib.suppress(RpcError):
                await self.call(entry.id, LOGCAT_UNSUBSCRIBE,
                                LogcatUnsubscribeParams(channel=channel))

    async def unsubscribe(self, stream: LogStream) -> None:
        """Stop a stream: at once here; on the bridge's side in the background (best effort:
        it may be gone already, and it ends its streams with the link anyway). The caller —
        a consumer's socket handler — never waits for the bridge, so a bridge dropping in that
        moment cannot hold the handler (and a controller shutdown) through the grace period."""
        stream.end("unsubscribed")
        if self.cluster is not None and self.cluster.stop_stream(stream):
            return  # relayed from another replica: the cluster tells it to stop
        entry = self._entries.get(stream.bridge_id)
        if entry is None:
            return
        entry.subscriptions.discard(stream)
        if entry.streams.pop(stream.channel, None) is None:
            return
        if not entry.is_open or self._closing:
            return
        self._spawn(self._unsubscribe_on_bridge(entry.id, stream.channel))

    async def _unsubscribe_on_bridge(self, bridge_id: str, channel: str) -> None:
        with contextlib.suppress(RpcError):
            await self.call(
                bridge_id,
                LOGCAT_UNSUBSCRIBE,
                LogcatUnsubscribeParams(channel=channel),
                timeout_s=self.settings.rpc_timeout_s,
            )

    def _end_screens(self, entry: BridgeEntry, reason: str) -> None:
        screens = list(entry.screens.values())
        entry.screens.clear()
        for screen in screens:
            screen.end(reason)

    def _end_streams(self, entry: BridgeEntry, reason: str) -> None:
        self._end_screens(entry, reason)
        for stream in entry.subscriptions:
            stream.end(reason)
        entry.subscriptions.clear()
        entry.streams.clear()

    # -- the bridge endpoint

    async def serve(self, websocket: BridgeSocket, principal: Principal) -> None:
        """Run one accepted bridge WebSocket until it ends (the ``/v1/bridge`` handler)."""
        assert principal.bridge_id is not None
        # The live connection of this bridge is replaced only by one that has proved itself:
        # a valid, compatible ``hello`` first. Garbage, a silent probe or a newer protocol is
        # closed here and never touches the bridge's entry (docs/protocol.md, "Handshake").
        pending = _Handshake(principal.token_id)
        self._handshakes.add(pending)
        try:
            hello = await self._await_hello(websocket, principal.name)
        finally:
            self._handshakes.discard(pending)
        if hello is None:
            return
        if pending.revoked:  # its token was revoked while we waited for the hello
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.close_timeout_s):
                    await websocket.close(CloseCode.UNAUTHORIZED, "bridge token revoked")
            return
        entry = self._entry_for(principal.bridge_id, principal.name, principal.user_id)
        entry.token_id = principal.token_id
        conn = Connection(websocket, lambda c: self._write(entry, c))
        old = entry.conn
        if old is not None:
            log.info("bridge %s: a new connection replaces the current one (4409)", entry.name)
            old.kick(CloseCode.REPLACED, "replaced by a newer session of this bridge")
            entry.session.connection_lost()
        entry.conn = conn
        entry.gone = False
        entry.away_since = None
        entry.connections += 1
        if entry.grace_task is not None:
            entry.grace_task.cancel()
            entry.grace_task = None
        entry.session.connection_made()
        if self.cluster is not None:
            await self._persist(self.cluster.claimed(entry))
        self.metrics.reconnects.inc()
        if self._closing:
            conn.kick(CloseCode.GOING_AWAY, "controller shutting down")
        hook = getattr(websocket, "frame_hook", _NO_HOOK)
        if hook is None:  # websockets' own connection (controller.hub.wsserver)
            websocket.frame_hook = lambda data: self._result_now(entry, conn, data)  # type: ignore[attr-defined]
        try:
            if not conn.ending:
                # This task reads; a kick (another connection of the bridge, liveness,
                # revocation, shutdown) or a failed writer cancels it (Connection._end).
                conn.reader = asyncio.current_task()
                await self._read(entry, conn, hello)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not conn.ending or task is None or task.uncancel() > 0:
                raise  # cancelled from outside, not by the connection's end
        except Exception as exc:
            if not _is_disconnect(exc):
                log.warning("bridge %s: connection task failed: %r", entry.name, exc)
        finally:
            conn.reader = None
            conn.ending = True  # no new writer from here on
            conn.stop_timers()
            writer = conn.writer
            if isinstance(writer, asyncio.Task):
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
            failure = conn.failure
            if failure is not None and not _is_disconnect(failure):
                log.warning("bridge %s: connection task failed: %r", entry.name, failure)
            if conn.close_code is not None:
                log.info("bridge %s: closing with %s (%s)", entry.name, conn.close_code,
                         conn.close_reason)
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.settings.close_timeout_s):
                        await websocket.close(conn.close_code, conn.close_reason[:120])
            await self._detach(entry, conn)

    async def _detach(self, entry: BridgeEntry, conn: Connection) -> None:
        if entry.conn is not conn:
            return  # replaced: the new connection owns the session now
        entry.conn = None
        entry.session.connection_lost()
        entry.streams.clear()  # the bridge ends its streams with the link; resumed on return
        self._end_screens(entry, "bridge_disconnected")
        if self.cluster is not None:
            await self._persist(self.cluster.released(entry))
        entry.away_since = asyncio.get_running_loop().time()
        log.info("bridge %s disconnected; %d calls pending, grace %.3gs", entry.name,
                 entry.session.pending_count, self.settings.grace_period_s)
        if not self._closing:
            entry.grace_task = self._spawn(self._grace(entry, self.settings.grace_period_s))
        entry.last_seen_at = utcnow()
        self.store.seen.bridge(entry.id, entry.last_seen_at)  # written behind, never here

    async def _grace(self, entry: BridgeEntry, delay: float) -> None:
        await asyncio.sleep(delay)
        if entry.conn is not None:
            return
        entry.gone = True
        entry.grace_task = None
        error = RpcError(
            ErrorCode.UNAVAILABLE,
            f"bridge {entry.name} did not come back within {self.settings.grace_period_s:g}s",
            {"reason": "bridge_disconnected"},
        )
        failed = entry.session.fail_all(error)
        for completion in failed:
            self._complete(entry, completion)
        self._end_streams(entry, "bridge_disconnected")
        log.info("bridge %s is disconnected (grace over, %d calls failed)", entry.name,
                 len(failed))

    async def _await_hello(self, websocket: BridgeSocket, name: str) -> Hello | None:
        """The first frame of a new connection, if it is a valid ``hello`` of our protocol
        version; else the connection is closed (4400 garbage, 4426 another version, 1013 no
        hello in time, 1001 shutting down) and None returned."""
        code, reason = CloseCode.BAD_REQUEST, ""
        try:
            async with asyncio.timeout(self.settings.handshake_timeout_s):
                message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return None
            data = message.get("bytes")
            if data is None:
                reason = "frames are binary msgpack maps"
            else:
                frame = await self.decode(data)
                if not isinstance(frame, Hello):
                    reason = f"the first frame must be hello, not {frame.t}"
                elif frame.protocol != PROTOCOL_VERSION:
                    code = CloseCode.INCOMPATIBLE
                    reason = (f"bridge speaks protocol {frame.protocol}, controller "
                              f"{PROTOCOL_VERSION}")
                elif self._closing:
                    code, reason = CloseCode.GOING_AWAY, "controller shutting down"
                else:
                    return frame
        except TimeoutError:
            code, reason = CloseCode.TRY_AGAIN_LATER, "no hello in time"
        except DecodeError as exc:
            reason = f"bad hello: {exc}"
        except Exception as exc:
            if not _is_disconnect(exc):
                log.warning("bridge %s: handshake failed: %r", name, exc)
            return None
        log.info("bridge %s: connection refused before hello: %s (%s)", name, code, reason)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.settings.close_timeout_s):
                await websocket.close(code, reason[:120])
        return None

    async def decode(self, data: bytes) -> Any:
        """One frame from a bridge: small ones here, large ones in a worker thread (at most
        ``_LARGE_DECODES`` at once), so a 16 MiB frame never stalls the event loop and a crowd
        of them never multiplies its memory (docs/protocol.md, "Limits")."""
        if len(data) <= LARGE_FRAME_BYTES:
            return self.codec.decode(data)
        async with self._large_decodes:
            return await asyncio.to_thread(self.codec.decode, data)

    async def _read(self, entry: BridgeEntry, conn: Connection, hello: Hello) -> None:
        """Frames in until the peer goes or a rule is broken (``conn.kick`` says how to close);
        ``hello`` is the first, read and checked already (:meth:`_await_hello`)."""
        session = entry.session
        loop = asyncio.get_running_loop()
        first = True
        message: Any = None
        frame: Any = None
        outcome: Any = None
        while True:
            # Nothing of the previous frame stays alive while this waits (for hours, on an
            # idle bridge: the hello, the welcome): about 2.5 KB per idle bridge.
            message = frame = outcome = data = None
            if first:
                frame = hello
            else:
                message = await conn.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                if data is None:
                    conn.kick(CloseCode.BAD_REQUEST, "frames are binary msgpack maps")
                    return
                try:
                    frame = await self.decode(data)
                except DecodeError as exc:
                    if not self._bad_frame(entry, conn, exc, first):
                        return
                    continue
            if first and self.cluster is not None and isinstance(frame, Hello):
                session.foreign = await self.cluster.foreign(entry, frame)
            if entry.conn is not conn:
                return  # replaced: frames still arriving here are the new connection's business
            try:
                outcome = session.receive(frame, loop.time())
            except HandshakeRefused as exc:
                conn.kick(exc.close_code, str(exc))
                return
            except (UnexpectedFrame, InvalidState) as exc:
                conn.kick(CloseCode.BAD_REQUEST, str(exc))
                return
            first = False
            if isinstance(outcome, Completion):
                self._complete(entry, outcome)
                if entry.conn is conn:
                    self._ack(entry, conn)
            elif isinstance(outcome, Relay):
                self._spawn(self._relay(entry, conn, outcome.res))
            elif isinstance(outcome, Duplicate):
                log.debug("bridge %s: duplicate result %s (acked)", entry.name, outcome.id)
                self._ack(entry, conn)
            elif isinstance(outcome, Evt):
                await self._on_event(entry, outcome)
            elif isinstance(outcome, Resume):
                conn.wake()  # welcome and re-sent requests go first
                await self._on_resume(entry, outcome)
            else:
                conn.wake()  # a pong to the bridge's ping

    def _result_now(self, entry: BridgeEntry, conn: Connection, data: bytes) -> bool:
        """A small ``res`` frame, handled in the transport's read callback — the reader task
        is idle with nothing queued (the connection checks that), so the order of frames is
        the same as if it had read it — instead of one more trip through the event loop to
        wake the reader. The same steps as :meth:`_read` for a result; False (anything else:
        hello, events, pongs, a frame that does not decode, a large one): the reader reads
        it as usual."""
        if (len(data) > FAST_RESULT_BYTES or entry.conn is not conn or conn.ending
                or not entry.session.is_open):
            return False
        try:
            frame = self.codec.decode(data)
        except DecodeError:
            return False
        if not isinstance(frame, Res):
            return False
        try:
            outcome = entry.session.receive(frame, asyncio.get_running_loop().time())
        except HandshakeRefused as exc:
            conn.kick(exc.close_code, str(exc))
            return True
        except (UnexpectedFrame, InvalidState) as exc:
            conn.kick(CloseCode.BAD_REQUEST, str(exc))
            return True
        except Exception as exc:  # as in the reader: a bug ends the connection, not the loop
            conn._failed(exc)
            return True
        try:
            if isinstance(outcome, Completion):
                self._complete(entry, outcome)
                if entry.conn is conn:
                    self._ack(entry, conn)
            elif isinstance(outcome, Relay):
                self._spawn(self._relay(entry, conn, outcome.res))
            elif isinstance(outcome, Duplicate):
                log.debug("bridge %s: duplicate result %s (acked)", entry.name, outcome.id)
                self._ack(entry, conn)
        except Exception as exc:
            conn._failed(exc)
        return True

    def _bad_frame(
        self, entry: BridgeEntry, conn: Connection, exc: DecodeError, first: bool
    ) -> bool:
        """A frame that did not decode: close 4400 if we cannot tell what it was (or it was
        the first), else fail the one call it answers. True: keep reading."""
        if first or exc.kind is None:
            conn.kick(CloseCode.BAD_REQUEST, str(exc)[:120])
            return False
        log.warning("bridge %s: malformed %s frame: %s", entry.name, exc.kind, exc)
        if exc.kind == "res" and exc.frame_id is not None:
            completion = entry.session.fail(
                exc.frame_id,
                RpcError(ErrorCode.INTERNAL, "the bridge sent a malformed result"),
            )
            if completion is not None:
                self._complete(entry, completion)
                conn.wake()
        return True

    async def _write(self, entry: BridgeEntry, conn: Connection) -> None:
        """The only drain of the session's outgoing frames while ``conn`` is current: runs
        while there is something to send (``conn.writer``; see :meth:`Connection.wake`)."""
        try:
            while entry.conn is conn:
                conn.again = False
                acks = conn.ack_due
                conn.ack_due = False
                for frame in entry.session.frames_to_send(acks=acks):
                    try:
                        data = self.codec.encode(frame)
                    except (EncodeError, DecodeError) as exc:  # FrameTooLarge: a DecodeError
                        self._unsendable(entry, frame, exc)
                        continue
                    await conn.ws.send_bytes(data)
                if not conn.again:
                    return
        finally:
            # In the same step as the last check of ``again`` (one drain at a time): a wake
            # from now on starts a new one.
            conn.writer = None

    def _ack(self, entry: BridgeEntry, conn: Connection) -> None:
        if entry.session.acks_waiting >= ACK_BATCH:
            conn.stop_timers()
            conn.ack_due = True
            conn.wake()
        else:
            conn.ack_soon()

    async def _relay(self, entry: BridgeEntry, conn: Connection, res: Res) -> None:
        """A held result for a wait elsewhere in the cluster: acked once it reached it."""
        assert self.cluster is not None
        try:
            reached = await self.cluster.relay(entry, res)
        except Exception:
            log.exception("bridge %s: relaying result %s failed", entry.name, res.id)
            return
        if reached and entry.conn is conn:
            entry.session.ack(res.id)
            self._ack(entry, conn)

    def _unsendable(self, entry: BridgeEntry, frame: Any, exc: Exception) -> None:
        log.warning("bridge %s: cannot send %s frame: %s", entry.name, frame.t, exc)
        if isinstance(frame, Req):
            completion = entry.session.fail(
                frame.id, RpcError(ErrorCode.BAD_REQUEST, f"request cannot be sent: {exc}")
            )
            if completion is not None:
                self._complete(entry, completion)

    def _complete(self, entry: BridgeEntry, completion: Completion) -> None:
        waiter = entry.waiters.pop(completion.id, None)
        if waiter is None or waiter.future.done():
            return
        if waiter.on_result is not None and completion.error is None:
            waiter.on_result(completion.result or {})
        waiter.future.set_result(completion)

    async def _on_resume(self, entry: BridgeEntry, resume: Resume) -> None:
        hello = entry.session.hello
        assert hello is not None
        for completion in resume.failed:
            self._complete(entry, completion)
        entry.streams.clear()
        for stream in list(entry.subscriptions):
            self._spawn(self._resubscribe(entry, stream))
        entry.caps = hello.caps
        entry.software = hello.software
        entry.devices = admissible(entry.name, {d.serial: d for d in hello.devices})
        entry.connected_at = entry.last_seen_at = utcnow()
        log.info(
            "bridge %s connected (session %s, %s, %d devices, %d re-sent, %d failed)",
            entry.name, resume.welcome.session, "resumed" if resume.resumed else "new",
            len(entry.devices), len(resume.resent), len(resume.failed),
        )
        await self._persist_devices(entry)
        self.store.seen.bridge(entry.id, entry.last_seen_at)

    async def _on_event(self, entry: BridgeEntry, evt: Evt) -> None:
        if evt.channel == DEVICES_CHANNEL:
            try:
                changed = DevicesChanged.model_validate(evt.data)
            except ValidationError as exc:
                log.warning("bridge %s: malformed inventory event: %s", entry.name,
                            exc.error_count())
                return
            entry.devices = admissible(entry.name, {d.serial: d for d in changed.devices})
            log.info("bridge %s: inventory now %d devices", entry.name, len(entry.devices))
            await self._persist_devices(entry)
            return
        screen = entry.screens.get(evt.channel)
        if screen is not None:
            screen.on_event(evt)  # never blocks: each viewer keeps only what it can show
            return
        stream = entry.streams.get(evt.channel)
        if stream is None:
            log.debug("bridge %s: event on unknown channel %s", entry.name, evt.channel)
            return
        try:
            batch = LogBatch.from_event(evt)
        except RpcError as exc:
            log.warning("bridge %s: malformed log batch on %s: %s", entry.name, evt.channel, exc)
            return
        stream.feed(batch)
        if stream.ended:
            entry.streams.pop(evt.channel, None)
            entry.subscriptions.discard(stream)
        elif stream.queued * 2 >= stream.max_batches:
            # Let the stream's consumer run before the next frame is read: a burst read in one
            # go would otherwise fill its queue before it had a chance to drain it. Only from
            # half full: a turn of the event loop per batch was a tenth of the relay's cost
            # (docs/benchmarks.md), and the reader gives the consumer its turn anyway whenever
            # it waits for the socket.
            await asyncio.sleep(0)

    async def _persist_devices(self, entry: BridgeEntry) -> None:
        if self.cluster is not None:
            await self._persist(self.cluster.inventory(entry))
        inventory = {s: d.model_dump(mode="json") for s, d in entry.devices.items()}
        if inventory:
            # A task of its own: the reader is cancelled with its connection, and a bridge
            # that drops right after hello must still be remembered with its devices.
            self._spawn(self._write_inventory(entry, inventory))

    async def _write_inventory(self, entry: BridgeEntry, inventory: dict[str, Any]) -> None:
        async with entry.store_lock:  # FIFO: the latest inventory is written last
            await self._persist(devices_seen(self.store, entry.id, inventory))

    async def _persist(self, work: Any) -> None:
        try:
            await work
        except Exception:  # the store (or Redis) being down must not take the link down
            log.exception("store write failed")

    # -- liveness and revocation

    async def _liveness_loop(self) -> None:
        loop = asyncio.get_running_loop()
        tick = self.settings.liveness_interval_s / _LIVENESS_TICKS
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            for entry in list(self._entries.values()):
                conn = entry.conn
                if conn is None or not entry.session.is_open:
                    continue
                verdict = entry.session.liveness(now)
                if verdict is Liveness.PING:
                    conn.wake()
                elif verdict is Liveness.DEAD:
                    log.warning("bridge %s missed %d liveness pings: dropping it", entry.name,
                                self.settings.liveness_missed_max)
                    conn.kick(CloseCode.INTERNAL_ERROR, "liveness pings unanswered")

    async def on_token_revoked(self, token: Token) -> None:
        """Revocation hook: a bridge connected with a revoked token is closed with 4401."""
        self.kick_token(token.id)

    def forget(self, bridge_id: str, serial: str | None = None) -> None:
        """Drop what this hub remembers of a bridge that is not connected here (``serial``
        None) or of one of its devices (``droidwire device forget``, docs/cluster.md)."""
        entry = self._entries.get(bridge_id)
        if entry is None or entry.conn is not None:
            return
        if serial is not None:
            entry.devices.pop(serial, None)
            return
        if entry.grace_task is not None:
            entry.grace_task.cancel()
        del self._entries[bridge_id]

    def kick_token(self, token_id: str) -> None:
        """Close (4401) the bridge connections made with token ``token_id`` (revoked here, or
        on another replica: docs/cluster.md)."""
        for entry in self._entries.values():
            if entry.token_id == token_id and entry.conn is not None:
                entry.conn.kick(CloseCode.UNAUTHORIZED, "bridge token revoked")
        for pending in self._handshakes:  # connections still waiting for their hello
            if pending.token_id == token_id:
                pending.revoked = True

    # -- helpers

    def _connected_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.conn is not None)

    def _wake(self, entry: BridgeEntry) -> None:
        if entry.conn is not None:
            entry.conn.wake()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _vouch(
    principal: Principal, device: DeviceRef, method: str, params: dict[str, Any] | None
) -> dict[str, Any] | None:
    """``params`` with ``as_owner`` when the caller owns the device (the bridge's ``full``
    profile is the owner's alone): never for a borrower nor an admin acting on another's."""
    if principal.user_id != device.owner_id or principal.bridge_id is not None:
        return params
    spec = METHODS.get(method)
    fields = getattr(spec.params, "model_fields", {}) if spec is not None else {}
    if "as_owner" not in fields:
        return params
    return {**(params or {}), "as_owner": True}


def _vouched(principal: Principal, device: DeviceRef, params: P) -> P:
    """:func:`_vouch` for a params model."""
    if principal.user_id != device.owner_id or principal.bridge_id is not None:
        return params
    if "as_owner" not in type(params).model_fields:
        return params
    return params.model_copy(update={"as_owner": True})


def _usable(channel: str) -> bool:
    """A channel a subscription may use (not malformed, not a reserved ``$name``)."""
    return is_channel(channel) and not channel.startswith("$")


def _is_disconnect(exc: BaseException) -> bool:
    """A send or receive on a socket that is already gone: the normal end, not a failure."""
    from starlette.websockets import WebSocketDisconnect

    return isinstance(exc, WebSocketDisconnect | RuntimeError | OSError)
