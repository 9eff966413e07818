"""Cluster mode end to end: two controller replicas (real processes) sharing a fresh
PostgreSQL database and real Redis (a key prefix of this run's own, removed afterwards), the
real bridge configured with both replicas' URLs, a simulated device behind the real adb server.

What must hold: a device is visible from every replica; a call reaching a replica that does not
hold the device's bridge is forwarded to the one that does, and its result comes back; a SIGKILLed
replica's bridge re-homes to a survivor and calls work again, while the dead replica's keys
expire; one session per bridge cluster-wide (a newer one elsewhere closes the old with 4409).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.adb_support import ConnectedSim, free_port
from tests.conftest import require_service
from tests.controller.cluster.procs import WAIT_S, BridgeProcess, ReplicaProcess
from tests.controller.conftest import ADMIN_TOKEN, bearer, pg_url  # noqa: F401 - fixture

pytestmark = pytest.mark.adb

EXIT_REFUSED = 2  # droidwire bridge: refused by the controller (4409 replaced among them)


@dataclass
class Redises:
    url: str  # with ?prefix=
    prefix: str
    client: Redis

    async def replica_of_pid(self, pid: int) -> str | None:
        async for key in self.client.scan_iter(match=f"{self.prefix}:replica:*"):
            value = await self.client.get(key)
            if value is not None and json.loads(value).get("pid") == pid:
                return str(key.decode().rpartition(":")[2])
        return None

    async def holder(self, bridge_id: str) -> str | None:
        value = await self.client.hget(f"{self.prefix}:bridge:{bridge_id}", "replica")
        return None if value is None else str(value.decode())


@pytest.fixture
async def redis_ns() -> AsyncIterator[Redises]:
    base = require_service("REDIS_URL")
    prefix = f"dwtest-{secrets.token_hex(6)}"
    client = Redis.from_url(base)
    sep = "&" if "?" in base else "?"
    try:
        yield Redises(f"{base}{sep}prefix={prefix}", prefix, client)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@dataclass
class Cluster:
    tmp_path: Path
    db_url: str
    redis: Redises
    sim: ConnectedSim
    replicas: list[ReplicaProcess] = field(default_factory=list)
    bridges: list[BridgeProcess] = field(default_factory=list)
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    async def replica(self, port: int | None = None) -> tuple[ReplicaProcess, httpx.AsyncClient]:
        n = len(self.replicas)
        replica = ReplicaProcess(port or free_port(), self.db_url, self.redis.url, ADMIN_TOKEN,
                                 self.tmp_path / f"replica{n}.log")
        self.replicas.append(replica)
        await replica.start()
        client = httpx.AsyncClient(base_url=replica.url, headers=bearer(ADMIN_TOKEN),
                                   timeout=WAIT_S)
        self.clients.append(client)
        return replica, client

    async def bridge(self, urls: list[str], token: str) -> BridgeProcess:
        n = len(self.bridges)
        bridge = BridgeProcess([u.replace("http://", "ws://") for u in urls], token,
                               self.sim.server.port, self.sim.server.env,
                               self.tmp_path / f"bridge{n}.log")
        self.bridges.append(bridge)
        await bridge.start()
        return bridge

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()
        for proc in [*self.bridges, *self.replicas]:
            await proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.log()[-2500:]}"
                         for p in [*self.replicas, *self.bridges] if p.log_path.exists())


@pytest.fixture
async def cluster(tmp_path: Path, pg_url: str, redis_ns: Redises,  # noqa: F811 - fixture
                  sim_device: ConnectedSim) -> AsyncIterator[Cluster]:
    world = Cluster(tmp_path, pg_url, redis_ns, sim_device)
    try:
        yield world
    except BaseException:
        print(world.logs())
        raise
    finally:
        await world.close()


async def until(check: Callable[[], Awaitable[bool]], what: str, world: Cluster) -> None:
    """Poll a state that has no event we could wait on (REST answers, Redis keys), bounded."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not await check():  # noqa: ASYNC110 - polling other processes' state
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {WAIT_S:g} s\n{world.logs()}") from None


