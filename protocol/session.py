"""Pure session objects for both ends: frames in, frames and outcomes out.

No sockets, no asyncio, no clock reads: every method that depends on time takes ``now``
(seconds on the caller's monotonic clock). The I/O layer (the bridge's connection, the
controller's hub) decodes a frame, hands it to :meth:`receive` (or the per-kind method),
acts on the returned outcome, then sends whatever :meth:`frames_to_send` drains — the shape of
websockets' ``receive_data()`` / ``data_to_send()``.

A session outlives its connections: it is created once per bridge process (bridge side) or per
bridge (controller side), and each WebSocket connection runs it through::

    DISCONNECTED ──connection_made──▶ HANDSHAKE ──hello/welcome──▶ OPEN
         ▲                               │                          │
         └──────────connection_lost──────┴──────────────────────────┘
    any state ──close()──▶ CLOSED (final)

Delivery theory (docs/design.md §3): the controller keeps every request *pending* until its result
arrives; the bridge keeps every result in an *outbox* until it is acked, and remembers
*finished* ids for a while. On reconnect the bridge's ``hello`` lists the ids it holds
(running or in the outbox); the controller re-sends the pending requests that are not among
them and answers with ``welcome`` listing all it still waits for; the bridge then re-sends the
outbox results the controller waits for and drops the rest. A re-sent request that is
running is ignored (its result will come), one that is done is answered from the outbox, one
already acked is ignored: exactly-once effect, at-least-once delivery, dedupe by id.

If the bridge *process* restarted (``hello.session`` differs from the one a request was sent
on), its memory is gone: idempotent methods are re-sent, the others fail with
``unavailable`` rather than risk running twice.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from protocol.closecodes import CloseCode
from protocol.envelope import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    ErrorBody,
    Evt,
    Frame,
    Hello,
    Ping,
    Pong,
    Req,
    Res,
    SharedSettings,
    Welcome,
    is_channel,
    is_request_id,
    new_request_id,
)
from protocol.errors import (
    ErrorCode,
    HandshakeRefused,
    InvalidState,
    RpcError,
    UnexpectedFrame,
)
from protocol.methods import METHODS, timeout_for, validate_params
from protocol.settings import DEFAULTS, Settings

__all__ = [
    "ACK_BATCH",
    "Admission",
    "BridgeSession",
    "Completion",
    "ControllerSession",
    "Duplicate",
    "Liveness",
    "Pending",
    "Relay",
    "Resume",
    "State",
    "WelcomeOutcome",
]

#: At most this many ids per ``ack`` frame.
ACK_BATCH = 1000
_MAX_METHOD = 128  # Req.method's bound


class State(IntEnum):
    DISCONNECTED = 0
    HANDSHAKE = 1
    OPEN = 2
    CLOSED = 3


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.DISCONNECTED: frozenset({State.HANDSHAKE, State.CLOSED}),
    State.HANDSHAKE: frozenset({State.OPEN, State.DISCONNECTED, State.CLOSED}),
    State.OPEN: frozenset({State.DISCONNECTED, State.CLOSED}),
    State.CLOSED: frozenset(),
}


class _Session:
    """State machine and outgoing queue shared by both ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = State.DISCONNECTED
        self._out: list[Frame] = []

    def _move(self, to: State) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise InvalidState(f"cannot go from {self.state.name} to {to.name}")
        self.state = to

    def _require(self, action: str, *states: State) -> None:
        if self.state not in states:
            raise InvalidState(f"cannot {action} in state {self.state.name}")

    def _expect(self, frame: Frame, *states: State) -> None:
        """The peer may only send ``frame`` in ``states``."""
        if self.state not in states:
            raise UnexpectedFrame(
                f"unexpected {frame.t} frame in state {self.state.name}",
                kind=frame.t,
                frame_id=getattr(frame, "id", None),
            )

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    def connection_made(self) -> None:
        """A transport connection is up (after the WebSocket handshake)."""
        self._move(State.HANDSHAKE)

    def connection_lost(self) -> None:
        """The connection dropped. Frames not yet drained are discarded; resume re-sends.

        A no-op when already disconnected or closed (a close then the socket's end)."""
        if self.state in (State.DISCONNECTED, State.CLOSED):
            return
        self._move(State.DISCONNECTED)
        self._out.clear()

    def frames_to_send(self) -> list[Frame]:
        """Drain the frames the I/O layer must send now, in order."""
        out, self._out = self._out, []
        return out

    def _on_ping(self, ping: Ping) -> None:
        self._out.append(Pong(id=ping.id))


