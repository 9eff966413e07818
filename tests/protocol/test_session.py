"""Session scenarios as pure tests: frames go through the real codec, time is a number."""

from __future__ import annotations

import dataclasses
from random import Random
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from protocol.closecodes import CloseCode
from protocol.codec import decode, encode
from protocol.envelope import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    Evt,
    Hello,
    Ping,
    Pong,
    Req,
    Res,
    Welcome,
    new_request_id,
)
from protocol.errors import ErrorCode, HandshakeRefused, InvalidState, RpcError, UnexpectedFrame
from protocol.session import (
    ACK_BATCH,
    Admission,
    BridgeSession,
    Completion,
    ControllerSession,
    Duplicate,
    Liveness,
    Relay,
    Resume,
    State,
    WelcomeOutcome,
)
from protocol.settings import DEFAULTS

SHELL = {"serial": "emu-1", "argv": ["echo", "hi"]}


def wire(frames: list[Any]) -> list[Any]:
    return [decode(encode(f)) for f in frames]


class Link:
    """A controller and a bridge session joined by an in-memory 'connection'."""

    def __init__(self, **overrides: Any) -> None:
        self.settings = dataclasses.replace(DEFAULTS, **overrides)
        self.c = ControllerSession(bridge_id="bridge-1", settings=self.settings)
        self.b = BridgeSession(settings=self.settings)
        self.now = 0.0
        self.to_bridge: list[Any] = []
        self.to_controller: list[Any] = []
        self.c_out: list[Any] = []  # outcomes seen by the controller
        self.b_out: list[Any] = []  # outcomes seen by the bridge

    def connect(self, *, handshake: bool = True) -> None:
        self.c.connection_made()
        self.b.connection_made()
        self.b.make_hello(software="test", caps=Capabilities(devices=True))
        if handshake:
            self.settle()

    def drop(self) -> None:
        """The connection breaks: frames in flight are lost."""
        self.collect()
        self.to_bridge.clear()
        self.to_controller.clear()
        self.c.connection_lost()
        self.b.connection_lost()

    def collect(self) -> None:
        self.to_bridge += wire(self.c.frames_to_send())
        self.to_controller += wire(self.b.frames_to_send())

    def deliver_to_controller(self) -> list[Any]:
        self.collect()
        frames, self.to_controller = self.to_controller, []
        out = [self.c.receive(f, self.now) for f in frames]
        self.c_out += out
        return out

    def deliver_to_bridge(self) -> list[Any]:
        self.collect()
        frames, self.to_bridge = self.to_bridge, []
        out = [self.b.receive(f, self.now) for f in frames]
        self.b_out += out
        return out

    def settle(self) -> None:
        for _ in range(10):
            self.collect()
            if not self.to_bridge and not self.to_controller:
                return
            self.deliver_to_controller()
            self.deliver_to_bridge()
        raise AssertionError("no quiescence")

    def last_resume(self) -> Resume:
        return [o for o in self.c_out if isinstance(o, Resume)][-1]

    def last_welcome_outcome(self) -> WelcomeOutcome:
        return [o for o in self.b_out if isinstance(o, WelcomeOutcome)][-1]

    def completions(self) -> list[Completion]:
        return [o for o in self.c_out if isinstance(o, Completion)]


def test_happy_path_request_result_ack() -> None:
    link = Link()
    link.connect()
    assert link.c.state is State.OPEN and link.b.state is State.OPEN
    assert link.b.bridge_id == "bridge-1"
    assert link.b.shared is not None and link.b.shared.ping_interval_s == 10.0
    pending = link.c.register("device.shell", SHELL, now=0)
    assert pending.deadline == DEFAULTS.rpc_timeout_s
    assert link.deliver_to_bridge() == [Admission.RUN]
    res = link.b.complete(pending.id, {"exit_code": 0, "stdout": "hi\n"}, now=1)
    assert res is not None and res.ok
    [done] = link.deliver_to_controller()
    assert isinstance(done, Completion)
    assert done.unwrap() == {"exit_code": 0, "stdout": "hi\n"}
    assert link.c.pending_count == 0
    assert link.b.held_ids() == [pending.id]  # kept until the ack arrives
    assert link.deliver_to_bridge() == [1]
    assert link.b.held_ids() == []
    assert link.b.is_finished(pending.id)


