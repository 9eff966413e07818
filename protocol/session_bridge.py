"""The bridge's end of a session: admission with dedupe, an outbox until acked, finished ids.

:class:`BridgeSession` admits each incoming request once (a re-sent one that is running is
ignored, one that is done is answered from the outbox), keeps results until the controller
acks them, and on ``welcome`` re-sends what the controller still waits for. Pure, like all of
:mod:`protocol.session` (where the delivery theory is): every method that depends on time takes
``now``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
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
from protocol.errors import HandshakeRefused, InvalidState, RpcError, UnexpectedFrame
from protocol.session_base import BaseSession, State
from protocol.settings import DEFAULTS, Settings

__all__ = ["Admission", "BridgeSession", "WelcomeOutcome"]


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


class BridgeSession(BaseSession):
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