# --- controller side -------------------------------------------------------------------------


@dataclass(slots=True)
class Pending:
    """A request the controller waits for."""

    id: str
    method: str
    params: dict[str, Any]
    created: float
    deadline: float
    sent_session: str | None = None  # the bridge session it was last sent on; None: never sent
    # False: never sent again — a request adopted after a controller restart, whose result
    # only the bridge's outbox can give; if not held there, it fails instead of running twice.
    resend: bool = True

    def frame(self) -> Req:
        # Trusted (no validation): register() checked the id, the method name and (normally) the params, so
        # the hot path does not validate our own frame a second time.
        return Req.trusted(id=self.id, method=self.method, params=self.params)


@dataclass(frozen=True, slots=True)
class Completion:
    """A pending request that ended: with the bridge's result or error, or locally failed."""

    id: str
    method: str
    result: dict[str, Any] | None = None
    error: RpcError | None = None

    def unwrap(self) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return self.result if self.result is not None else {}


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A result for an id that is not pending (unknown, or already completed): dropped."""

    id: str


@dataclass(frozen=True, slots=True)
class Relay:
    """A result for an id another controller replica waits for (``foreign``): not acked
    here; the I/O layer passes it on and calls :meth:`ControllerSession.ack` once it has."""

    res: Res


@dataclass(frozen=True, slots=True)
class Resume:
    """What ``hello`` did: ``resumed`` if the same bridge session came back."""

    welcome: Welcome
    resumed: bool
    resent: list[str]
    failed: list[Completion]


class Liveness(StrEnum):
    """What :meth:`ControllerSession.liveness` asks of the hub."""

    IDLE = "idle"  # nothing to do
    PING = "ping"  # a ping frame was queued
    DEAD = "dead"  # too many pings unanswered: close the connection


class ControllerSession(_Session):
    """The controller's view of one bridge: pending requests, acks, liveness.

    The hub calls :meth:`register` for each call (the returned :class:`Pending` carries the
    id to wait on), :meth:`receive` for each frame, :meth:`expire` and :meth:`liveness` on a
    timer (see :meth:`next_deadline`), and sends :meth:`frames_to_send` after each of them.
    """

    def __init__(self, *, bridge_id: str, settings: Settings = DEFAULTS) -> None:
        super().__init__(settings)
        self.bridge_id = bridge_id
        self.session_id: str | None = None  # the bridge's session (from hello)
        self.hello: Hello | None = None  # the latest hello (inventory, caps)
        self._pending: dict[str, Pending] = {}
        # Ids another replica of a cluster waits for on this bridge (set by the I/O layer
        # before the ``hello`` is received): listed in ``welcome.waiting``, their results
        # returned as Relay, unacked, so the bridge keeps them until they reach the waiter.
        self.foreign: set[str] = set()
        self._acks: list[str] = []
        self.duplicates = 0
        self._last_rx: float | None = None
        self._last_ping: float | None = None
        self._pings_out = 0

    # -- queries

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending(self, request_id: str) -> Pending | None:
        return self._pending.get(request_id)

    def pending_ids(self) -> list[str]:
        return list(self._pending)

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, for the hub's timer."""
        return min((p.deadline for p in self._pending.values()), default=None)

    # -- requests

    def register(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        now: float,
        timeout_s: float | None = None,
        request_id: str | None = None,
        validate: bool = True,
    ) -> Pending:
        """Record a call and queue its ``req`` if open (else it goes out on resume).

        Raises :class:`RpcError` ``bad_request`` for unknown methods or bad params (when
        ``validate``), :class:`InvalidState` when the session is closed or the id is taken.
        """
        self._require("register a request", State.DISCONNECTED, State.HANDSHAKE, State.OPEN)
        p = dict(params or {})
        if validate:
            validate_params(method, p)
        if not 1 <= len(method) <= _MAX_METHOD:
            raise RpcError(ErrorCode.BAD_REQUEST, "a method name is 1-128 characters")
        if request_id is not None and not is_request_id(request_id):
            raise InvalidState("a request id is a canonical UUID4 string")
        rid = request_id or new_request_id()
        if rid in self._pending:
            raise InvalidState(f"request id {rid} is already pending")
        pending = Pending(
            id=rid,
            method=method,
            params=p,
            created=now,
            deadline=now + timeout_for(method, self.settings, timeout_s),
        )
        self._pending[rid] = pending
        if self.state is State.OPEN:
            self._send(pending)
        return pending

    def _send(self, pending: Pending) -> None:
        pending.sent_session = self.session_id
        self._out.append(pending.frame())

    def _end(self, request_id: str, error: RpcError) -> Completion | None:
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return None
        if self.state is State.OPEN and pending.sent_session is not None:
            self._out.append(Cancel(id=request_id))
        return Completion(id=request_id, method=pending.method, error=error)

    def cancel(self, request_id: str) -> Completion | None:
        """Give up on a call (a ``cancel`` frame tells the bridge); None if not pending."""
        return self._end(request_id, RpcError(ErrorCode.CANCELLED, "cancelled by the caller"))

    def fail(self, request_id: str, error: RpcError) -> Completion | None:
        """End a call locally with ``error`` (the bridge is told to stop if it has it)."""
        return self._end(request_id, error)

    def fail_all(self, error: RpcError) -> list[Completion]:
        """End every pending call, e.g. when the grace period for a reconnect ran out."""
        return [c for rid in list(self._pending) if (c := self._end(rid, error)) is not None]

    def expire(self, now: float) -> list[Completion]:
        """End the calls whose deadline passed, with ``timeout``."""
        due = [p.id for p in self._pending.values() if p.deadline <= now]
        out: list[Completion] = []
        for rid in due:
            method = self._pending[rid].method
            done = self._end(rid, RpcError(ErrorCode.TIMEOUT, f"{method} timed out"))
            if done is not None:
                out.append(done)
        return out

    # -- frames from the bridge

    def receive(
        self, frame: Frame, now: float
    ) -> Resume | Completion | Duplicate | Relay | Evt | None:
        """Dispatch one frame from the bridge; frames a bridge must not send raise
        :class:`UnexpectedFrame` (close with 4400)."""
        if isinstance(frame, Hello):
            return self.on_hello(frame, now)
        if isinstance(frame, Res):
            return self.on_result(frame, now)
        if isinstance(frame, Evt):
            return self.on_event(frame, now)
        if isinstance(frame, Ping):
            self._expect(frame, State.OPEN)
            self._touch(now)
            self._on_ping(frame)
            return None
        if isinstance(frame, Pong):
            self.on_pong(frame, now)
            return None
        raise UnexpectedFrame(
            f"a bridge does not send {frame.t}", kind=frame.t, frame_id=getattr(frame, "id", None)
        )

    def on_hello(self, hello: Hello, now: float) -> Resume:
        """Accept the bridge's hello: queue ``welcome`` and the requests to re-send."""
        self._expect(hello, State.HANDSHAKE)
        if hello.protocol != PROTOCOL_VERSION:
            raise HandshakeRefused(
                CloseCode.INCOMPATIBLE,
                f"bridge speaks protocol {hello.protocol}, controller {PROTOCOL_VERSION}",
            )
        resumed = self.session_id is not None and hello.session == self.session_id
        self.session_id = hello.session
        self.hello = hello
        held = set(hello.held)
        resend: list[Pending] = []
        failed: list[Completion] = []
        for pending in list(self._pending.values()):
            if pending.id in held:
                continue  # running or done over there; the result will come
            same = pending.sent_session is None or pending.sent_session == hello.session
            spec = METHODS.get(pending.method)
            if not pending.resend:
                why = "the bridge no longer holds the request's result"
                reason = "result_lost" if same else "bridge_restarted"
            elif same or (spec is not None and spec.idempotent):
                resend.append(pending)
                continue
            else:
                why = "the bridge restarted while the request was in flight"
                reason = "bridge_restarted"
            del self._pending[pending.id]
            failed.append(
                Completion(
                    id=pending.id,
                    method=pending.method,
                    error=RpcError(
                        ErrorCode.UNAVAILABLE,
                        f"{why}; not re-sent because it may have run",
                        {"reason": reason},
                    ),
                )
            )
        welcome = Welcome(
            bridge=self.bridge_id,
            session=hello.session,
            resumed=resumed,
            waiting=[*self._pending, *(r for r in sorted(self.foreign) if r not in self._pending)],
            settings=SharedSettings.from_settings(self.settings),
        )
        self._move(State.OPEN)
        self._touch(now)
        self._out.append(welcome)
        for pending in resend:
            self._send(pending)
        return Resume(
            welcome=welcome, resumed=resumed, resent=[p.id for p in resend], failed=failed
        )

    def on_result(self, res: Res, now: float) -> Completion | Duplicate | Relay:
        """A result: completes its call, or is a duplicate (both acked), or is relayed (a
        ``foreign`` id: acked later, by :meth:`ack`)."""
        self._expect(res, State.OPEN)
        self._touch(now)
        if res.id not in self._pending and res.id in self.foreign:
            return Relay(res)
        self._acks.append(res.id)
        pending = self._pending.pop(res.id, None)
        if pending is None:
            self.duplicates += 1
            return Duplicate(id=res.id)
        error = res.error.to_error() if res.error is not None else None
        return Completion(id=res.id, method=pending.method, result=res.result, error=error)

    def on_event(self, evt: Evt, now: float) -> Evt:
        self._expect(evt, State.OPEN)
        self._touch(now)
        return evt

    def on_pong(self, pong: Pong, now: float) -> None:
        self._expect(pong, State.OPEN)
        self._touch(now)

    # -- liveness (docs/design.md §4.6)

    def _touch(self, now: float) -> None:
        self._last_rx = now
        self._pings_out = 0

    def liveness(self, now: float) -> Liveness:
        """Called on a timer: ping an idle, silent bridge; say DEAD after too many misses.

        Skipped while requests are pending: a slow compile is not a dead bridge (the
        transport's own keepalive still detects a dead TCP connection).
        """
        if self.state is not State.OPEN or self._pending:
            self._pings_out = 0
            return Liveness.IDLE
        interval = self.settings.liveness_interval_s
        if self._last_rx is not None and now - self._last_rx < interval:
            return Liveness.IDLE
        if self._last_ping is not None and now - self._last_ping < interval:
            return Liveness.IDLE
        if self._pings_out >= self.settings.liveness_missed_max:
            return Liveness.DEAD
        self._pings_out += 1
        self._last_ping = now
        self._out.append(Ping(id=new_request_id()))
        return Liveness.PING

    def ack(self, request_id: str) -> None:
        """A relayed result reached its waiter: ack it with the next drain."""
        self.foreign.discard(request_id)
        if self.state is State.OPEN:
            self._acks.append(request_id)

    def resolve(self, completion: Completion) -> Completion | None:
        """End a pending call with a result that reached this replica another way (relayed
        by the replica its bridge moved to); None if it is not pending."""
        pending = self._pending.pop(completion.id, None)
        if pending is None:
            return None
        return Completion(completion.id, pending.method, completion.result, completion.error)

    # -- lifecycle

    @property
    def acks_waiting(self) -> int:
        """Result ids received and not yet acked."""
        return len(self._acks)

    def frames_to_send(self, *, acks: bool = True) -> list[Frame]:
        """Drain the frames to send; ``acks=False`` keeps the acks for a later drain (the I/O
        layer batches them on a short timer: one ``ack`` per many results, not one each)."""
        out = super().frames_to_send()
        while self._acks and (acks or len(self._acks) >= ACK_BATCH):
            batch, self._acks = self._acks[:ACK_BATCH], self._acks[ACK_BATCH:]
            out.append(Ack.trusted(ids=batch))  # ids of validated results
        return out

    def connection_lost(self) -> None:
        super().connection_lost()
        if self.state is State.CLOSED:
            return
        self._acks.clear()  # unacked results are re-sent by the bridge and acked then
        self.foreign = set()
        self._pings_out = 0
        self._last_ping = None

    def close(self, error: RpcError | None = None) -> list[Completion]:
        """End the session for good; every pending call fails with ``error``."""
        if self.state is State.CLOSED:
            return []
        err = error or RpcError(ErrorCode.UNAVAILABLE, "the bridge session closed")
        self._out.clear()
        self._move(State.CLOSED)
        return self.fail_all(err)