def test_error_results_complete_with_rpc_error() -> None:
    link = Link()
    link.connect()
    p = link.c.register("device.shell", SHELL, now=0)
    link.deliver_to_bridge()
    link.b.complete(p.id, RpcError(ErrorCode.FORBIDDEN, "no", {"rule": "metacharacter"}), 1)
    [done] = link.deliver_to_controller()
    assert isinstance(done, Completion) and done.error is not None
    assert done.error.code is ErrorCode.FORBIDDEN
    with pytest.raises(RpcError):
        done.unwrap()


def test_request_registered_while_disconnected_goes_out_after_hello() -> None:
    link = Link()
    p = link.c.register("ping", {}, now=0)
    assert link.c.frames_to_send() == []
    link.connect(handshake=False)
    [resume] = link.deliver_to_controller()
    assert isinstance(resume, Resume)
    assert resume.resent == [p.id] and not resume.resumed
    assert resume.welcome.waiting == [p.id]
    frames = link.c.frames_to_send()
    assert [type(f) for f in frames] == [Welcome, Req]
    assert (
        link.c.pending(p.id) is not None and link.c.pending(p.id).sent_session == link.b.session_id
    )  # type: ignore[union-attr]


def test_request_lost_in_flight_is_resent_and_runs_once() -> None:
    link = Link()
    link.connect()
    p = link.c.register("device.shell", SHELL, now=0)
    link.drop()  # the req never reached the bridge
    link.connect()
    resume = link.last_resume()
    assert resume.resent == [p.id]
    assert link.b_out.count(Admission.RUN) == 1
    assert link.b.running_ids() == [p.id]


def test_running_request_is_not_resent_and_its_result_arrives_after_resume() -> None:
    link = Link()
    link.connect()
    p = link.c.register("device.shell", SHELL, now=0)
    link.deliver_to_bridge()
    link.drop()
    # The handler finishes while disconnected: the result waits in the outbox.
    res = link.b.complete(p.id, {"exit_code": 0}, now=2)
    assert res is not None
    assert link.b.frames_to_send() == []
    assert link.b.held_ids() == [p.id]
    link.connect(handshake=False)
    hello = link.to_controller[0] if link.to_controller else link.b.frames_to_send()[0]
    assert isinstance(hello, Hello) and hello.held == [p.id]
    link.to_controller = [hello]
    link.settle()
    resume = link.last_resume()
    assert resume.resumed and resume.resent == []
    outcome = link.last_welcome_outcome()
    assert outcome.resent == [p.id]
    assert [c.id for c in link.completions()] == [p.id]
    assert link.b.held_ids() == []
    assert link.b_out.count(Admission.RUN) == 1


def test_a_foreign_wait_keeps_the_bridge_running_and_its_result_unacked_until_relayed() -> None:
    """Cluster mode: the bridge moves from replica A's session to replica B's with a request
    of A's running. B lists it (``foreign``), the bridge keeps it, and its result is a Relay:
    not acked — the bridge holds it — until B says it reached A; A then resolves its call."""
    link = Link()
    link.connect()
    p = link.c.register("device.instrument", {"serial": "s", "package": "p"}, now=0,
                        request_id=new_request_id(), validate=False)
    link.deliver_to_bridge()
    replica_a, link.c = link.c, ControllerSession(bridge_id="bridge-1", settings=link.settings)
    link.drop()
    replica_a.connection_lost()
    link.c.foreign = {p.id}
    link.connect()
    assert link.last_resume().welcome.waiting == [p.id]
    assert link.last_welcome_outcome().orphaned == []  # not cancelled: someone waits for it
    res = link.b.complete(p.id, {"output": "OK (1 test)"}, now=1)
    assert res is not None
    (outcome,) = link.deliver_to_controller()
    assert outcome == Relay(res)
    link.settle()
    assert link.b.held_ids() == [p.id]  # not acked: the bridge still holds it
    assert link.c.duplicates == 0 and link.completions() == []

    link.c.ack(p.id)  # B relayed it to A
    link.settle()
    assert link.b.held_ids() == []
    done = replica_a.resolve(Completion(p.id, "", {"output": "OK (1 test)"}))
    assert done == Completion(p.id, "device.instrument", {"output": "OK (1 test)"})
    assert replica_a.resolve(Completion(p.id, "", {})) is None  # once
    assert replica_a.pending_count == 0


