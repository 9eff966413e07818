"""The tunnel relay's sans-Redis parts (controller/cluster/tunnels.py): the caller's identity on
the wire, and a relayed tunnel's reading side — in order, a lost frame ends it, bounded."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from controller.auth.authorization import DeviceRef, Principal
from controller.cluster.tunnels import RemoteTunnel, principal_from, principal_wire
from controller.store import TokenKind
from protocol.errors import ErrorCode, RpcError
from protocol.tunnel_methods import decode_frame, encode_frame

BOB = Principal("t1", TokenKind.USER, "bob", "u-bob", "bob", False, None, ("devices:use",))
DEVICE = DeviceRef("b1", "emulator-5554", "u-olivia", "desk")


def test_the_caller_crosses_as_identity_and_bad_input_is_a_typed_error() -> None:
    assert principal_from(principal_wire(BOB)) == BOB
    for bad in (None, [], {**principal_wire(BOB), "kind": "root"},
                {**principal_wire(BOB), "is_admin": "yes"},
                {**principal_wire(BOB), "scopes": "all"},
                {k: v for k, v in principal_wire(BOB).items() if k != "user_id"}):
        with pytest.raises(RpcError) as refused:
            principal_from(bad)
        assert refused.value.code is ErrorCode.BAD_REQUEST


def _relayed(limit: int = 1 << 20) -> tuple[RemoteTunnel, list[dict[str, Any]]]:
    told: list[dict[str, Any]] = []
    relays: Any = SimpleNamespace(_tunnels={}, replica_id="r-b",
                                  settings=SimpleNamespace(cluster_ttl_s=1.0),
                                  _tell=lambda _replica, body: told.append(body))
    tunnel = RemoteTunnel(relays, "r-a", BOB, DEVICE, limit)
    relays._tunnels[tunnel.relay] = tunnel
    return tunnel, told


def _out(tunnel: RemoteTunnel, seq: int, frame: bytes) -> None:
    tunnel.take({"k": "tout", "id": tunnel.relay, "seq": seq, "f": frame})


async def test_frames_come_in_order_and_the_holders_end_closes_it() -> None:
    tunnel, told = _relayed()
    for seq in range(3):
        _out(tunnel, seq, encode_frame("data", s=1, data=b"%d" % seq))
    tunnel.take({"k": "tfin", "id": tunnel.relay, "seq": 3, "reason": "closed",
                 "opened": 2, "refused": 1})
    got = [decode_frame(f)["data"] for f in [await tunnel.next_frame() for _ in range(3)]
           if f is not None]
    assert got == [b"0", b"1", b"2"]
    assert await tunnel.next_frame() is None
    assert (tunnel.ended, tunnel.opened, tunnel.refused) == ("closed", 2, 1)
    await asyncio.wait_for(tunnel.finished(), 1)
    assert told == []  # the holder ended it: nothing to tell it


async def test_a_lost_frame_ends_the_tunnel_and_tells_the_holder() -> None:
    tunnel, told = _relayed()
    _out(tunnel, 0, encode_frame("opened", s=1))
    _out(tunnel, 2, encode_frame("data", s=1, data=b"after a hole"))
    assert tunnel.ended == "unavailable: relay_lost"
    assert decode_frame(await tunnel.next_frame() or b"") == {"op": "opened", "s": 1}
    assert decode_frame(await tunnel.next_frame() or b"") == {
        "op": "end", "reason": "unavailable: relay_lost"}
    assert await tunnel.next_frame() is None
    assert [b["k"] for b in told] == ["tend"] and told[0]["id"] == tunnel.relay
    # Still listening for the holder's tfin (its counts), frames after the end ignored.
    _out(tunnel, 3, encode_frame("data", s=1, data=b"late"))
    assert tunnel.relays._tunnels[tunnel.relay] is tunnel and not tunnel._finished.is_set()
    tunnel.take({"k": "tfin", "id": tunnel.relay, "seq": 4, "reason": "client gone",
                 "opened": 1, "refused": 0})
    await asyncio.wait_for(tunnel.finished(), 1)
    assert tunnel.relay not in tunnel.relays._tunnels and tunnel.opened == 1
    assert tunnel.ended == "unavailable: relay_lost" and len(told) == 1


async def test_without_the_holders_tfin_the_counts_are_final_after_a_ttl() -> None:
    tunnel, told = _relayed()
    tunnel.end("client gone")
    assert [b["k"] for b in told] == ["tend"]
    await asyncio.wait_for(tunnel.finished(), 10)  # the TTL is 1 s here
    assert tunnel.relay not in tunnel.relays._tunnels


async def test_more_than_the_windows_allow_ends_the_tunnel() -> None:
    tunnel, _told = _relayed(limit=100)
    _out(tunnel, 0, encode_frame("data", s=1, data=b"x" * 60))
    _out(tunnel, 1, encode_frame("data", s=1, data=b"x" * 60))
    assert tunnel.ended == "the bridge overran the tunnel's windows"
