"""Bad input at the wire: the frame decoder and both session objects under fuzzing.

Contract (protocol/codec.py, protocol/session.py): whatever bytes arrive, ``decode`` returns a
frame or raises ``DecodeError`` (``FrameTooLarge`` over the cap); whatever valid frames arrive
in whatever order, a session answers with an outcome or a protocol error — never another
exception. The counts below are the figures ``make faults`` prints.
"""

from __future__ import annotations

import random
import traceback
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    Codec,
    ControllerSession,
    DecodeError,
    Frame,
    FrameTooLarge,
    HandshakeRefused,
    Hello,
    Req,
    RpcError,
    UnexpectedFrame,
    Welcome,
    decode,
    encode,
    new_request_id,
)
from protocol.session import BridgeSession
from tests.faults.figures import record, size
from tests.faults.fuzzing import Mutator, seed_corpus

AREA = "bad input: frames"
SEED = 20261130


class Tally:
    """Counts outcomes; keeps the first few unexpected exceptions for the failure message."""

    def __init__(self) -> None:
        self.inputs = 0
        self.ok = 0
        self.refused = 0
        self.unexpected = 0
        self.samples: list[str] = []

    def unexpected_exc(self, data: Any, exc: BaseException) -> None:
        self.unexpected += 1
        if len(self.samples) < 5:
            tail = "".join(traceback.format_exception(exc)[-3:])
            self.samples.append(f"input {bytes(data)[:80]!r}: {tail}")

    def report(self) -> str:
        return "\n".join(self.samples)


def _decode_all(inputs: Any, tally: Tally, codec: Codec | None = None) -> None:
    run = codec.decode if codec is not None else decode
    for data in inputs:
        tally.inputs += 1
        try:
            run(data)
        except DecodeError:
            tally.refused += 1
        except Exception as exc:  # counting exactly what must never happen
            tally.unexpected_exc(data, exc)
        else:
            tally.ok += 1