def test_foreign_ids_are_forgotten_with_the_connection() -> None:
    link = Link()
    rid = new_request_id()
    link.c.foreign = {rid}
    link.connect()
    link.drop()
    link.connect()
    assert link.last_resume().welcome.waiting == []
    stranger = Res.success(rid, {})
    assert link.c.receive(stranger, 2) == Duplicate(id=rid)


def test_lost_ack_makes_a_duplicate_result_that_is_dropped_and_forgotten() -> None:
    link = Link()
    link.connect()
    p = link.c.register("device.shell", SHELL, now=0)
    link.deliver_to_bridge()
    link.b.complete(p.id, {"exit_code": 0}, now=1)
    link.deliver_to_controller()  # completes; the ack is queued but will be lost
    link.drop()
    assert link.b.held_ids() == [p.id]
    link.connect()
    outcome = link.last_welcome_outcome()
    assert outcome.dropped == [p.id]  # the controller no longer waits for it
    assert link.b.held_ids() == []
    assert len(link.completions()) == 1


def test_duplicate_result_is_reported_and_acked() -> None:
    link = Link()
    link.connect()
    p = link.c.register("ping", {}, now=0)
    link.deliver_to_bridge()
    res = link.b.complete(p.id, {"payload": b""}, now=1)
    assert res is not None
    link.deliver_to_controller()
    assert link.c.receive(res, 2) == Duplicate(id=p.id)
    stranger = Res.success(new_request_id(), {})
    assert link.c.receive(stranger, 2) == Duplicate(id=stranger.id)
    assert link.c.duplicates == 2
    acks = [f for f in link.c.frames_to_send() if isinstance(f, Ack)]
    assert acks == [Ack(ids=[p.id, p.id, stranger.id])]


def test_resent_request_that_is_running_done_or_acked_never_runs_twice() -> None:
    link = Link()
    link.connect()
    p = link.c.register("device.shell", SHELL, now=0)
    [req] = link.c.frames_to_send()
    assert isinstance(req, Req)
    assert link.b.receive(req, 0) is Admission.RUN
    assert link.b.receive(req, 0) is Admission.RUNNING
    res = link.b.complete(p.id, {"exit_code": 0}, now=1)
    link.b.frames_to_send()
    assert link.b.receive(req, 1) is Admission.ANSWERED
    assert link.b.frames_to_send() == [res]
    link.b.receive(Ack(ids=[p.id]), 2)
    assert link.b.receive(req, 3) is Admission.DUPLICATE
    assert link.b.frames_to_send() == []


def test_bridge_restart_resends_idempotent_and_fails_the_rest() -> None:
    link = Link()
    link.connect()
    shell = link.c.register("device.shell", SHELL, now=0)
    ping = link.c.register("ping", {}, now=0)
    link.deliver_to_bridge()
    link.drop()
    # The bridge process restarts: a new session with an empty memory.
    link.b = BridgeSession(settings=link.settings)
    link.connect()
    resume = link.last_resume()
    assert not resume.resumed
    assert resume.resent == [ping.id]
    [failed] = resume.failed
    assert failed.id == shell.id and failed.error is not None
    assert failed.error.code is ErrorCode.UNAVAILABLE
    assert failed.error.data == {"reason": "bridge_restarted"}
    assert link.b.running_ids() == [ping.id]


def test_expire_times_out_and_cancels_on_the_bridge() -> None:
    link = Link()
    link.connect()
    slow = link.c.register("workspace.compile", {"test_code": "x"}, now=0)
    fast = link.c.register("device.shell", SHELL, now=0, timeout_s=5)
    link.deliver_to_bridge()
    assert link.c.next_deadline() == 5
    assert link.c.expire(4.9) == []
    [done] = link.c.expire(5)
    assert done.id == fast.id and done.error is not None
    assert done.error.code is ErrorCode.TIMEOUT
    assert link.c.next_deadline() == DEFAULTS.rpc_long_timeout_s
    assert link.deliver_to_bridge() == [True]  # the cancel stopped a running handler
    assert link.b.complete(fast.id, {"exit_code": 0}, now=6) is None
    assert link.b.running_ids() == [slow.id]
    assert link.c.pending_ids() == [slow.id]


