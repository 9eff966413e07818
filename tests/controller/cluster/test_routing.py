"""The cluster's routing pieces over real Redis, in one process: two :class:`Cluster`
members (their own prefix, removed afterwards) in front of stand-in hubs that record calls.

Forwarded calls and typed errors, a replica with nobody listening, a replica that dies while a
call waits, malformed messages, session ownership (4409 across replicas, no take-back by a
stale replica), the cluster-wide device overlay, and the one survivor reporting a lost replica.
"""

from __future__ import annotations

import asyncio
import secrets
import types
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis

from controller.auth import DeviceRef
from controller.cluster import Cluster, parse_redis_url
from protocol.closecodes import CloseCode
from protocol.envelope import DeviceInfo
from protocol.errors import ErrorCode, RpcError
from tests.conftest import TIME_SCALE, require_service
from tests.controller.test_hub_support import fast_settings
from tests.faults.timing import wait_until

SETTINGS = fast_settings(cluster_heartbeat_s=0.05 * TIME_SCALE, cluster_ttl_s=0.4 * TIME_SCALE)
WAIT_S = 10.0 * TIME_SCALE


class Conn:
    def __init__(self) -> None:
        self.kicked = asyncio.Event()
        self.code: int | None = None

    def kick(self, code: int, reason: str) -> None:
        self.code = code
        self.kicked.set()


@dataclass(eq=False)
class Entry:
    id: str
    name: str = "desk"
    owner_id: str = "u1"
    conn: Conn | None = field(default_factory=Conn)
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    caps: Any = None


class StandInHub:
    """What a Cluster uses of its hub: settings, entries, and ``call`` (recorded)."""

    def __init__(self) -> None:
        self.settings = SETTINGS
        self.entries: dict[str, Entry] = {}
        self.calls: list[tuple[Any, str, dict[str, Any], bool]] = []
        self.answer: Any = {"ok": True}
        self.block = asyncio.Event()
        self.kicked_tokens: list[str] = []
        self.kicked = asyncio.Event()

    def entry(self, bridge_id: str) -> Entry | None:
        return self.entries.get(bridge_id)

    def kick_token(self, token_id: str) -> None:
        self.kicked_tokens.append(token_id)
        self.kicked.set()

    async def call_wire(self, target: Any, method: str, params: dict[str, Any], *,
                        timeout_s: float | None = None, route: bool = True) -> dict[str, Any]:
        self.calls.append((target, method, params, route))
        if self.answer == "block":
            await self.block.wait()
            return {}
        if isinstance(self.answer, RpcError):
            raise self.answer
        return dict(self.answer)


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    base = require_service("REDIS_URL")
    prefix = f"dwtest-{secrets.token_hex(6)}"
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}prefix={prefix}"
    client = Redis.from_url(base)
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def member(url: str, **kwargs: Any) -> tuple[Cluster, StandInHub]:
    hub = StandInHub()
    cluster = Cluster(url, hub=hub, **kwargs)  # type: ignore[arg-type]
    await cluster.__aenter__()
    return cluster, hub


async def crash(cluster: Cluster) -> None:
    """Stop a member as SIGKILL would: no goodbye, its keys left to expire."""
    cluster._closed = True
    tasks = [cluster._listener, cluster._heartbeat, *cluster._serving.values()]
    for task in tasks:
        assert task is not None
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await cluster._pubsub.aclose()  # its channel has no subscriber any more
    await cluster.redis.aclose()


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[Cluster, StandInHub, Cluster, StandInHub]]:
    a, hub_a = await member(redis_url)
    b, hub_b = await member(redis_url)
    try:
        yield a, hub_a, b, hub_b
    finally:
        await a.close()
        await b.close()


def test_redis_url_prefix() -> None:
    parsed = parse_redis_url("redis://:pw@127.0.0.1:6379/2?prefix=lab-1&socket_timeout=5")
    assert parsed.prefix == "lab-1"
    assert parsed.url == "redis://:pw@127.0.0.1:6379/2?socket_timeout=5"
    assert parse_redis_url("redis://127.0.0.1").prefix == "droidwire"
    for bad in ("http://127.0.0.1", "redis://h?prefix=", "redis://h?prefix=a%20b",
                "redis://h?prefix=" + "x" * 65):
        with pytest.raises(ValueError):
            parse_redis_url(bad)


