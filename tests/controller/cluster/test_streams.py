"""A live logcat stream through any replica (docs/cluster.md, "Logcat streams").

Two controller replicas (real processes) on a fresh PostgreSQL database and real Redis, the
real bridge connected to replica A only, a simulated device behind the real adb server. The
stream is opened on replica B, which relays it from A over Redis: lines logged on the device
arrive in order and complete; the consumer leaving stops the subscription on A; A dying, or
the bridge moving away from A, or A shutting down, ends B's stream with an ``eof`` saying so;
B dying makes A stop serving it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.controller.cluster.procs import WAIT_S, ReplicaProcess
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    listed,
    new_bridge_token,
    redis_ns,
    until,
)
from tests.controller.conftest import ADMIN_TOKEN, bearer, pg_url  # noqa: F401 - fixture

pytestmark = [pytest.mark.adb, pytest.mark.timeout(180)]

TAG = "ClusterTail"
NONE = {"local": 0, "served": 0, "relayed": 0}


async def by_kind(api: httpx.AsyncClient, metric: str) -> dict[str, int]:
    """A ``local``/``served``/``relayed`` gauge (``metric``) of one replica, by kind."""
    found: dict[str, int] = {}
    for line in (await api.get("/metrics")).text.splitlines():
        if line.startswith(metric + "{"):
            labels, _, number = line.partition("} ")
            found[labels.split('"')[1]] = int(float(number))
    return found


def kinds_are(api: httpx.AsyncClient, metric: str,
              expected: dict[str, int]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        try:
            return await by_kind(api, metric) == expected
        except httpx.TransportError:
            return False
    return check


async def streams(api: httpx.AsyncClient) -> dict[str, int]:
    """``droidwire_logcat_streams`` of one replica, by kind."""
    return await by_kind(api, "droidwire_logcat_streams")


def streams_are(api: httpx.AsyncClient, expected: dict[str, int]) -> Callable[[], Awaitable[bool]]:
    return kinds_are(api, "droidwire_logcat_streams", expected)


async def two_replicas_bridge_on_a(
    world: Cluster,
) -> tuple[ReplicaProcess, httpx.AsyncClient, ReplicaProcess, httpx.AsyncClient, str]:
    """Replicas A and B, the bridge on A only (so it stays there); the device's id."""
    (a, api_a), (b, api_b) = await asyncio.gather(world.replica(), world.replica())
    token, _ = await new_bridge_token(api_a, "desk")
    await world.bridge([a.url], token)
    await until(listed(api_b, world.sim.address), "device live on B, through the registry",
                world)
    (device,) = [d for d in (await api_b.get("/v1/devices")).json()
                 if d["serial"] == world.sim.address]
    return a, api_a, b, api_b, str(device["id"])


def open_stream(replica: ReplicaProcess, device_id: str) -> Any:
    url = f"{replica.url.replace('http://', 'ws://')}/v1/devices/{device_id}/logcat/stream"
    return connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S,
                   max_size=None)


async def burst(world: Cluster, count: int) -> None:
    await asyncio.to_thread(world.sim.run, lambda: world.sim.device.log_burst(
        count, tag=TAG, message="tail {i}"))


async def read_until(ws: ClientConnection, done: Callable[[dict[str, Any]], bool],
                     got: list[int]) -> dict[str, Any]:
    """Read chunks (appending our burst's line numbers to ``got``) until ``done(chunk)``;
    returns that chunk. Bounded: a stream that hangs fails here."""
    async with asyncio.timeout(WAIT_S):
        while True:
            chunk = json.loads(await ws.recv())
            got.extend(int(line.rsplit(" ", 1)[1]) for line in chunk["lines"] if TAG in line)
            if done(chunk):
                return dict(chunk)


async def test_a_stream_opened_on_b_relays_a_device_on_a_in_order_and_stops_there(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    got: list[int] = []
    lost = 0

    def counted(chunk: dict[str, Any]) -> bool:
        nonlocal lost
        lost += chunk["dropped"] + chunk.get("lost_batches", 0)
        assert not chunk.get("eof"), chunk
        return len(got) >= 400

    async with open_stream(b, device_id) as ws:
        # The handshake completes once A subscribed: one stream on A, served to B.
        assert await streams(api_a) == {"local": 1, "served": 1, "relayed": 0}
        assert await streams(api_b) == {"local": 0, "served": 0, "relayed": 1}
        await burst(cluster, 400)
        await read_until(ws, counted, got)
    assert got == list(range(400))
    assert lost == 0
    # The consumer left B: B tells A, which ends its subscription (on the bridge too).
    await until(streams_are(api_a, NONE), "A stopped the stream", cluster)
    await until(streams_are(api_b, NONE), "B forgot the stream", cluster)
    assert "relaying logcat" in a.log()


async def test_the_holder_dying_ends_the_stream_with_replica_lost(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, _api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    got: list[int] = []
    async with open_stream(b, device_id) as ws:
        await burst(cluster, 20)
        await read_until(ws, lambda _chunk: len(got) >= 20, got)
        await a.kill9()
        last = await read_until(ws, lambda chunk: bool(chunk.get("eof")), got)
    assert last["reason"] == "replica_lost"
    assert got[:20] == list(range(20))
    await until(streams_are(api_b, NONE), "B forgot the stream", cluster)


async def test_the_requester_dying_stops_the_stream_on_the_holder(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, _api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with open_stream(b, device_id):
        assert await streams(api_a) == {"local": 1, "served": 1, "relayed": 0}
        await b.kill9()
    await burst(cluster, 20)  # a PUBLISH to B's channel now reaches nobody
    await until(streams_are(api_a, NONE), "A stopped serving the dead replica", cluster)


async def test_the_bridge_moving_ends_the_stream_with_bridge_moved(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    token = cluster.bridges[0].env["DROIDWIRE_BRIDGE_TOKEN"]
    async with open_stream(b, device_id) as ws:
        # A newer session of the same bridge, on B: A's is closed (4409), A serves no more.
        await cluster.bridge([b.url], token)
        last = await read_until(ws, lambda chunk: bool(chunk.get("eof")), [])
    assert last["reason"] == "bridge_moved"
    await until(streams_are(api_a, NONE), "A stopped the stream", cluster)
    await until(streams_are(api_b, NONE), "B forgot the stream", cluster)


async def test_the_holder_stopping_ends_the_stream_with_replica_shutdown(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, _api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with open_stream(b, device_id) as ws:
        await a.stop()  # SIGTERM: A leaves the cluster in order, and says why
        last = await read_until(ws, lambda chunk: bool(chunk.get("eof")), [])
    assert last["reason"] == "replica_shutdown"
    await until(streams_are(api_b, NONE), "B forgot the stream", cluster)
