"""A sandbox run survives the death of its replica (docs/cluster.md, "When a replica dies").

Three controller replicas (real processes) on a fresh PostgreSQL database and real Redis; the
real bridge (in this process, so that its instrumentation can be held until released) with a
simulated device behind the real adb server. A run starts on replica A; A is SIGKILLed while
the tests run on the device. A survivor adopts the run (exactly one: a conditional UPDATE),
the bridge reconnects to a survivor — the adopter or not — which relays the held result to the
adopter, and the run ends with its real verdict, the tests having run once. A bridge that
restarted meanwhile no longer holds the result: the run ends PENDING, its cleanup done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest

from bench.relay import pipe
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import free_port
from tests.conftest import TIME_SCALE
from tests.controller.cluster.procs import SETTINGS, WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    new_bridge_token,
    redis_ns,
    until,
)
from tests.controller.conftest import pg_url  # noqa: F401 - fixture
from tests.controller.executor.conftest import build_service
from tests.controller.executor.test_recovery import packages_on, start_run_until_instrumenting
from tests.controller.executor.test_recovery_resume import CountingDevices
from tests.faults.test_process import wait_listed

pytestmark = [pytest.mark.adb, pytest.mark.timeout(120)]

BRIDGE_SETTINGS = replace(SETTINGS, backoff_first_max_s=0.05 * TIME_SCALE,
                          backoff_base_s=0.1 * TIME_SCALE, backoff_cap_s=0.3 * TIME_SCALE)


def _config(world: Cluster, urls: list[str]) -> HostConfig:
    return HostConfig.from_mapping({
        "controller": {"url": [u.replace("http://", "ws://") for u in urls]},
        "adb": {"server_port": world.sim.server.port, "start_server": False},
        "policy": {"profile": "full"},
    })


def _adb(world: Cluster, cls: type[AdbDevices] = CountingDevices) -> Any:
    return cls(port=world.sim.server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.02)


async def _replica_id(world: Cluster, index: int) -> str:
    proc = world.replicas[index].proc
    assert proc is not None
    found = await world.redis.replica_of_pid(proc.pid)
    assert found is not None
    return found


async def _three_replicas(world: Cluster) -> tuple[httpx.AsyncClient, httpx.AsyncClient,
                                                   list[str], str]:
    """Replicas A, B, C started together: A's and B's API clients, the three replica ids,
    a bridge token issued through A."""
    (_, api_a), (_, api_b), _ = await asyncio.gather(
        world.replica(), world.replica(), world.replica())
    ids = [await _replica_id(world, i) for i in range(3)]
    token, _ = await new_bridge_token(api_a, "desk")
    return api_a, api_b, ids, token


async def _finished(world: Cluster, api: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal run
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        return run.get("status") == "finished"

    await until(done, "the run finished", world)
    return run


async def _awaited_by(world: Cluster, bridge_id: str) -> list[str]:
    """Who waits for the bridge's held results (``RID SESSION`` values in P:awaits:BID)."""
    values = await world.redis.client.hvals(f"{world.redis.prefix}:awaits:{bridge_id}")
    return [v.decode() for v in values]


def _assert_confirmed_once(run: dict[str, Any], run_id: str, adb: CountingDevices) -> None:
    assert run["status"] == "finished" and run["verdict"] == "CONFIRMED", run
    result = run["result"]
    assert result["run_id"] == run_id and result["resumed"] is True
    assert result["summary"].startswith("StrictMode violations: DiskRead | Blocking time: ")
    assert adb.instrumented == 1  # the held result was delivered: the tests ran once
    instrument = [s for s in run["steps"] if s["detail"].get("method") == "device.instrument"]
    assert [s["status"] for s in instrument] == ["ok"] and instrument[0]["detail"]["resumed"]
    assert all(s["status"] != "running" for s in run["steps"])