async def test_a_forwarded_call_runs_on_the_holder_and_its_result_comes_back(pair: Any) -> None:
    a, _hub_a, b, hub_b = pair
    ref = DeviceRef("bridge-1", "emulator-5554", "u1", "desk")
    hub_b.answer = {"exit_code": 0, "stdout": "hi\n", "blob": b"\x00\x01"}
    result = await a.forward(b.replica_id, ref, "device.shell", {"argv": ["echo", "hi"]})
    assert result == {"exit_code": 0, "stdout": "hi\n", "blob": b"\x00\x01"}
    ((target, method, params, route),) = hub_b.calls
    assert (target, method, params, route) == (ref, "device.shell", {"argv": ["echo", "hi"]},
                                               False)  # the holder never forwards again

    hub_b.answer = RpcError(ErrorCode.FORBIDDEN, "not on the allow-list", {"rule": "allow"})
    with pytest.raises(RpcError) as refused:
        await a.forward(b.replica_id, "bridge-1", "bridge.info", {})
    assert refused.value.code is ErrorCode.FORBIDDEN
    assert refused.value.data == {"rule": "allow"}


async def test_a_replica_nobody_listens_for_is_unavailable_at_once(pair: Any) -> None:
    a, *_ = pair
    with pytest.raises(RpcError) as gone:
        await a.forward("no-such-replica", "bridge-1", "bridge.info", {})
    assert gone.value.code is ErrorCode.UNAVAILABLE
    assert gone.value.data == {"reason": "replica_unreachable"}


async def test_a_replica_dying_during_a_call_fails_it_unavailable(redis_url: str) -> None:
    a, _ = await member(redis_url)
    b, hub_b = await member(redis_url)
    try:
        hub_b.answer = "block"
        call = asyncio.create_task(a.forward(b.replica_id, "bridge-1", "bridge.info", {}))
        async with asyncio.timeout(WAIT_S):
            while not hub_b.calls:  # noqa: ASYNC110 - the other member's state
                await asyncio.sleep(0.005)
        await crash(b)
        with pytest.raises(RpcError) as lost:
            await asyncio.wait_for(call, WAIT_S)
        assert lost.value.code is ErrorCode.UNAVAILABLE
    finally:
        hub_b.block.set()
        await a.close()


async def test_malformed_messages_are_dropped(pair: Any) -> None:
    a, _hub_a, b, hub_b = pair
    for junk in (b"\xc1", b"\x93\x01\x02\x03", b"not msgpack at all \xff",
                 b"\x81\xa1k\xa3req"):  # a req without id or sender
        await a.redis.publish(b.channel(b.replica_id), junk)
    assert await a.forward(b.replica_id, "bridge-1", "bridge.info", {}) == {"ok": True}
    assert len(hub_b.calls) == 1


async def test_a_newer_session_elsewhere_closes_ours_with_4409(pair: Any) -> None:
    a, hub_a, b, hub_b = pair
    old = hub_a.entries["bridge-1"] = Entry("bridge-1")
    await a.claimed(old)  # type: ignore[arg-type]
    old.devices = {"emulator-5554": DeviceInfo(serial="emulator-5554", state="device")}
    await a.inventory(old)  # type: ignore[arg-type]
    assert await b.owner_elsewhere("bridge-1") == a.replica_id
    assert await a.owner_elsewhere("bridge-1") is None
    (record,) = await b.remote_devices()
    assert (record.bridge_id, record.serial, record.state, record.bridge) == (
        "bridge-1", "emulator-5554", "device", "desk")
    assert await a.remote_devices() == []  # its own bridges are the hub's to list

    new = hub_b.entries["bridge-1"] = Entry("bridge-1")
    await b.claimed(new)  # type: ignore[arg-type]
    assert old.conn is not None
    await asyncio.wait_for(old.conn.kicked.wait(), WAIT_S)
    assert old.conn.code == CloseCode.REPLACED
    assert await a.owner_elsewhere("bridge-1") == b.replica_id
    # The old holder's heartbeat and release never take the bridge back.
    await a._beat()
    await a.released(old)  # type: ignore[arg-type]
    assert await a.owner_elsewhere("bridge-1") == b.replica_id
    assert new.conn is not None and not new.conn.kicked.is_set()
    await b.inventory(new)  # type: ignore[arg-type]
    assert await a.remote_devices() == []  # the new session has not reported devices yet


