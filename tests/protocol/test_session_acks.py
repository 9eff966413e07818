"""Batched acks: the controller may hold acks back for a later drain, never past ACK_BATCH."""

from __future__ import annotations

import pytest

from protocol.envelope import Ack, Req, Res, new_request_id
from protocol.errors import ErrorCode, InvalidState, RpcError
from protocol.session import ACK_BATCH, BridgeSession, ControllerSession


def _open() -> ControllerSession:
    c = ControllerSession(bridge_id="bridge-1")
    b = BridgeSession()
    c.connection_made()
    b.connection_made()
    c.receive(b.make_hello(software="t"), 0)
    c.frames_to_send()
    return c


def test_acks_held_back_until_a_drain_asks_for_them() -> None:
    c = _open()
    ids = [c.register("ping", {}, now=0).id for _ in range(3)]
    reqs = c.frames_to_send()
    assert [f.id for f in reqs if isinstance(f, Req)] == ids
    for rid in ids:
        c.receive(Res.success(rid, {}), 1)
    assert c.acks_waiting == 3
    assert c.frames_to_send(acks=False) == []
    assert c.acks_waiting == 3
    later = c.register("ping", {}, now=2)
    [req] = c.frames_to_send(acks=False)  # a request goes out without the held acks
    assert isinstance(req, Req) and req.id == later.id
    assert c.frames_to_send() == [Ack(ids=ids)]
    assert c.acks_waiting == 0


def test_a_full_batch_of_acks_goes_out_even_when_held_back() -> None:
    c = _open()
    for _ in range(ACK_BATCH + 1):
        c.receive(Res.success(new_request_id(), {}), 1)  # duplicates are acked too
    [ack] = c.frames_to_send(acks=False)
    assert isinstance(ack, Ack) and len(ack.ids) == ACK_BATCH
    assert c.acks_waiting == 1


def test_register_checks_what_the_trusted_req_frame_no_longer_does() -> None:
    c = _open()
    with pytest.raises(RpcError) as err:
        c.register("x" * 129, {}, now=0, validate=False)
    assert err.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(InvalidState):
        c.register("ping", {}, now=0, request_id="not-a-uuid")
    assert c.pending_count == 0


def test_is_running_follows_admission_and_completion() -> None:
    c = ControllerSession(bridge_id="bridge-1")
    b = BridgeSession()
    c.connection_made()
    b.connection_made()
    c.receive(b.make_hello(software="t"), 0)
    [welcome] = c.frames_to_send()
    b.receive(welcome, 0)
    p = c.register("ping", {}, now=0)
    [req] = c.frames_to_send()
    assert not b.is_running(p.id)
    b.receive(req, 1)
    assert b.is_running(p.id)
    b.complete(p.id, {"payload": b""}, now=2)
    assert not b.is_running(p.id)