def test_cancel_and_fail() -> None:
    link = Link()
    link.connect()
    a = link.c.register("ping", {}, now=0)
    b = link.c.register("ping", {}, now=0)
    link.deliver_to_bridge()
    link.b.complete(b.id, {"payload": b""}, now=1)  # b's result is in the outbox
    link.b.frames_to_send()
    ca = link.c.cancel(a.id)
    assert ca is not None and ca.error is not None and ca.error.code is ErrorCode.CANCELLED
    cb = link.c.fail(b.id, RpcError(ErrorCode.DEVICE_OFFLINE, "gone"))
    assert cb is not None and cb.error is not None and cb.error.code is ErrorCode.DEVICE_OFFLINE
    assert link.c.cancel(a.id) is None
    frames = link.c.frames_to_send()
    assert frames == [Cancel(id=a.id), Cancel(id=b.id)]
    assert [link.b.receive(f, 2) for f in frames] == [True, False]
    assert link.b.held_ids() == []  # the cancelled result left the outbox


def test_unsent_request_fails_without_a_cancel_frame() -> None:
    link = Link()
    p = link.c.register("ping", {}, now=0)
    [c] = link.c.fail_all(RpcError(ErrorCode.UNAVAILABLE, "grace period over"))
    assert c.id == p.id
    assert link.c.frames_to_send() == []


def test_register_validates_and_checks_ids() -> None:
    c = ControllerSession(bridge_id="b")
    with pytest.raises(RpcError) as info:
        c.register("device.shell", {"serial": "x"}, now=0)
    assert info.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(RpcError):
        c.register("nope", {}, now=0)
    c.register("nope", {}, now=0, validate=False)
    rid = new_request_id()
    c.register("ping", None, now=0, request_id=rid)
    with pytest.raises(InvalidState):
        c.register("ping", None, now=0, request_id=rid)


def test_liveness_ping_skipped_while_requests_pending() -> None:
    link = Link(liveness_interval_s=10.0, liveness_missed_max=2)
    link.connect()
    assert link.c.liveness(5) is Liveness.IDLE  # heard from the bridge at t=0
    p = link.c.register("workspace.compile", {"test_code": "x"}, now=5)
    link.c.frames_to_send()
    assert link.c.liveness(100) is Liveness.IDLE  # a slow compile is not a dead bridge
    link.c.fail(p.id, RpcError(ErrorCode.CANCELLED, "x"))
    link.c.frames_to_send()
    assert link.c.liveness(100) is Liveness.PING
    [ping] = link.c.frames_to_send()
    assert isinstance(ping, Ping)
    assert link.c.liveness(105) is Liveness.IDLE  # waiting for the pong
    assert link.c.liveness(110) is Liveness.PING
    link.c.frames_to_send()
    assert link.c.liveness(120) is Liveness.DEAD
    # A pong (any frame) revives it.
    link.c.receive(Pong(id=ping.id), 121)
    assert link.c.liveness(125) is Liveness.IDLE
    assert link.c.liveness(131) is Liveness.PING


def test_bridge_answers_pings_and_controller_answers_too() -> None:
    link = Link()
    link.connect()
    link.now = 3
    link.to_bridge.append(Ping(id="n1"))
    assert link.deliver_to_bridge() == [None]
    assert link.b.frames_to_send() == [Pong(id="n1")]
    assert link.c.receive(Ping(id="n2"), 4) is None
    assert link.c.frames_to_send() == [Pong(id="n2")]
    assert link.b.receive(Pong(id="n3"), 5) is None


def test_events_carry_per_channel_sequence() -> None:
    link = Link()
    link.connect()
    with pytest.raises(InvalidState):
        BridgeSession().event("c", None)
    e0 = link.b.event("logcat-1", {"lines": ["a"], "dropped": 0})
    e1 = link.b.event("logcat-1", {"lines": ["b"], "dropped": 0})
    other = link.b.event("logcat-2", None)
    assert (e0.seq, e1.seq, other.seq) == (0, 1, 0)
    got = link.deliver_to_controller()
    assert got == [e0, e1, other]
    assert all(isinstance(g, Evt) for g in got)
    link.b.close_channel("logcat-1")
    assert link.b.event("logcat-1", None).seq == 0


