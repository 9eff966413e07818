"""The controller's end of a session: pending requests, acks, resume, liveness.

:class:`ControllerSession` keeps every request *pending* until its result arrives, re-sends on
reconnect what the bridge does not hold, acks results in batches and pings an idle bridge.
Pure, like all of :mod:`protocol.session` (where the delivery theory is): every method that
depends on time takes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from protocol.closecodes import CloseCode
from protocol.envelope import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Evt,
    Frame,
    Hello,
    Ping,
    Pong,
    Req,
    Res,
    SharedSettings,
    Welcome,
    is_request_id,
    new_request_id,
)
from protocol.errors import ErrorCode, HandshakeRefused, InvalidState, RpcError, UnexpectedFrame
from protocol.methods import METHODS, timeout_for, validate_params
from protocol.session_base import BaseSession, State
from protocol.settings import DEFAULTS, Settings

__all__ = [
    "ACK_BATCH",
    "Completion",
    "ControllerSession",
    "Duplicate",
    "Liveness",
    "Pending",
    "Relay",
    "Resume",
]

#: At most this many ids per ``ack`` frame.
ACK_BATCH = 1000
_MAX_METHOD = 128  # Req.method's bound


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


class ControllerSession(BaseSession):
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
            settings=_shared_settings(self.settings),
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
        self.event_arrived(now)
        return evt

    def event_arrived(self, now: float) -> None:
        """What :meth:`receive` does for an ``evt``, for a reader that did not build the frame
        (the logcat relay): :class:`UnexpectedFrame` unless the session is open."""
        if self.state is not State.OPEN:
            raise UnexpectedFrame(f"unexpected evt frame in state {self.state.name}", kind="evt")
        self._touch(now)

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


# The settings a welcome carries, made once per Settings object (the hub's, shared by every
# bridge): a storm of thousands of hellos builds thousands of welcomes.
_SHARED: tuple[Settings, SharedSettings] | None = None


def _shared_settings(settings: Settings) -> SharedSettings:
    global _SHARED
    cached = _SHARED
    if cached is None or cached[0] is not settings:
        cached = _SHARED = (settings, SharedSettings.from_settings(settings))
    return cached[1]