async def test_a_lost_replica_is_reported_by_one_survivor(redis_url: str) -> None:
    reports: list[tuple[str, list[str]]] = []
    reported = asyncio.Event()

    def reporter(name: str) -> Any:
        async def lost(replicas: list[str]) -> None:
            reports.append((name, replicas))
            reported.set()
        return lost

    a, _ = await member(redis_url, on_replica_lost=reporter("a"))
    b, _ = await member(redis_url, on_replica_lost=reporter("b"))
    c, hub_c = await member(redis_url)
    hub_c.entries["bridge-9"] = entry = Entry("bridge-9")
    await c.claimed(entry)  # type: ignore[arg-type]
    try:
        await crash(c)
        await asyncio.wait_for(reported.wait(), WAIT_S)
        # Its bridge's key expired with it: nobody routes there any more.
        async with asyncio.timeout(WAIT_S):
            while await a.owner_elsewhere("bridge-9") is not None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        # Let both heartbeats run a few more times: still one report.
        for _ in range(3):
            await a._reap()
            await b._reap()
        assert [replicas for _, replicas in reports] == [[c.replica_id]]
    finally:
        await a.close()
        await b.close()


def test_docs_state_the_cluster_defaults() -> None:
    from pathlib import Path

    from protocol.settings import DEFAULTS

    doc = (Path(__file__).resolve().parents[3] / "docs" / "cluster.md").read_text()
    assert f"`cluster_heartbeat_s` ({DEFAULTS.cluster_heartbeat_s:g} s)" in doc
    assert f"`cluster_ttl_s` ({DEFAULTS.cluster_ttl_s:g} s)" in doc


async def test_a_relayed_stream_reports_a_gap_and_the_holders_markers() -> None:
    from controller.cluster import RemoteLogStream

    stream = RemoteLogStream(stream_id="s1", replica="r1", bridge_id="bridge-1",
                             serial="emulator-5554", max_batches=4, params={})

    def chunk(seq: Any, lines: list[str], **extra: Any) -> dict[str, Any]:
        return {"k": "chunk", "id": "s1", "seq": seq, "d": {"lines": lines, "dropped": 0},
                **extra}

    stream.take(chunk(0, ["a"]))
    stream.take(chunk(2, ["c"]))  # chunk 1 never came: one lost batch, said so
    stream.take(chunk(2, ["c"]))  # a duplicate: ignored
    stream.take(chunk(3, ["d"], lost=2, d={"lines": ["d"], "dropped": 5}))  # the holder's own
    stream.take(chunk("x", ["?"]))  # no usable number: dropped, the next number tells
    stream.take(chunk(5, ["f"], d={"lines": "not a list"}))  # malformed: one lost batch
    stream.take(chunk(6, [], d={"lines": [], "dropped": 0, "eof": True, "reason": "device_gone"}))
    got = [await stream.get() for _ in range(5)]
    assert [(c.lines, c.dropped, c.lost_batches) for c in got[:4]] == [
        (["a"], 0, 0), (["c"], 0, 1), (["d"], 5, 2), ([], 0, 2)]
    assert (got[4].eof, got[4].reason) == (True, "device_gone")
    assert stream.ended