def test_finished_memory_is_bounded_by_ttl_and_size() -> None:
    b = BridgeSession(settings=dataclasses.replace(DEFAULTS, finished_ttl_s=100, finished_max=3))
    b.connection_made()
    b.make_hello(software="t")
    b.on_welcome(Welcome(bridge="x", session=b.session_id), now=0)
    ids = [new_request_id() for _ in range(5)]
    for i, rid in enumerate(ids):
        assert b.on_request(Req(id=rid, m="ping"), now=i) is Admission.RUN
        b.complete(rid, {}, now=i)
    b.on_ack(Ack(ids=ids), now=10)
    assert [b.is_finished(r) for r in ids] == [False, False, True, True, True]
    assert b.prune(109) == 0
    assert b.prune(111) == 3
    assert not any(b.is_finished(r) for r in ids)


def test_outbox_is_bounded() -> None:
    b = BridgeSession(settings=dataclasses.replace(DEFAULTS, outbox_max=2))
    ids = []
    for i in range(3):
        rid = new_request_id()
        ids.append(rid)
        b.connection_made()
        b.make_hello(software="t")
        b.on_welcome(Welcome(bridge="x", session=b.session_id, waiting=ids), now=i)
        b.on_request(Req(id=rid, m="ping"), now=i)
        b.connection_lost()
        b.complete(rid, {}, now=i)
    assert b.evicted == 1
    assert b.held_ids() == ids[1:]
    assert b.is_finished(ids[0])
    assert [r.id for r in b.unacked_results()] == ids[1:]


def test_many_acks_are_split_into_batches() -> None:
    link = Link()
    link.connect()
    for _ in range(ACK_BATCH + 5):
        link.c.receive(Res.success(new_request_id(), {}), 1)
    acks = link.c.frames_to_send()
    assert [len(a.ids) for a in acks] == [ACK_BATCH, 5]


def test_orphaned_running_requests_are_reported() -> None:
    b = BridgeSession()
    b.connection_made()
    b.make_hello(software="t")
    b.on_welcome(Welcome(bridge="x", session=b.session_id), now=0)
    rid = new_request_id()
    b.on_request(Req(id=rid, m="ping"), now=0)
    b.connection_lost()
    b.connection_made()
    hello = b.make_hello(software="t")
    assert hello.held == [rid]
    outcome = b.on_welcome(Welcome(bridge="x", session=b.session_id, waiting=[]), now=1)
    assert outcome.orphaned == [rid]


def test_reject_answers_a_malformed_request_once() -> None:
    link = Link()
    link.connect()
    rid = new_request_id()
    res = link.b.reject(rid, RpcError(ErrorCode.BAD_REQUEST, "bad params"), now=0)
    assert res is not None and res.error is not None and res.error.code == "bad_request"
    assert link.b.reject(rid, RpcError(ErrorCode.BAD_REQUEST, "again"), now=0) is None
    assert link.b.reject("not-a-uuid", RpcError(ErrorCode.BAD_REQUEST, "x"), now=0) is None
    assert link.b.frames_to_send() == [res]
    assert link.b.held_ids() == [rid]


# --- state checks ----------------------------------------------------------------------------


def test_wrong_state_operations_raise_invalid_state() -> None:
    b = BridgeSession()
    with pytest.raises(InvalidState):
        b.make_hello(software="t")  # not connected
    b.connection_lost()  # already disconnected: a no-op
    assert b.state is State.DISCONNECTED
    b.connection_made()
    with pytest.raises(InvalidState):
        b.connection_made()
    b.make_hello(software="t")
    with pytest.raises(InvalidState):
        b.make_hello(software="t")
    with pytest.raises(InvalidState):
        b.complete(new_request_id(), {}, now=0)  # never admitted
    b.close()
    b.close()  # idempotent
    b.connection_lost()  # the socket ending after a close changes nothing
    assert b.state is State.CLOSED
    with pytest.raises(InvalidState):
        b.connection_made()
    with pytest.raises(InvalidState):
        b.complete(new_request_id(), {}, now=0)

    c = ControllerSession(bridge_id="x")
    assert not c.is_open
    c.register("ping", {}, now=0)
    [failed] = c.close()
    assert failed.error is not None and failed.error.code is ErrorCode.UNAVAILABLE
    assert c.close() == []
    c.connection_lost()
    assert c.state is State.CLOSED
    with pytest.raises(InvalidState):
        c.register("ping", {}, now=0)