# --- bridge side -----------------------------------------------------------------------------


class Admission(StrEnum):
    """What to do with an incoming ``req``."""

    RUN = "run"  # new: run the handler, then call complete()
    RUNNING = "running"  # already running: ignore, its result will come
    ANSWERED = "answered"  # done: its result was queued again from the outbox
    DUPLICATE = "duplicate"  # done and acked (or cancelled): ignore


@dataclass(frozen=True, slots=True)
class WelcomeOutcome:
    resent: list[str]  # outbox results queued again
    dropped: list[str]  # outbox results the controller no longer waits for
    orphaned: list[str]  # running requests nobody waits for: cancel them


@dataclass(slots=True)
class _Running:
    method: str
    started: float


class BridgeSession(_Session):
    """The bridge's side: admission with dedupe, an outbox until acked, finished-id memory.

    The connection calls :meth:`connection_made`, sends :meth:`hello`, feeds every frame to
    :meth:`receive`; for ``Admission.RUN`` it runs the handler (bounded by
    ``handler_concurrency``) and calls :meth:`complete` with its result or :class:`RpcError`.
    """

    def __init__(self, *, settings: Settings = DEFAULTS, session_id: str | None = None) -> None:
        super().__init__(settings)
        if session_id is not None and not is_request_id(session_id):
            raise ValueError("a bridge session id is a UUID4 string")
        self.session_id = session_id or new_request_id()
        self.bridge_id: str | None = None  # from welcome (the controller's word, from our token)
        self.shared: SharedSettings | None = None
        self._running: dict[str, _Running] = {}
        self._outbox: OrderedDict[str, Res] = OrderedDict()
        self._finished: OrderedDict[str, float] = OrderedDict()
        self._seq: dict[str, int] = {}
        self._hello_sent = False
        self.evicted = 0  # results evicted from a full outbox (never delivered)

    # -- queries

    def held_ids(self) -> list[str]:
        """Ids this bridge is running or holds a result for (``hello.held``)."""
        return [*self._running, *self._outbox]

    def unacked_results(self) -> list[Res]:
        return list(self._outbox.values())

    def running_ids(self) -> list[str]:
        return list(self._running)

    def is_running(self, request_id: str) -> bool:
        return request_id in self._running

    def is_finished(self, request_id: str) -> bool:
        return request_id in self._finished

    # -- handshake

    def connection_made(self) -> None:
        super().connection_made()
        self._hello_sent = False

    def make_hello(
        self,
        *,
        software: str,
        caps: Capabilities | None = None,
        devices: Sequence[DeviceInfo] = (),
    ) -> Hello:
        """Queue the first frame of this connection."""
        self._require("send hello", State.HANDSHAKE)
        if self._hello_sent:
            raise InvalidState("hello already sent on this connection")
        hello = Hello(
            session=self.session_id,
            software=software,
            caps=caps or Capabilities(),
            devices=list(devices),
            held=self.held_ids(),
        )
        self._hello_sent = True
        self._out.append(hello)
        return hello

    def on_welcome(self, welcome: Welcome, now: float) -> WelcomeOutcome:
        """The session is open: re-send the results the controller waits for, drop the rest."""
        self._expect(welcome, State.HANDSHAKE)
        if not self._hello_sent:
            raise UnexpectedFrame("welcome before hello", kind="welcome")
        if welcome.protocol != PROTOCOL_VERSION:
            raise HandshakeRefused(
                CloseCode.INCOMPATIBLE,
                f"controller speaks protocol {welcome.protocol}, bridge {PROTOCOL_VERSION}",
            )
        if welcome.session != self.session_id:
            raise HandshakeRefused(CloseCode.BAD_REQUEST, "welcome names another session")
        self.bridge_id = welcome.bridge
        self.shared = welcome.settings
        self._move(State.OPEN)
        waiting = set(welcome.waiting)
        resent: list[str] = []
        dropped: list[str] = []
        for rid in list(self._outbox):
            if rid in waiting:
                resent.append(rid)
                self._out.append(self._outbox[rid])
            else:
                dropped.append(rid)
                del self._outbox[rid]
                self._forget(rid, now)
        orphaned = [rid for rid in self._running if rid not in waiting]
        return WelcomeOutcome(resent=resent, dropped=dropped, orphaned=orphaned)

    # -- frames from the controller

    def receive(self, frame: Frame, now: float) -> WelcomeOutcome | Admission | bool | int | None:
        """Dispatch one frame from the controller (see the per-kind methods for results)."""
        if isinstance(frame, Welcome):
            return self.on_welcome(frame, now)
        if isinstance(frame, Req):
            return self.on_request(frame, now)
        if isinstance(frame, Ack):
            return self.on_ack(frame, now)
        if isinstance(frame, Cancel):
            return self.on_cancel(frame, now)
        if isinstance(frame, Ping):
            self._expect(frame, State.OPEN)
            self._on_ping(frame)
            return None
        if isinstance(frame, Pong):
            self._expect(frame, State.OPEN)
            return None
        raise UnexpectedFrame(
            f"a controller does not send {frame.t}",
            kind=frame.t,
            frame_id=getattr(frame, "id", None),
        )

    def on_request(self, req: Req, now: float) -> Admission:
        """Admit a request: run it only if this id was never seen."""
        self._expect(req, State.OPEN)
        if req.id in self._running:
            return Admission.RUNNING
        res = self._outbox.get(req.id)
        if res is not None:
            self._out.append(res)
            return Admission.ANSWERED
        if req.id in self._finished:
            return Admission.DUPLICATE
        self._running[req.id] = _Running(method=req.method, started=now)
        return Admission.RUN

    def reject(self, request_id: str, error: RpcError, now: float) -> Res | None:
        """Answer a request that cannot be admitted (e.g. malformed params) with ``error``.

        Like a result: kept until acked. None if the id is already known, or is not a valid
        request id (nothing can answer it: the caller closes with 4400 or ignores it).
        """
        if not is_request_id(request_id):
            return None
        if (
            request_id in self._running
            or request_id in self._outbox
            or request_id in self._finished
        ):
            return None
        self._running[request_id] = _Running(method="", started=now)
        return self.complete(request_id, error, now)

    def complete(
        self, request_id: str, outcome: dict[str, Any] | RpcError, now: float
    ) -> Res | None:
        """A handler finished: keep its result in the outbox (until acked) and send it if open.

        Returns None when the request was cancelled meanwhile (nobody waits for it).
        """
        self._require("complete a request", State.DISCONNECTED, State.HANDSHAKE, State.OPEN)
        if self._running.pop(request_id, None) is None:
            if request_id in self._finished:
                return None
            raise InvalidState(f"request {request_id} is not running")
        # Trusted: the id was admitted (a valid request id), exactly one of r / e is set here,
        # and the error body is built (validated) by ErrorBody.from_error.
        if isinstance(outcome, RpcError):
            res = Res.trusted(id=request_id, error=ErrorBody.from_error(outcome))
        else:
            res = Res.trusted(id=request_id, result=outcome)
        self._outbox[request_id] = res
        while len(self._outbox) > self.settings.outbox_max:
            oldest, _ = self._outbox.popitem(last=False)
            self.evicted += 1
            self._forget(oldest, now)
        if self.state is State.OPEN:
            self._out.append(res)
        self.prune(now)
        return res

    def on_cancel(self, cancel: Cancel, now: float) -> bool:
        """True if the request was running: the connection cancels its handler."""
        self._expect(cancel, State.OPEN)
        if self._running.pop(cancel.id, None) is not None:
            self._forget(cancel.id, now)
            return True
        if self._outbox.pop(cancel.id, None) is not None:
            self._forget(cancel.id, now)
        return False

    def on_ack(self, ack: Ack, now: float) -> int:
        """Forget acked results; returns how many were in the outbox."""
        self._expect(ack, State.OPEN)
        count = 0
        for rid in ack.ids:
            if self._outbox.pop(rid, None) is not None:
                count += 1
                self._forget(rid, now)
        self.prune(now)
        return count

    # -- finished-id memory

    def _forget(self, request_id: str, now: float) -> None:
        self._finished[request_id] = now
        self._finished.move_to_end(request_id)

    def prune(self, now: float) -> int:
        """Drop finished ids older than the TTL or beyond the size bound; returns how many."""
        removed = 0
        horizon = now - self.settings.finished_ttl_s
        while self._finished:
            rid, finished = next(iter(self._finished.items()))
            if finished > horizon and len(self._finished) <= self.settings.finished_max:
                break
            del self._finished[rid]
            removed += 1
        return removed

    # -- streams

    def next_seq(self, ch: str) -> int:
        """Take the channel's next ``seq`` (0, 1, 2, …), for callers that encode events
        themselves with :func:`protocol.codec.encode_event` (the logcat hot path)."""
        seq = self._seq.get(ch)
        if seq is None:  # a new channel: checked once, not on every batch
            if not is_channel(ch):
                raise ValueError(f"invalid channel name {ch[:70]!r}")
            seq = 0
        self._seq[ch] = seq + 1
        return seq

    def event(self, channel: str, data: Any) -> Evt:
        """Queue an ``evt`` on ``channel`` with its next ``seq``. Only when open:
        stream producers check :attr:`is_open` and count what they drop meanwhile."""
        self._require("send an event", State.OPEN)
        evt = Evt.trusted(channel=channel, seq=self.next_seq(channel), data=data)
        self._out.append(evt)
        return evt

    def close_channel(self, ch: str) -> None:
        self._seq.pop(ch, None)

    def close(self) -> None:
        """End the session for good (bridge shutting down)."""
        if self.state is not State.CLOSED:
            self._out.clear()
            self._move(State.CLOSED)
