"""Hypothesis strategies producing every valid frame kind."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from protocol.envelope import (
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    ErrorBody,
    Evt,
    Hello,
    Ping,
    Pong,
    Profile,
    Req,
    Res,
    SharedSettings,
    Welcome,
)

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
ids = st.uuids(version=4).map(str)
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
floats = st.floats(allow_nan=False)
positive = st.floats(min_value=0.001, max_value=1e6)
printable = st.from_regex(r"[!-~]{1,20}", fullmatch=True)

#: What msgpack carries unchanged: no tuples, no NaN, 64-bit ints, str keys.
wire_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | ints | floats | text | st.binary(max_size=32),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
wire_maps = st.dictionaries(text, wire_values, max_size=5)


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


devices = st.builds(
    DeviceInfo,
    serial=printable,
    state=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12),
    model=_opt(text),
    manufacturer=_opt(text),
    release=_opt(text),
    sdk=_opt(st.integers(0, 100)),
    abi=_opt(text),
    battery=_opt(st.integers(0, 100)),
    profile=st.sampled_from(Profile),
)
caps = st.builds(
    Capabilities,
    build=st.booleans(),
    devices=st.booleans(),
    toolchain=st.sampled_from([None, "gradle", "simulated"]),
    projects=st.lists(text, max_size=3),
    methods=st.lists(text, max_size=3),
)
hellos = st.builds(
    Hello,
    session=ids,
    software=text,
    protocol=st.integers(0, 1000),
    caps=caps,
    devices=st.lists(devices, max_size=3),
    held=st.lists(ids, max_size=4),
)
shared = st.builds(
    SharedSettings,
    ping_interval_s=_opt(positive),
    ping_timeout_s=_opt(positive),
    max_frame_bytes=st.integers(1, 2**40),
    logcat_batch_lines=st.integers(1, 10_000),
    logcat_flush_s=positive,
)
welcomes = st.builds(
    Welcome,
    bridge=text,
    session=ids,
    resumed=st.booleans(),
    protocol=st.integers(0, 1000),
    waiting=st.lists(ids, max_size=4),
    settings=shared,
)
reqs = st.builds(
    Req,
    id=ids,
    m=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=30),
    p=wire_maps,
)
errors = st.builds(
    ErrorBody,
    code=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=20),
    message=text,
    data=_opt(wire_maps),
)
results = st.one_of(
    st.builds(Res, id=ids, r=wire_maps),
    st.builds(Res, id=ids, e=errors),
)
acks = st.builds(Ack, ids=st.lists(ids, min_size=1, max_size=5))
cancels = st.builds(Cancel, id=ids)
events = st.builds(
    Evt,
    ch=st.from_regex(r"[!-~]{1,64}", fullmatch=True),
    seq=st.integers(0, 2**64 - 1),
    d=wire_values,
)
pings = st.builds(Ping, id=st.text(alphabet=st.characters(codec="utf-8"), max_size=16))
pongs = st.builds(Pong, id=st.text(alphabet=st.characters(codec="utf-8"), max_size=16))

frames = st.one_of(hellos, welcomes, reqs, results, acks, cancels, events, pings, pongs)