@pytest.mark.parametrize(
    "frame",
    [
        Req(id=new_request_id(), m="ping"),
        Ack(ids=[new_request_id()]),
        Cancel(id=new_request_id()),
        Welcome(bridge="x", session=new_request_id()),
    ],
)
def test_controller_refuses_frames_a_bridge_never_sends(frame: Any) -> None:
    link = Link()
    link.connect()
    with pytest.raises(UnexpectedFrame) as info:
        link.c.receive(frame, 0)
    assert info.value.kind == frame.t


def test_frames_before_the_handshake_are_unexpected() -> None:
    c = ControllerSession(bridge_id="x")
    c.connection_made()
    rid = new_request_id()
    for frame in [Res.success(rid, {}), Evt(ch="c"), Ping(id="p"), Pong(id="p")]:
        with pytest.raises(UnexpectedFrame):
            c.receive(frame, 0)
    b = BridgeSession()
    b.connection_made()
    with pytest.raises(UnexpectedFrame):
        b.receive(Welcome(bridge="x", session=b.session_id), 0)  # before hello
    b.make_hello(software="t")
    for frame in [
        Req(id=rid, m="ping"),
        Ack(ids=[rid]),
        Cancel(id=rid),
        Ping(id="p"),
        Pong(id="p"),
    ]:
        with pytest.raises(UnexpectedFrame) as info:
            b.receive(frame, 0)
        assert info.value.kind == frame.t
    for frame2 in [Hello(session=rid, software="x"), Res.success(rid, {}), Evt(ch="c")]:
        with pytest.raises(UnexpectedFrame):
            b.receive(frame2, 0)
    link = Link()
    link.connect()
    with pytest.raises(UnexpectedFrame):
        link.c.receive(Hello(session=link.b.session_id, software="t"), 1)  # hello twice


def test_handshake_refusals_carry_close_codes() -> None:
    c = ControllerSession(bridge_id="x")
    c.connection_made()
    with pytest.raises(HandshakeRefused) as info:
        c.receive(Hello(session=new_request_id(), software="t", protocol=PROTOCOL_VERSION + 1), 0)
    assert info.value.close_code == CloseCode.INCOMPATIBLE
    b = BridgeSession()
    b.connection_made()
    b.make_hello(software="t", devices=[DeviceInfo(serial="s", state="device")])
    with pytest.raises(HandshakeRefused) as info:
        b.receive(Welcome(bridge="x", session=b.session_id, protocol=PROTOCOL_VERSION + 1), 0)
    assert info.value.close_code == CloseCode.INCOMPATIBLE
    with pytest.raises(HandshakeRefused) as info:
        b.receive(Welcome(bridge="x", session=new_request_id()), 0)
    assert info.value.close_code == CloseCode.BAD_REQUEST


# --- property: any pattern of drops keeps exactly-once effect and delivery -------------------