def listed(client: httpx.AsyncClient, serial: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        try:
            response = await client.get("/v1/devices")
        except httpx.TransportError:
            return False
        return response.status_code == 200 and any(
            d["serial"] == serial and d["state"] == "device" for d in response.json())
    return check


async def shell(client: httpx.AsyncClient, serial: str, text: str) -> dict[str, Any]:
    response = await client.post(f"/v1/devices/{serial}/shell", json={"command": f"echo {text}"})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def new_bridge_token(client: httpx.AsyncClient, name: str) -> tuple[str, str]:
    made = await client.post("/v1/tokens", json={"kind": "bridge", "name": name})
    assert made.status_code == 201, made.text
    body = made.json()
    return body["token"], body.get("bridge_id") or body.get("id")


async def test_forwarding_one_session_and_failover(cluster: Cluster) -> None:
    serial = cluster.sim.address
    (a, api_a), (b, api_b) = await asyncio.gather(cluster.replica(), cluster.replica())
    assert a.proc is not None and b.proc is not None
    token, _ = await new_bridge_token(api_a, "desk")
    first = await cluster.bridge([a.url], token)

    # Visible from both replicas: A holds the bridge, B reads the Redis registry.
    await until(listed(api_a, serial), "device live on A", cluster)
    await until(listed(api_b, serial), "device live on B, through the registry", cluster)
    id_a = await cluster.redis.replica_of_pid(a.proc.pid)
    id_b = await cluster.redis.replica_of_pid(b.proc.pid)
    assert id_a and id_b and id_a != id_b
    (device,) = [d for d in (await api_b.get("/v1/devices")).json() if d["serial"] == serial]
    bridge_keys = [k.decode() async for k in
                   cluster.redis.client.scan_iter(match=f"{cluster.redis.prefix}:bridge:*")]
    assert len(bridge_keys) == 1
    bridge_id = bridge_keys[0].rpartition(":")[2]
    assert await cluster.redis.holder(bridge_id) == id_a
    # GET /v1/bridges on B lists it connected, held by A (one, not a stale copy).
    for api, replica in ((api_a, None), (api_b, id_a)):
        (listed_bridge,) = (await api.get("/v1/bridges")).json()
        assert (listed_bridge["id"], listed_bridge["state"]) == (bridge_id, "connected")
        assert (listed_bridge["replica"], listed_bridge["devices"]) == (replica, 1)

    # B does not hold the bridge: the call is forwarded to A and its result comes back.
    out = await shell(api_b, device["id"], "via-b")
    assert out["exit_code"] == 0 and out["stdout"].strip() == "via-b"
    out = await shell(api_a, device["id"], "via-a")
    assert out["stdout"].strip() == "via-a"

    # One session per bridge cluster-wide: the same bridge again, on B (then A for
    # failover). A closes the older session with 4409, which is terminal for that process.
    second = await cluster.bridge([b.url, a.url], token)
    assert await first.wait() == EXIT_REFUSED
    assert "4409" in first.log()
    await until(lambda: _is(cluster.redis.holder(bridge_id), id_b), "bridge held by B",
                cluster)
    await until(listed(api_a, serial), "device live on A, through the registry", cluster)
    out = await shell(api_a, device["id"], "one-session")  # A forwards to B now
    assert out["stdout"].strip() == "one-session"

    # A run B was working on (its row names B as its controller): B's death ends it.
    run_id = await running_run_of(cluster.db_url, id_b)

    # B dies without a word: the bridge re-homes to A, calls work again, B's keys expire.
    await b.kill9()
    await until(lambda: _is(cluster.redis.holder(bridge_id), id_a), "bridge back on A",
                cluster)
    await until(listed(api_a, serial), "device live on A after the failover", cluster)
    out = await shell(api_a, device["id"], "after-failover")
    assert out["stdout"].strip() == "after-failover"
    await until(lambda: _is(cluster.redis.client.exists(
        f"{cluster.redis.prefix}:replica:{id_b}"), 0), "dead replica's key expired", cluster)
    assert second.returncode is None  # the bridge never gave up
    # A survivor noticed B's death and ended B's unfinished run in the shared store.
    response = None

    async def run_finished() -> bool:
        nonlocal response
        response = (await api_a.get(f"/v1/runs/{run_id}")).json()
        return bool(response.get("status") == "finished")

    await until(run_finished, "the dead replica's run ended", cluster)
    assert response is not None
    result = response.get("result") or {}
    assert result.get("verification_status") == "PENDING"
    assert result.get("reason_code") == "controller_restarted"


async def test_a_token_revoked_on_one_replica_closes_its_bridge_on_another(
    cluster: Cluster,
) -> None:
    (_, api_a), (b, _) = await asyncio.gather(cluster.replica(), cluster.replica())
    made = await api_a.post("/v1/tokens", json={"kind": "bridge", "name": "desk"})
    assert made.status_code == 201, made.text
    token, token_id = made.json()["token"], made.json()["id"]
    bridge = await cluster.bridge([b.url], token)
    await until(listed(api_a, cluster.sim.address), "device live, held by B", cluster)
    revoked = await api_a.delete(f"/v1/tokens/{token_id}")
    assert revoked.status_code == 204, revoked.text
    async with asyncio.timeout(WAIT_S):
        assert await bridge.wait() == EXIT_REFUSED  # 4401 is terminal for the bridge
    assert "4401" in bridge.log()


async def running_run_of(db_url: str, replica: str) -> str:
    """A run row left ``running`` by ``replica`` (as its executor records it)."""
    from controller.store import Run, Store

    store = Store(db_url)
    try:
        async with store.session() as session, session.begin():
            run = Run(status="running", request={"controller": replica})
            session.add(run)
            await session.flush()
            return str(run.id)
    finally:
        await store.close()


async def _is(value: Awaitable[Any], expected: Any) -> bool:
    return (await value) == expected
