"""Metrics a lab can alert on, across replicas (docs/cluster.md, "Metrics"): summing a series
over the replicas gives the cluster's figure.

Two controller replicas (real processes) on PostgreSQL and real Redis; the real bridge (in this
process, with the simulated toolchain) on replica A with a simulated device. Replica B must not
report A's device as ``disconnected``; runs in the store are counted once; a run through B on
A's device is counted (outcome, busy seconds) once, by B; when the bridge goes, the device is
``disconnected`` once cluster-wide.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from device_bridge.bridge import Bridge
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    new_bridge_token,
    redis_ns,
    until,
)
from tests.controller.cluster.test_resume import BRIDGE_SETTINGS, _adb, _config
from tests.controller.conftest import pg_url  # noqa: F401 - fixture
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.faults.test_process import wait_listed

pytestmark = [pytest.mark.adb, pytest.mark.timeout(120)]

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(api: httpx.AsyncClient) -> Series:
    response = await api.get("/metrics")
    assert response.status_code == 200, response.text
    out: Series = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(scrapes: list[Series], name: str, **labels: str) -> float:
    """The sum over the replicas of ``name``'s samples with those labels."""
    want = tuple(sorted(labels.items()))
    return sum(value for s in scrapes for (n, ls), value in s.items()
               if n == name and set(want) <= set(ls))


def present(scrape_: Series, name: str) -> bool:
    return any(n == name for n, _ in scrape_)


async def test_metrics_sum_correctly_across_replicas(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    world = cluster
    (_, api_a), (_, api_b) = await asyncio.gather(world.replica(), world.replica())
    token, _ = await new_bridge_token(api_a, "desk")
    adb = _adb(world)
    adb.release.set()  # the instrumentation is not held in this test
    apis = [api_a, api_b]
    try:
        async with Bridge(_config(world, [world.replicas[0].url]), token=token, devices=adb,
                          build=build_service(world.tmp_path / "ws"),
                          settings=BRIDGE_SETTINGS) as bridge:
            await bridge.wait_open(WAIT_S)
            await wait_listed(api_a, world.sim.address, "device")
            await wait_listed(api_b, world.sim.address, "device")
            (device,) = [d for d in (await api_b.get("/v1/devices")).json()
                         if d["serial"] == world.sim.address]
            uid = device["uid"]
            assert uid and world.sim.address not in uid

            a, b = [await scrape(api) for api in apis]
            assert total([a], "droidwire_devices", state="device") == 1  # A holds the bridge
            assert total([b], "droidwire_devices", state="device") == 0
            assert total([a, b], "droidwire_devices", state="disconnected") == 0
            assert total([a, b], "droidwire_bridges", state="connected") == 1
            assert total([a, b], "droidwire_bridges", state="disconnected") == 0
            reporters = [s for s in (a, b) if total([s], "droidwire_cluster_reporter") == 1]
            assert len(reporters) == 1
            assert [present(s, "droidwire_runs") for s in (a, b)] == [
                s is reporters[0] for s in (a, b)]

            done = await api_b.post("/v1/sandbox/execute", json={
                "test_code": llm_style_test("loadSettingsFromDisk()"),
                "device": device["id"]})
            assert done.status_code == 200, done.text
            assert done.json()["verification_status"] == "CONFIRMED"

            a, b = [await scrape(api) for api in apis]
            assert total([a, b], "droidwire_runs", status="finished") == 1
            assert total([a, b], "droidwire_run_queue_depth") == 0
            assert total([a, b], "droidwire_device_queue_length", device=uid) == 0
            assert total([b], "droidwire_device_runs_total", device=uid,
                         verdict="CONFIRMED") == 1
            assert total([a, b], "droidwire_device_runs_total", device=uid) == 1
            assert total([b], "droidwire_device_busy_seconds_total", device=uid) > 0
            assert total([a], "droidwire_device_busy_seconds_total", device=uid) == 0
    finally:
        await adb.aclose()

    async def disconnected_once() -> bool:
        scrapes = [await scrape(api) for api in apis]
        by_state: dict[str, float] = defaultdict(float)
        for state in ("device", "disconnected"):
            by_state[state] = total(scrapes, "droidwire_devices", state=state)
        return by_state == {"device": 0, "disconnected": 1}

    await until(disconnected_once, "the device counted disconnected once", world)
