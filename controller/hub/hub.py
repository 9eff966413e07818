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
  probe or another version is closed without touching the live one
  (:meth:`controller.hub.link.BridgeLink.await_hello`);
* frames are decoded within their kind's limits (:mod:`protocol.codec`), large ones in a
  worker thread (:meth:`controller.hub.link.BridgeLink.decode`), so a hostile frame neither
  stalls the loop nor balloons;
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

Device calls from users go through :meth:`Hub.device_call` (:mod:`controller.hub.user_calls`):
THE authorization check (:func:`controller.auth.authorize`), the call, and an audit entry, in
that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ValidationError

from controller.audit import AuditLog
from controller.auth.authorization import DeviceRef, Principal
from controller.config import DEFAULT_BORROWER_STREAMS_PER_BRIDGE, DEFAULT_STREAMS_PER_USER
from controller.hub.connection import BridgeSocket, Connection
from controller.hub.entry import EXPIRED, BridgeEntry, BridgeState, Handshake, Waiter
from controller.hub.hooks import ClusterHooks, LocalHooks
from controller.hub.inventory import admissible
from controller.hub.link import BridgeLink, is_disconnect
from controller.hub.logcat import LogcatStreams
from controller.hub.metrics import HubMetrics
from controller.hub.screen import ScreenFeeds
from controller.hub.streams import LogStream
from controller.hub.tunnel import Tunnels
from controller.hub.user_calls import UserCalls
from controller.store import Store, Token, devices_seen, utcnow
from protocol.closecodes import CloseCode
from protocol.envelope import DEVICES_CHANNEL, Evt
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    METHODS,
    DevicesChanged,
    Method,
    parse_log_batch,
)
from protocol.session import Completion, ControllerSession, Liveness, Pending, Resume
from protocol.settings import Settings

__all__ = ["BridgeEntry", "BridgeSocket", "BridgeState", "ClusterHooks", "Connection", "Hub"]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
log = logging.getLogger("droidwire.controller.hub")


# Liveness is checked this many times per interval, so a ping goes out close to on time.
_LIVENESS_TICKS = 4
# Bridges checked per turn of the event loop (docs/benchmarks.md, "The storm's loop delay").
_LIVENESS_STEP = 64
# BridgeSocket.frame_hook where the socket has none (Starlette's).
_NO_HOOK = object()


