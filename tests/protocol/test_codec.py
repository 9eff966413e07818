"""Codec: bytes in, frames out; every valid frame round-trips, all garbage is a DecodeError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import (
    PARTS_MIN_PAYLOAD,
    Codec,
    decode,
    decode_raw,
    encode,
    encode_event,
    encode_parts,
    encode_result,
)
from protocol.envelope import (
    Ack,
    Evt,
    Frame,
    Ping,
    Req,
    Res,
    is_channel,
    is_request_id,
    new_request_id,
    short_repr,
)
from protocol.errors import DecodeError, EncodeError, FrameTooLarge, RpcError

from .strategies import frames, wire_values

_MANY = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


@_MANY
@given(frames)
def test_every_valid_frame_decodes_to_itself(frame: Frame) -> None:
    data = encode(frame)
    assert isinstance(data, bytes)
    back = decode(data)
    assert type(back) is type(frame)
    assert back == frame
    assert encode(back) == data


@_MANY
@given(st.binary(max_size=256))
def test_random_bytes_never_raise_anything_but_decode_error(data: bytes) -> None:
    try:
        frame = decode(data)
    except DecodeError:
        return
    assert frame.t in {"hello", "welcome", "req", "res", "ack", "cancel", "evt", "ping", "pong"}


@_MANY
@given(frames, st.data())
def test_corrupted_valid_frames_decode_or_fail_typed(frame: Frame, data: st.DataObject) -> None:
    raw = bytearray(encode(frame))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        decode(bytes(raw[:cut]))
    except DecodeError:
        pass


@_MANY
@given(
    st.sampled_from(["hello", "welcome", "req", "res", "ack", "cancel", "evt", "ping", "pong"]),
    st.dictionaries(
        st.sampled_from(["id", "m", "p", "r", "e", "ch", "d", "seq", "ids", "session"]),
        wire_values,
        max_size=6,
    ),
)
def test_maps_with_a_kind_and_random_fields_fail_typed(
    kind: str, fields: dict[str, object]
) -> None:
    try:
        decode(msgpack.packb({"t": kind, **fields}, use_bin_type=True))
    except DecodeError as exc:
        assert exc.kind in (kind, None)


@pytest.mark.parametrize(
    "payload",
    [
        msgpack.packb([1, 2, 3]),
        msgpack.packb("req"),
        msgpack.packb({"t": "nope"}),
        msgpack.packb({"t": 3}),
        msgpack.packb({1: 2}),  # non-str key
        msgpack.packb({"t": "req"}) + b"\x00",  # trailing data
        msgpack.packb(msgpack.ExtType(5, b"x")),
        msgpack.packb({"t": "ping", "id": msgpack.ExtType(1, b"")}),
        b"\x91" * 5000,  # deep nesting
        b"\xdd\xff\xff\xff\xff",  # array header claiming 4 G elements
        b"",
        b"\xc1",  # never-used byte
        b"\xa3\xff\xfe\xfd",  # str that is not UTF-8
    ],
)
def test_malformed_payloads_are_decode_errors(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(payload)


def test_invalid_req_reports_kind_and_id_for_an_error_reply() -> None:
    rid = new_request_id()
    data = msgpack.packb({"t": "req", "id": rid, "m": 5, "p": {}})
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert info.value.kind == "req"
    assert info.value.frame_id == rid
    assert "m" in str(info.value)
    assert type(info.value) is DecodeError


def test_request_ids_must_be_uuid4() -> None:
    for bad in ["x", "00000000-0000-1000-8000-000000000000", new_request_id().upper()]:
        with pytest.raises(DecodeError):
            decode(msgpack.packb({"t": "cancel", "id": bad}))


def test_res_needs_exactly_one_of_result_and_error() -> None:
    rid = new_request_id()
    for body in [{}, {"r": {}, "e": {"code": "busy", "message": "m"}}]:
        with pytest.raises(DecodeError):
            decode(msgpack.packb({"t": "res", "id": rid, **body}))


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    data = msgpack.packb({"t": "ping", "id": "n1", "future": [1, 2]})
    assert decode(data) == Ping(id="n1")


def test_oversize_frame_refused_on_decode_before_parsing() -> None:
    frame = Req(id=new_request_id(), m="device.push", p={"data": b"x" * 2000})
    data = encode(frame)
    with pytest.raises(FrameTooLarge) as info:
        decode(data, max_frame_bytes=1000)
    assert info.value.size == len(data)
    assert info.value.limit == 1000
    assert isinstance(info.value, DecodeError)
    assert decode(data, max_frame_bytes=len(data)) == frame


def test_oversize_frame_refused_on_encode() -> None:
    frame = Res.success(new_request_id(), {"png": b"\x89PNG" + b"\0" * 5000})
    with pytest.raises(FrameTooLarge):
        encode(frame, max_frame_bytes=4096)
    with pytest.raises(FrameTooLarge):
        encode_event("ch1", 0, {"lines": ["x" * 100] * 100}, max_frame_bytes=4096)


def test_default_cap_fits_a_screenshot() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB
    frame = Res.success(new_request_id(), {"png": png})
    assert decode(encode(frame)).unwrap()["png"] == png


def test_unencodable_value_is_encode_error() -> None:
    frame = Req(id=new_request_id(), m="ping", p={"x": object()})
    with pytest.raises(EncodeError):
        encode(frame)
    with pytest.raises(EncodeError):
        encode(Req(id=new_request_id(), m="ping", p={"x": 2**70}))


def test_event_fast_path_matches_model_path() -> None:
    d = {"lines": ["a", "b"], "dropped": 0}
    fast = encode_event("logcat-1", 7, d)
    assert fast == encode(Evt(ch="logcat-1", seq=7, d=d))
    assert decode(fast) == Evt(ch="logcat-1", seq=7, d=d)
    assert decode_raw(fast) == {"t": "evt", "ch": "logcat-1", "seq": 7, "d": d}


def test_result_fast_path_matches_model_path() -> None:
    rid = new_request_id()
    r = {"payload": b"\x00" * 200, "n": 3, "nested": {"a": [1, "b"]}}
    assert encode_result(rid, r) == encode(Res(id=rid, r=r))
    assert decode(encode_result(rid, r)) == Res(id=rid, r=r)
    with pytest.raises(FrameTooLarge):  # the same cap
        encode_result(rid, {"png": b"\0" * 5000}, max_frame_bytes=4096)
    with pytest.raises(EncodeError):  # and the same refusal
        encode_result(rid, {"x": object()})
    assert Codec(max_frame_bytes=64).encode_result(rid, {}) == encode(Res(id=rid, r={}))


@pytest.mark.parametrize(
    "obj",
    [
        {"t": "evt", "seq": 1},
        {"t": "evt", "ch": "", "seq": 1},
        {"t": "evt", "ch": "has space", "seq": 1},
        {"t": "evt", "ch": "c", "seq": -1},
        {"t": "evt", "ch": "c", "seq": True},
        {"t": "evt", "ch": "c", "seq": 1.5},
    ],
)
def test_event_fast_path_still_checks_envelope(obj: dict[str, object]) -> None:
    with pytest.raises(DecodeError) as info:
        decode(msgpack.packb(obj))
    assert info.value.kind == "evt"


def test_codec_object_uses_its_cap() -> None:
    codec = Codec(max_frame_bytes=64)
    small = Ack(ids=[new_request_id()])
    assert codec.decode(codec.encode(small)) == small
    assert codec.decode_raw(codec.encode(small))["t"] == "ack"
    assert codec.decode(codec.encode_event("c", 1, None)) == Evt(ch="c", seq=1)
    with pytest.raises(FrameTooLarge):
        codec.encode(Ack(ids=[new_request_id() for _ in range(3)]))
    with pytest.raises(FrameTooLarge):
        codec.decode(b"\x00" * 65)


def test_reprs_are_safe_for_logs() -> None:
    frame = Req(
        id=new_request_id(),
        m="device.push",
        p={"path": "/data/local/tmp/x", "data": b"\0" * 10_000_000, "note": "y" * 10_000},
    )
    text = repr(frame)
    assert len(text) < 400
    assert "<10000000 bytes>" in text
    assert str(frame) == text
    big = Evt(ch="c", seq=1, d={"lines": [f"line {i}" for i in range(10_000)]})
    assert len(str(big)) < 300
    deep: object = [[[[[1]]]]]
    assert "[…]" in short_repr(deep, limit=200)
    assert short_repr({str(i): i for i in range(20)}, limit=500).endswith(", …}")
    assert short_repr(b"abc") == "<3 bytes>"


def test_error_body_round_trip_and_unknown_codes() -> None:
    rid = new_request_id()
    res = Res.failure(rid, RpcError("forbidden", "no", {"rule": "metacharacter"}))
    back = decode(encode(res))
    assert isinstance(back, Res)
    assert not back.ok
    with pytest.raises(RpcError) as info:
        back.unwrap()
    assert info.value.code == "forbidden"
    assert info.value.data == {"rule": "metacharacter"}
    odd = Res.model_validate({"id": rid, "e": {"code": "from_the_future", "message": "m"}})
    assert odd.error is not None
    err = odd.error.to_error()
    assert err.code == "internal"
    assert err.data == {"wire_code": "from_the_future"}
    ok = Res.success(rid, {"a": 1})
    assert ok.ok and ok.unwrap() == {"a": 1}


@pytest.mark.parametrize("data", ["a text frame", None, 42, ["x"]])
def test_non_binary_input_is_a_decode_error(data: object) -> None:
    with pytest.raises(DecodeError):
        decode(data)  # type: ignore[arg-type]


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = encode(Ping(id="x"))
    assert decode(bytearray(data)) == Ping(id="x")
    assert decode(memoryview(data)) == Ping(id="x")


def test_id_and_channel_predicates() -> None:
    rid = new_request_id()
    assert is_request_id(rid)
    for bad in [rid.upper(), "x" * 36, None, 5, rid[:-1], "00000000-0000-1000-8000-000000000000"]:
        assert not is_request_id(bad)
    assert is_channel("logcat-1") and is_channel("$devices") and is_channel("x" * 64)
    for bad_ch in ["", "x" * 65, "a b", "é", None]:
        assert not is_channel(bad_ch)


def test_rpc_error_wire_form() -> None:
    err = RpcError("busy", "later", {"retry_s": 1})
    assert err.to_wire() == {"code": "busy", "message": "later", "data": {"retry_s": 1}}
    back = RpcError.from_wire(err.to_wire())
    assert (back.code, back.message, back.data) == (err.code, err.message, err.data)
    assert RpcError("nonsense", "m").code == "internal"
    assert RpcError.from_wire({}).to_wire() == {"code": "internal", "message": ""}


# -- bounded decoding: what a frame kind can carry ------------------------------------------


def _frame_of(kind: str, **fields: object) -> bytes:
    return bytes(msgpack.packb({"t": kind, **fields}, use_bin_type=True))


@pytest.mark.parametrize(
    "payload",
    [
        [[]] * 16_000_000,  # 16 M empty arrays: ~1 GB of lists from 16 MiB
        [[[]] * 10_000] * 1_500,  # nested under every per-array cap: the budget catches it
        [{"a": {}}] * 3_000_000,  # maps
    ],
    ids=["flat", "nested", "maps"],
)
def test_a_container_bomb_is_refused_before_it_is_built(payload: object) -> None:
    import tracemalloc

    data = _frame_of("res", id="0" * 8, r={"x": payload})
    assert len(data) <= 16 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            decode_raw(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.kind == "res"
    assert peak < 150 * 1024 * 1024, f"decoding the bomb peaked at {peak / 2**20:.0f} MiB"


def test_limits_follow_the_frame_kind() -> None:
    # A ping carries an id: a list of 100 in it is not a ping.
    with pytest.raises(DecodeError) as info:
        decode_raw(_frame_of("ping", id="x", extra=list(range(100))))
    assert info.value.kind == "ping"
    # A result may carry a logcat dump of 100,000 lines.
    lines = [f"12-01 10:00:00.000  100  100 I Tag: line {i}" for i in range(100_000)]
    obj = decode_raw(_frame_of("res", id="y", r={"lines": lines}))
    assert obj["r"]["lines"][-1].endswith("line 99999")
    # The kind is read wherever ``t`` is in the map, and two different kinds are refused.
    late = msgpack.packb({"id": "z", "extra": [1] * 100, "t": "pong"})
    with pytest.raises(DecodeError):
        decode_raw(late)
    twice = msgpack.packb({"t": "res", "id": "z", "t2": 1}).replace(b"\xa2t2", b"\xa1t")
    with pytest.raises(DecodeError):
        decode_raw(twice)


# -- a request with a large payload, in two parts ---------------------------------------------


_ID = new_request_id()


def _write(data: object, **params: object) -> Req:
    return Req.trusted(id=_ID, method="device.tunnel.write",
                       params={"channel": "tn-1", "offset": 7, **params, "data": data})


@pytest.mark.parametrize("size", [PARTS_MIN_PAYLOAD, PARTS_MIN_PAYLOAD + 1, 1 << 20])
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_encode_parts_is_encode_without_the_join(size: int, kind: type) -> None:
    payload = bytes(range(256)) * (size // 256) + b"\x01" * (size % 256)
    parts = encode_parts(_write(kind(payload)))
    assert parts is not None
    head, body = parts
    assert body is not None and bytes(body) == payload
    assert head + bytes(body) == encode(_write(payload))
    assert decode(head + bytes(body)) == _write(payload)


def test_encode_parts_leaves_every_other_frame_to_encode() -> None:
    big = b"x" * PARTS_MIN_PAYLOAD
    assert encode_parts(_write(big[:-1])) is None  # small: one joined message
    assert encode_parts(_write("text" * PARTS_MIN_PAYLOAD)) is None  # not bytes
    tail = Req.trusted(id=_ID, method="m", params={"data": big, "offset": 1})
    assert encode_parts(tail) is None  # not the last value: not the frame's last bytes
    strided = memoryview(big + big)[::2]
    assert encode_parts(_write(strided)) is None  # not contiguous
    assert encode_parts(Res.trusted(id=_ID, result={"data": big})) is None
    assert encode_parts(_write(big, when=object())) is None  # encode says why


def test_encode_parts_refuses_what_encode_refuses() -> None:
    frame = _write(b"x" * (1 << 20))
    with pytest.raises(FrameTooLarge):
        encode(frame, max_frame_bytes=1 << 20)
    with pytest.raises(FrameTooLarge):
        encode_parts(frame, max_frame_bytes=1 << 20)
    assert Codec(max_frame_bytes=2 << 20).encode_parts(frame) is not None