actions = st.lists(
    st.sampled_from(
        ["register", "register_shell", "to_bridge", "to_controller", "complete", "drop", "replay"]
    ),
    max_size=40,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(actions, st.randoms(use_true_random=False))
@example(["register", "to_bridge", "complete", "to_controller", "to_bridge", "replay"], Random(0))
@example(["register", "to_bridge", "replay"], Random(0))
@example(["register", "to_bridge", "complete", "replay"], Random(0))
@example(["register", "to_bridge", "complete", "to_controller", "drop", "replay"], Random(0))
@example(["register_shell", "to_bridge", "drop", "complete", "drop", "to_controller"], Random(0))
def test_drops_never_run_a_request_twice_nor_lose_one(steps: list[str], rnd: Any) -> None:
    """Random drops (frames in flight lost) and replayed requests (a duplicate delivery):
    every call completes exactly once, no handler runs twice, every result is acked."""
    link = Link()
    link.connect()
    registered: list[str] = []
    runs: dict[str, int] = {}
    seen: list[Req] = []

    def to_bridge(frames: list[Any] | None = None) -> None:
        if frames is None:
            link.collect()
            frames, link.to_bridge = link.to_bridge, []
        for frame in frames:
            outcome = link.b.receive(frame, link.now)
            link.b_out.append(outcome)
            if isinstance(frame, Req):
                seen.append(frame)
            if outcome is Admission.RUN:
                runs[frame.id] = runs.get(frame.id, 0) + 1

    def complete_one() -> None:
        running = link.b.running_ids()
        if running:
            link.b.complete(rnd.choice(running), {"v": 1}, now=link.now)

    for step in steps:
        link.now += 1
        if step == "register":
            registered.append(link.c.register("ping", {}, now=link.now, timeout_s=1e9).id)
        elif step == "register_shell":
            rid = link.c.register("device.shell", SHELL, now=link.now, timeout_s=1e9).id
            registered.append(rid)
        elif step == "to_bridge":
            to_bridge()
        elif step == "to_controller":
            link.deliver_to_controller()
        elif step == "complete":
            complete_one()
        elif step == "replay":
            if seen and link.b.state is State.OPEN:
                to_bridge([rnd.choice(seen)])
        elif step == "drop":
            link.drop()
            link.connect(handshake=False)
            link.deliver_to_controller()  # hello -> welcome + re-sent requests
            to_bridge()
    # Settle on a healthy connection: run everything still running, deliver everything.
    for _ in range(len(registered) + 3):
        to_bridge()
        while link.b.running_ids():
            complete_one()
        link.deliver_to_controller()
        to_bridge()
    done = [c.id for c in link.completions()]
    assert sorted(done) == sorted(registered)  # every call completed exactly once
    assert all(n == 1 for n in runs.values())  # no handler ran twice
    assert set(runs) == set(registered)
    assert link.c.pending_count == 0
    assert link.b.held_ids() == []  # every result acked


def test_long_error_messages_are_cut_not_refused() -> None:
    link = Link()
    link.connect()
    p = link.c.register("workspace.compile", {"test_code": "x"}, now=0)
    link.deliver_to_bridge()
    res = link.b.complete(p.id, RpcError(ErrorCode.INTERNAL, "e: " + "x" * 100_000), now=1)
    assert res is not None and res.error is not None
    assert len(res.error.message) == 16_384 and res.error.message.endswith("…")
    [done] = link.deliver_to_controller()
    assert isinstance(done, Completion) and done.error is not None


def test_session_ids_and_channels_are_checked() -> None:
    with pytest.raises(ValueError):
        BridgeSession(session_id="nope")
    rid = new_request_id()
    assert BridgeSession(session_id=rid).session_id == rid
    b = BridgeSession()
    assert b.next_seq("logcat-1") == 0
    assert b.next_seq("logcat-1") == 1
    with pytest.raises(ValueError):
        b.next_seq("bad channel")
    with pytest.raises(ValueError):
        b.next_seq("")


def test_welcome_settings_are_adopted_by_the_bridge() -> None:
    link = Link(ping_interval_s=3.0, max_frame_bytes=1 << 20)
    link.connect()
    assert link.b.shared is not None
    adopted = link.b.shared.apply(DEFAULTS)
    assert adopted.ping_interval_s == 3.0
    assert adopted.max_frame_bytes == 1 << 20
    assert adopted.rpc_timeout_s == DEFAULTS.rpc_timeout_s


def test_each_welcome_carries_its_own_controllers_settings() -> None:
    """The welcome's settings are made once per Settings object (a storm builds thousands of
    welcomes), never carried over from another controller's settings."""
    links = [Link(ping_interval_s=s) for s in (3.0, 4.0, 3.0)]
    for link in links:
        link.connect()
        assert link.b.shared is not None
    assert [link.b.shared.ping_interval_s for link in links if link.b.shared] == [3.0, 4.0, 3.0]
    again = Link(ping_interval_s=5.0)
    again.connect()
    again.drop()
    again.c = ControllerSession(bridge_id="bridge-1", settings=links[1].settings)
    again.connect()
    assert again.b.shared is not None and again.b.shared.ping_interval_s == 4.0


def test_an_event_read_without_its_frame_model_follows_the_same_rules() -> None:
    """``event_arrived`` (the hub's relay path for log batches) is ``receive`` of an ``evt``:
    unexpected before the handshake and after the connection is lost, and it counts as
    hearing from the bridge."""
    c = ControllerSession(bridge_id="x")
    c.connection_made()
    with pytest.raises(UnexpectedFrame) as info:
        c.event_arrived(0)
    assert info.value.kind == "evt"
    link = Link()
    link.connect()
    link.c.event_arrived(123.0)
    assert link.c._last_rx == 123.0
    link.c.connection_lost()
    with pytest.raises(UnexpectedFrame):
        link.c.event_arrived(124.0)