class Hub(UserCalls):
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
        self._entries: dict[str, BridgeEntry] = {}
        self.link = BridgeLink(self)  # frames in and out of the bridges' connections
        # Tenancy quotas on users' logcat streams (the app sets them from its config).
        self.streams_per_user = DEFAULT_STREAMS_PER_USER
        self.borrower_streams_per_bridge = DEFAULT_BORROWER_STREAMS_PER_BRIDGE
        self.logcat = LogcatStreams(self)  # logcat subscriptions, within those quotas
        self._handshakes: set[Handshake] = set()  # connections waiting for their hello
        self._tasks: set[asyncio.Task[Any]] = set()
        self._liveness: asyncio.Task[None] | None = None
        self._started = 0.0
        self._closing = False
        # What the other replicas are asked and told: nothing, unless the app sets the
        # cluster (cluster mode, docs/cluster.md).
        self.hooks: ClusterHooks = LocalHooks()
        self.screens = ScreenFeeds(self)  # live screens, one bridge stream per device
        self.tunnels = Tunnels(self)  # remote adb tunnels (docs/tunnel.md)
        # Set by the app: refuses a call on a device that may not serve now (the owner's
        # health thresholds, controller.health); raises RpcError.
        self.gate: Callable[[DeviceRef], None] | None = None

    @property
    def cluster(self) -> ClusterHooks | None:
        """The cluster this replica belongs to (cluster mode), None for a lone controller."""
        return None if isinstance(self.hooks, LocalHooks) else self.hooks

    @cluster.setter
    def cluster(self, cluster: ClusterHooks | None) -> None:
        self.hooks = LocalHooks() if cluster is None else cluster

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
        self.tunnels.end_all("shutdown")
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

    async def held_elsewhere(self, bridge_id: str) -> str | None:
        """The replica that holds ``bridge_id``'s session when this one does not (cluster
        mode): where its calls, streams, tunnels and screens are served. None when the bridge
        is connected here, or nowhere (it may come back here)."""
        local = self._entries.get(bridge_id)
        if local is not None and local.conn is not None:
            return None
        return await self.hooks.owner_elsewhere(bridge_id)

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
        validate: bool = True,
    ) -> dict[str, Any]:
        """:meth:`call` by the method's wire name with plain params and result: what a call
        forwarded from another replica or adopted from a recorded step carries.

        ``validate=False``: params this process built from values it checked already (a
        tunnel's writes, whose bytes may be a view of the client's frame, which the params
        model does not take); the bridge validates every request it gets in any case.

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
        if route and on_result is None:
            bridge_id = target.bridge_id if isinstance(target, DeviceRef) else target
            replica = await self.held_elsewhere(bridge_id)
            if replica is not None:
                return await self.hooks.forward(
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
        if request_id is not None:
            # A call a run may be resumed from: its wait is shared before it goes out, so that
            # a survivor can take it over if this replica dies, and a replica the bridge moves
            # to relays the result here (docs/cluster.md).
            await self._persist(self.hooks.awaiting(entry.id, request_id,
                                                    entry.session.session_id))
        try:
            loop = asyncio.get_running_loop()
            pending = entry.session.register(
                method, p, now=loop.time(), timeout_s=timeout_s, request_id=request_id,
                validate=validate,
            )
            waiter = Waiter(loop.create_future(), on_result)
            entry.waiters[pending.id] = waiter
            self._wake(entry)
            log.debug("call %s %s on %s", pending.id, method, label)
            return await self._await(entry, pending, waiter, method, label)
        finally:
            if request_id is not None and settle:
                self._spawn(self._persist(self.hooks.settled(entry.id, request_id)))

    async def settle(self, bridge_id: str, request_id: str) -> None:
        """End a call's shared wait its caller kept (``call(settle=False)``)."""
        await self._persist(self.hooks.settled(bridge_id, request_id))

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
        shared = self.hooks.adopt(device, request_id, method, params,
                                  sent_session=sent_session, timeout_s=timeout_s)
        if shared is not None:
            return shared
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
        waiter = Waiter(loop.create_future(), None)
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
        self, entry: BridgeEntry, pending: Pending, waiter: Waiter, method: str, label: str
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        outcome = "ok"
        self._arm(entry, pending.deadline)
        try:
            completion = await waiter.future
            if completion is EXPIRED:
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
                waiter.future.set_result(EXPIRED)
        self._wake(entry)
        following = entry.session.next_deadline()
        if following is not None:
            self._arm(entry, following)

    async def subscribe_logcat(
        self, device: DeviceRef, params: dict[str, Any] | None = None, *, route: bool = True
    ) -> LogStream:
        """Start a logcat stream on ``device`` (caller authorized already):
        :meth:`LogcatStreams.subscribe <controller.hub.logcat.LogcatStreams.subscribe>`."""
        return await self.logcat.subscribe(device, params, route=route)

    async def unsubscribe(self, stream: LogStream) -> None:
        """Stop a stream, never waiting for the bridge:
        :meth:`LogcatStreams.unsubscribe <controller.hub.logcat.LogcatStreams.unsubscribe>`."""
        await self.logcat.unsubscribe(stream)

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
        pending = Handshake(principal.token_id)
        self._handshakes.add(pending)
        try:
            hello = await self.link.await_hello(websocket, principal.name)
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
        conn = Connection(websocket, lambda c: self.link.write(entry, c))
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
        await self._persist(self.hooks.claimed(entry))
        self.metrics.reconnects.inc()
        if self._closing:
            conn.kick(CloseCode.GOING_AWAY, "controller shutting down")
        hook = getattr(websocket, "frame_hook", _NO_HOOK)
        if hook is None:  # websockets' own connection (controller.hub.wsserver)
            websocket.frame_hook = lambda data: self.link.result_now(entry, conn, data)  # type: ignore[attr-defined]
        try:
            if not conn.ending:
                # This task reads; a kick (another connection of the bridge, liveness,
                # revocation, shutdown) or a failed writer cancels it (Connection._end).
                conn.reader = asyncio.current_task()
                reading = self.link.read(entry, conn, hello)
                del hello  # read() lets go of it after the first frame (~2 KB per idle bridge)
                await reading
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not conn.ending or task is None or task.uncancel() > 0:
                raise  # cancelled from outside, not by the connection's end
        except Exception as exc:
            if not is_disconnect(exc):
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
            if failure is not None and not is_disconnect(failure):
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
        await self._persist(self.hooks.released(entry))
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
        entry.session.hello = None  # applied below; not kept for the connection's life (~2 KB)
        for completion in resume.failed:
            self._complete(entry, completion)
        entry.streams.clear()
        for stream in list(entry.subscriptions):
            self._spawn(self.logcat.resubscribe(entry, stream))
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

    def _on_event(
        self, entry: BridgeEntry, channel: str, seq: int, data: Any
    ) -> Awaitable[None] | None:
        """Hand one ``evt`` (its checked channel, seq and data) to its channel's end, in the
        reader's step; what the reader must still await before it reads the next frame, if
        anything (an inventory's store work, or a turn of the event loop for a stream's
        consumer). For a log batch: no coroutine and no frame model, only the batch
        (docs/benchmarks.md)."""
        if channel == DEVICES_CHANNEL:
            return self._on_inventory(entry, data)
        screen = entry.screens.get(channel)
        if screen is not None:
            # never blocks: each viewer keeps only what it can show
            screen.on_event(Evt.trusted(channel=channel, seq=seq, data=data))
            return None
        stream = entry.streams.get(channel)
        if stream is None:
            log.debug("bridge %s: event on unknown channel %s", entry.name, channel)
            return None
        try:
            batch = parse_log_batch(data, seq=seq)
        except RpcError as exc:
            log.warning("bridge %s: malformed log batch on %s: %s", entry.name, channel, exc)
            return None
        stream.feed(batch)
        if stream.ended:
            entry.streams.pop(channel, None)
            entry.subscriptions.discard(stream)
        elif stream.queued * 2 >= stream.max_batches:
            # Let the stream's consumer run before the next frame is read: a burst read in one
            # go would otherwise fill its queue before it had a chance to drain it. Only from
            # half full: a turn of the event loop per batch was a tenth of the relay's cost
            # (docs/benchmarks.md), and the reader gives the consumer its turn anyway whenever
            # it waits for the socket.
            return asyncio.sleep(0)
        return None

    async def _on_inventory(self, entry: BridgeEntry, data: Any) -> None:
        try:
            changed = DevicesChanged.model_validate(data)
        except ValidationError as exc:
            log.warning("bridge %s: malformed inventory event: %s", entry.name,
                        exc.error_count())
            return
        entry.devices = admissible(entry.name, {d.serial: d for d in changed.devices})
        log.info("bridge %s: inventory now %d devices", entry.name, len(entry.devices))
        await self._persist_devices(entry)

    async def _persist_devices(self, entry: BridgeEntry) -> None:
        await self._persist(self.hooks.inventory(entry))
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
            for done, entry in enumerate(list(self._entries.values()), 1):
                if done % _LIVENESS_STEP == 0:
                    # A turn of the event loop: a pass over 5,000 bridges was one step of
                    # several ms, and of over 100 ms when they were all due a ping at once (15 s
                    # after a reconnect storm: a Ping frame and a wake-up each).
                    await asyncio.sleep(0)
                    now = loop.time()
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