async def test_a_run_survives_its_replica_and_the_bridge_moves(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    """The bridge lands on B (its next URL) at once; A's death is noticed a TTL later, and B
    or C adopts the run: B relays the held result to C, or delivers it to itself."""
    world = cluster
    api_a, api_b, ids, token = await _three_replicas(world)
    adb = _adb(world)
    before_run = packages_on(world.sim)
    try:
        async with Bridge(_config(world, [r.url for r in world.replicas]), token=token,
                          devices=adb, build=build_service(world.tmp_path / "ws"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            bridge_id = await _bridge_id(world)
            run_id = await start_run_until_instrumenting(api_a, world.sim, adb)
            installed = packages_on(world.sim) - before_run
            assert bridge.link is not None
            session = bridge.link.session.session_id
            assert await _awaited_by(world, bridge_id) == [f"{ids[0]} {session}"]

            await world.replicas[0].kill9()
            await until(lambda: _holder_is(world, bridge_id, ids[1]), "bridge on B", world)
            adb.release.set()  # the result reaches B before or after the adoption
            run = await _finished(world, api_b, run_id)
            adopter = (await _controller_of(world, run_id))
            await until(lambda: _no_packages(world, installed), "cleaned up", world)
    finally:
        adb.release.set()
        await adb.aclose()
    _assert_confirmed_once(run, run_id, adb)
    assert adopter in ids[1:]
    assert await _awaited_by(world, bridge_id) == []  # the wait ended with the delivery


async def test_the_bridge_reconnects_to_a_replica_other_than_the_adopter(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    """The bridge's only other URL is a loopback relay opened once the run was adopted, to
    the survivor that did *not* adopt it: that replica lists the adopter's wait in its
    welcome and relays the held result to the adopter over Redis."""
    world = cluster
    api_a, api_b, ids, token = await _three_replicas(world)
    adb = _adb(world)
    relay_port = free_port()
    try:
        async with Bridge(_config(world, [world.replicas[0].url,
                                          f"http://127.0.0.1:{relay_port}"]),
                          token=token, devices=adb, build=build_service(world.tmp_path / "ws"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            bridge_id = await _bridge_id(world)
            run_id = await start_run_until_instrumenting(api_a, world.sim, adb)

            await world.replicas[0].kill9()
            await until(lambda: _adopted(world, bridge_id, ids[1:]), "a survivor adopted it",
                        world)
            adopter = await _controller_of(world, run_id)
            other = 2 if adopter == ids[1] else 1
            assert adopter == ids[3 - other]
            async with _tcp_relay(relay_port, world.replicas[other].port):
                await until(lambda: _holder_is(world, bridge_id, ids[other]),
                            "bridge on the survivor that did not adopt the run", world)
                adb.release.set()
                run = await _finished(world, api_b, run_id)
    finally:
        adb.release.set()
        await adb.aclose()
    _assert_confirmed_once(run, run_id, adb)


async def test_a_restarted_bridge_ends_the_run_pending_with_its_cleanup(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    """The bridge restarts (a new session) while A is dead: the result it held is gone, the
    replica it reaches marks the wait lost, and the adopter ends the run PENDING and removes
    the packages the run installed."""
    world = cluster
    api_a, api_b, ids, token = await _three_replicas(world)
    adb = _adb(world)
    adb2 = _adb(world, AdbDevices)
    before_run = packages_on(world.sim)
    urls = [r.url for r in world.replicas]
    try:
        async with Bridge(_config(world, urls), token=token, devices=adb,
                          build=build_service(world.tmp_path / "ws"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            bridge_id = await _bridge_id(world)
            run_id = await start_run_until_instrumenting(api_a, world.sim, adb)
            installed = packages_on(world.sim) - before_run
            assert len(installed) == 2
            await world.replicas[0].kill9()
        async with Bridge(_config(world, urls[1:]), token=token, devices=adb2,
                          build=build_service(world.tmp_path / "ws2"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            run = await _finished(world, api_b, run_id)
            await until(lambda: _no_packages(world, installed), "cleaned up", world)
    finally:
        adb.release.set()
        await adb.aclose()
        await adb2.aclose()
    assert run["verdict"] == "PENDING", run
    assert run["result"]["reason_code"] == "controller_restarted"
    assert "bridge_restarted" in run["result"]["summary"] or any(
        "bridge_restarted" in str(s["detail"]) for s in run["steps"]), run
    assert all(s["status"] != "running" for s in run["steps"])
    assert await _controller_of(world, run_id) in ids[1:]
    # Nobody waits for the lost result any more (the waiter clears its Redis entry just
    # after the run ends, not before: wait for it, bounded).
    async def cleared() -> bool:
        return not await _adopted(world, bridge_id, ids)

    await until(cleared, "the lost result's wait cleared", world)


async def test_a_call_in_flight_when_its_bridge_moves_returns_to_its_caller(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    """The bridge's link to A breaks while a shell command runs; A stays up, the bridge
    reconnects to B. A shared the call's wait when the link dropped, B lists it in its welcome
    and relays the result: the caller on A gets it (not ``unavailable`` after the grace)."""
    world = cluster
    (_, api_a), _ = await asyncio.gather(world.replica(), world.replica())
    id_b = await _replica_id(world, 1)
    token, _ = await new_bridge_token(api_a, "desk")
    adb = _adb(world, AdbDevices)
    relay_port = free_port()
    seconds = str(max(2, round(2 * TIME_SCALE)))
    try:
        async with _tcp_relay(relay_port, world.replicas[0].port) as cut, \
                Bridge(_config(world, [f"http://127.0.0.1:{relay_port}", world.replicas[1].url]),
                       token=token, devices=adb, build=build_service(world.tmp_path / "ws"),
                       settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            bridge_id = await _bridge_id(world)
            (device,) = [d for d in (await api_a.get("/v1/devices")).json()
                         if d["serial"] == world.sim.address]
            call = asyncio.create_task(api_a.post(f"/v1/devices/{device['id']}/shell",
                                                  json={"argv": ["sleep", seconds]}))
            link = bridge.link
            assert link is not None

            async def running() -> bool:
                return bool(link.session.running_ids())

            await until(running, "the command runs on the bridge", world)
            await cut()  # A stays up; the bridge drops its link and moves to B
            await until(lambda: _holder_is(world, bridge_id, id_b), "bridge on B", world)
            response = await call
    finally:
        await adb.aclose()
    assert response.status_code == 200, response.text
    assert response.json()["exit_code"] == 0


async def _bridge_id(world: Cluster) -> str:
    keys = [k.decode() async for k in
            world.redis.client.scan_iter(match=f"{world.redis.prefix}:bridge:*")]
    assert len(keys) == 1
    return keys[0].rpartition(":")[2]


async def _holder_is(world: Cluster, bridge_id: str, replica: str) -> bool:
    return await world.redis.holder(bridge_id) == replica


async def _adopted(world: Cluster, bridge_id: str, replicas: list[str]) -> bool:
    return any(v.split(" ")[0] in replicas for v in await _awaited_by(world, bridge_id))


@contextlib.asynccontextmanager
async def _tcp_relay(port: int, to_port: int) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A loopback TCP relay ``port`` → ``to_port``: a URL that starts answering on cue, and
    stops (its connections cut) when the yielded function is called, or on exit."""
    pipes: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", to_port)
        for task in (asyncio.create_task(pipe(reader, up_writer)),
                     asyncio.create_task(pipe(up_reader, writer))):
            pipes.add(task)
            task.add_done_callback(pipes.discard)

    server = await asyncio.start_server(accept, "127.0.0.1", port)

    async def cut() -> None:
        server.close()
        for task in list(pipes):
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    try:
        yield cut
    finally:
        await cut()


async def _no_packages(world: Cluster, installed: set[str]) -> bool:
    return not (packages_on(world.sim) & installed)


async def _controller_of(world: Cluster, run_id: str) -> str | None:
    """The run's controller (its request record), read from the shared store."""
    from controller.store import Run, Store

    store = Store(world.db_url)
    try:
        async with store.session() as session:
            run = await session.get(Run, run_id)
            return None if run is None else (run.request or {}).get("controller")
    finally:
        with contextlib.suppress(Exception):
            await store.close()
