"""A device serves one run at a time across the cluster, not only per replica (docs/cluster.md,
"Device turns"). Two controller replicas (real processes) on PostgreSQL and real Redis, the
real bridge in this process (its instrumentation held until released) on replica A, a
simulated device behind the real adb server. A run through A is running its tests when a run
for the same device comes in through B: B's run waits for the device (``device_busy``) and
its tests start only once A's run is done with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from device_bridge.bridge import Bridge
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    new_bridge_token,
    redis_ns,
    until,
)
from tests.controller.cluster.test_resume import BRIDGE_SETTINGS, _adb, _config, _finished
from tests.controller.conftest import pg_url  # noqa: F401 - fixture
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.controller.executor.test_recovery import start_run_until_instrumenting
from tests.faults.test_process import wait_listed

pytestmark = [pytest.mark.adb, pytest.mark.timeout(120)]


async def _steps(api: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    return list(run.get("steps") or [])


async def test_a_device_serves_one_run_at_a_time_across_replicas(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    world = cluster
    (_, api_a), (_, api_b) = await asyncio.gather(world.replica(), world.replica())
    token, _ = await new_bridge_token(api_a, "desk")
    adb = _adb(world)
    try:
        async with Bridge(_config(world, [world.replicas[0].url]), token=token, devices=adb,
                          build=build_service(world.tmp_path / "ws"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            await wait_listed(api_b, world.sim.address, "device")
            # B lists the bridge A holds with what it can do (its caps travel with its
            # inventory): that is how B's executor finds a build bridge.
            (listed,) = (await api_b.get("/v1/bridges")).json()
            assert (listed["state"], listed["build"], listed["toolchain"]) == (
                "connected", True, "simulated"), listed
            first = await start_run_until_instrumenting(api_a, world.sim, adb)

            started = await api_b.post(
                "/v1/sandbox/execute", params={"wait": "false"},
                json={"test_code": llm_style_test("loadSettingsFromDisk()"),
                      "device": world.sim.address})
            assert started.status_code == 202, started.text
            second = started.json()["run_id"]

            async def waits_for_the_device() -> bool:
                return any(s["kind"] == "device_busy" and s["status"] == "running"
                           for s in await _steps(api_b, second))

            await until(waits_for_the_device, "B's run waits for the device", world)
            assert adb.instrumented == 1  # B's run has not reached the device
            assert not any(s["detail"].get("method") in ("device.install", "device.instrument")
                           for s in await _steps(api_b, second))
            adb.release.set()
            one = await _finished(world, api_a, first)
            two = await _finished(world, api_b, second)
    finally:
        adb.release.set()
        await adb.aclose()
    assert one["verdict"] == "CONFIRMED", one
    assert two["verdict"] == "CONFIRMED", two
    assert adb.instrumented == 2
    [busy] = [s for s in two["steps"] if s["kind"] == "device_busy"]
    assert busy["status"] == "ok"