async def test_a_heartbeat_during_a_claim_never_closes_our_own_bridge(redis_url: str) -> None:
    """A heartbeat landing while a bridge's claim was on its way to Redis found no hash (-1)
    and claimed again; with the first script reaching Redis last (a slow connection of the
    pool), the hash named the first claim, and the next heartbeat closed our own bridge with
    4409. Here the first claim script is held back until the heartbeat has run."""
    a, hub = await member(redis_url)
    real_claim = a._claim
    hold = asyncio.Event()
    calls = 0

    async def slow_first_claim(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            await hold.wait()
        return await real_claim(**kwargs)

    a._claim = slow_first_claim  # type: ignore[method-assign]
    try:
        entry = hub.entries["bridge-1"] = Entry("bridge-1")
        claim = asyncio.create_task(a.claimed(entry))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the claim is on its way (held back)
        await a._beat()
        hold.set()
        await claim
        await a._beat()
        assert entry.conn is not None and not entry.conn.kicked.is_set()
        owner = await a.redis.hget(a._k("bridge", entry.id), "owner")
        assert owner is not None and owner.decode() == a._claims[entry.id][1]
    finally:
        await a.close()


async def test_a_revocation_reaches_the_other_replicas(pair: Any) -> None:
    """A token revoked through A closes its bridge sessions on B too (B's hub kicks them)."""
    a, hub_a, _b, hub_b = pair
    await a.revoked(types.SimpleNamespace(id="token-1"))
    await asyncio.wait_for(hub_b.kicked.wait(), WAIT_S)
    assert hub_b.kicked_tokens == ["token-1"]
    assert hub_a.kicked_tokens == []  # A's own hub is told by its revocation hook, not Redis


# -- device turns: one run at a time on a device, across replicas


async def test_a_device_turn_is_one_run_at_a_time_across_replicas(pair: Any) -> None:
    """B's run waits (told once) while A's run holds the device, for longer than the turn's
    TTL (A renews it), and gets it as soon as A's run lets go."""
    a, _hub_a, b, _hub_b = pair
    a_in, a_out, b_in, b_waits = (asyncio.Event() for _ in range(4))
    told = 0

    async def hold_on_a() -> None:
        async with a.device_turn("desk~emu-1", "run-a"):
            a_in.set()
            await a_out.wait()

    async def on_wait() -> None:
        nonlocal told
        told += 1
        b_waits.set()

    async def take_on_b() -> None:
        async with b.device_turn("desk~emu-1", "run-b", on_wait):
            b_in.set()

    holder = asyncio.create_task(hold_on_a())
    await asyncio.wait_for(a_in.wait(), WAIT_S)
    taker = asyncio.create_task(take_on_b())
    await asyncio.wait_for(b_waits.wait(), WAIT_S)
    await asyncio.sleep(3 * SETTINGS.cluster_ttl_s)  # A's turn outlives its TTL: renewed
    assert not b_in.is_set()
    a_out.set()
    await asyncio.wait_for(asyncio.gather(holder, taker), WAIT_S)
    assert b_in.is_set() and told == 1
    assert not await b.redis.exists(b._k("device", "desk~emu-1"))  # B let go as well


async def test_a_dead_replicas_device_turn_frees_itself(pair: Any) -> None:
    """A turn nobody renews (its replica died) expires a TTL later; the waiter then gets it."""
    _a, _hub_a, b, _hub_b = pair
    ttl_ms = int(SETTINGS.cluster_ttl_s * 1000)
    await b.redis.set(b._k("device", "desk~emu-1"), "run-of-a-dead-replica", px=ttl_ms)
    entered = asyncio.Event()

    async def take() -> None:
        async with b.device_turn("desk~emu-1", "run-b"):
            entered.set()

    await asyncio.wait_for(take(), WAIT_S)
    assert entered.is_set()


async def test_a_waiter_that_gives_up_leaves_no_turn_behind(pair: Any) -> None:
    a, _hub_a, b, _hub_b = pair
    key = a._k("device", "desk~emu-1")
    a_out, b_waits = asyncio.Event(), asyncio.Event()

    async def hold_on_a() -> None:
        async with a.device_turn("desk~emu-1", "run-a"):
            await a_out.wait()

    async def on_wait() -> None:
        b_waits.set()

    async def take_on_b() -> None:
        async with b.device_turn("desk~emu-1", "run-b", on_wait):
            raise AssertionError("B's run gave up: it never holds the device")

    holder = asyncio.create_task(hold_on_a())
    taker = asyncio.create_task(take_on_b())
    await asyncio.wait_for(b_waits.wait(), WAIT_S)
    taker.cancel()
    await asyncio.gather(taker, return_exceptions=True)
    assert await a.redis.get(key) == b"run-a"
    a_out.set()
    await asyncio.wait_for(holder, WAIT_S)
    assert not await a.redis.exists(key)


async def test_a_device_turn_without_redis_is_a_typed_error(redis_url: str) -> None:
    one, _hub = await member(redis_url)
    try:
        await one.redis.aclose()
        one.redis = Redis.from_url("redis://127.0.0.1:1")  # nothing listens there
        with pytest.raises(RpcError) as info:
            async with one.device_turn("desk~emu-1", "run-a"):
                raise AssertionError("held without Redis")
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert info.value.data == {"reason": "cluster_unavailable"}
    finally:
        await crash(one)


async def test_a_task_cancelled_during_a_redis_command_ends(pair: Any) -> None:
    """With redis-py 8's default socket timeout every command runs in asyncio.wait_for, which
    on Python 3.11 swallows a cancellation arriving with the reply: the task ran on. Our
    client has none; cancels at varying moments all end their task."""
    a, *_ = pair
    running = True
    commands = 0

    async def busy() -> None:
        nonlocal commands
        while running:
            await a.redis.set(a._k("busy"), "1", nx=True, px=1000)
            commands += 1

    lost = 0
    try:
        for i in range(60):
            task = asyncio.create_task(busy())
            await asyncio.sleep(0.0005 * (i % 6))
            task.cancel()
            at_cancel = commands
            # Ended, or ran on past the command it was in when cancelled: the cancel was lost.
            await wait_until(lambda: task.done() or commands > at_cancel + 1,  # noqa: B023
                             "the cancelled task ended or ran on", WAIT_S)
            lost += not task.done()
    finally:
        running = False  # a task whose cancel was lost ends at its next command
    assert lost == 0