def test_mutation_fuzz_of_the_decoder_raises_only_decode_error() -> None:
    corpus = seed_corpus(size(400, 80))
    mutator = Mutator(corpus, SEED)
    count = size(120_000, 3_000)
    tally = Tally()
    _decode_all((mutator.next() for _ in range(count)), tally)
    # The same inputs under a small cap: the size check comes first and is typed too.
    small = Tally()
    _decode_all((mutator.next() for _ in range(count // 10)), small, Codec(max_frame_bytes=256))
    record(AREA, "decoder inputs (mutation fuzz)", tally.inputs + small.inputs)
    record(AREA, "  decoded as valid frames", tally.ok + small.ok)
    record(AREA, "  refused with DecodeError", tally.refused + small.refused)
    record(AREA, "  unexpected exceptions", tally.unexpected + small.unexpected,
           must_be_zero=True)
    assert tally.unexpected == 0, tally.report()
    assert small.unexpected == 0, small.report()
    assert tally.refused > count // 2  # the fuzzer does reach the error paths
    assert tally.ok > 0  # …and some mutants stay valid (structure edits that fit the schema)


@settings(max_examples=size(5_000, 200), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        decode(data)
    except DecodeError:
        pass


@settings(max_examples=size(1_500, 150), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=20,
), st.sampled_from(["hello", "welcome", "req", "res", "ack", "cancel", "evt", "ping", "pong"]))
def test_any_msgpack_map_with_a_known_kind_fails_typed(body: Any, kind: str) -> None:
    obj = dict(body) if isinstance(body, dict) else {"d": body}
    obj["t"] = kind
    try:
        data = msgpack.packb(obj, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return  # not representable in msgpack (a huge int): nothing to send
    try:
        decode(data)
    except DecodeError:
        pass


def test_oversize_frames_are_refused_before_parsing() -> None:
    codec = Codec(max_frame_bytes=4096)
    accepted = 0
    sizes = [4097, 4098, 8192, 65_536, 1 << 20]
    for n in sizes:
        # Valid msgpack of the given size: a req whose params carry a blob.
        frame = msgpack.packb({"t": "req", "id": new_request_id(), "m": "ping",
                               "p": {"blob": b"x" * n}}, use_bin_type=True)
        for data in (frame, b"\xc1" * n):  # even garbage is refused by size, not by parsing
            try:
                codec.decode(data)
                accepted += 1
            except FrameTooLarge as exc:
                assert exc.size == len(data) and exc.limit == 4096
    # …and the encoder refuses to send one (a handler answers "too large" instead).
    refused_encodes = 0
    big = Req(id=new_request_id(), m="ping", p={"blob": b"x" * 5000})
    try:
        codec.encode(big)
    except FrameTooLarge:
        refused_encodes += 1
    record(AREA, "oversize frames accepted", accepted, must_be_zero=True)
    assert accepted == 0 and refused_encodes == 1
    # A frame just under the cap still passes.
    ok = encode(Req(id=new_request_id(), m="ping", p={"blob": b"x" * 3900}))
    assert len(ok) <= 4096 and isinstance(codec.decode(ok), Req)


# -- sessions fed random frame sequences -----------------------------------------------------

_EXPECTED = (DecodeError, UnexpectedFrame, HandshakeRefused, RpcError)


def _frames_of(datas: list[bytes]) -> list[Frame]:
    out: list[Frame] = []
    for data in datas:
        try:
            out.append(decode(data))
        except DecodeError:
            continue
    return out


def _session_step(session: Any, frame: Frame, rnd: random.Random, now: float) -> None:
    """One thing the I/O layer may do: connect, lose the link, feed a frame, or act locally."""
    roll = rnd.random()
    if roll < 0.05:
        session.connection_lost()
        return
    if roll < 0.12 and session.state.name == "DISCONNECTED":
        session.connection_made()
        if isinstance(session, BridgeSession):
            session.make_hello(software="fuzz")
        return
    if roll < 0.2:
        if isinstance(session, ControllerSession):
            session.register("ping", {}, now=now)
            session.expire(now + rnd.choice([0, 1e6]))
            session.liveness(now)
        else:
            for rid in session.running_ids()[:2]:
                session.complete(rid, rnd.choice([{"ok": True}, RpcError("busy", "x")]), now)
            session.prune(now)
        return
    session.receive(frame, now)
    session.frames_to_send()


def _drive(make: Any, frames: list[Frame], rnd: random.Random, steps: int, tally: Tally) -> None:
    session = make()
    session.connection_made()
    if isinstance(session, BridgeSession):
        session.make_hello(software="fuzz")
    now = 0.0
    for _ in range(steps):
        now += rnd.random()
        frame = rnd.choice(frames)
        tally.inputs += 1
        try:
            _session_step(session, frame, rnd, now)
        except _EXPECTED:
            tally.refused += 1
        except Exception as exc:  # counting exactly what must never happen
            tally.unexpected_exc(encode(frame), exc)
        else:
            tally.ok += 1
        if rnd.random() < 0.01:  # a fresh session now and then: every state gets visited
            session = make()
            session.connection_made()
            if isinstance(session, BridgeSession):
                session.make_hello(software="fuzz")


def _handshake_frames(rnd: random.Random) -> list[Frame]:
    """Hellos and welcomes that fit a session, so fuzzing gets past the handshake."""
    bridge_session = new_request_id()
    out: list[Frame] = []
    for _ in range(20):
        out.append(Hello(session=rnd.choice([bridge_session, new_request_id()]), software="x",
                         held=[new_request_id()]))
    return out


def test_sessions_fed_random_frames_raise_only_protocol_errors() -> None:
    rnd = random.Random(SEED)
    corpus = seed_corpus(size(400, 80))
    mutator = Mutator(corpus, SEED + 1)
    frames = _frames_of(corpus + [mutator.next() for _ in range(size(20_000, 2_000))])
    frames += _handshake_frames(rnd)
    steps = size(60_000, 3_000)

    controller = Tally()
    _drive(lambda: ControllerSession(bridge_id="b1"), frames, rnd, steps, controller)

    bridge = Tally()
    bridge_session_id = new_request_id()
    welcome_frames = [Welcome(bridge="b1", session=bridge_session_id, waiting=[])] * 20
    reqs = [Req(id=new_request_id(), m="ping", p={}) for _ in range(50)]
    _drive(lambda: BridgeSession(session_id=bridge_session_id),
           frames + welcome_frames + reqs * 4, rnd, steps, bridge)

    record(AREA, "session steps (controller + bridge side)", controller.inputs + bridge.inputs)
    record(AREA, "  session steps refused with protocol errors",
           controller.refused + bridge.refused)
    record(AREA, "  session unexpected exceptions", controller.unexpected + bridge.unexpected,
           must_be_zero=True)
    assert controller.unexpected == 0, controller.report()
    assert bridge.unexpected == 0, bridge.report()
    assert controller.ok > 0 and bridge.ok > 0
