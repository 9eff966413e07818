"""Placement across replicas (docs/sandbox.md, "Placement"): a run without a device goes to
the least-loaded ready device that matches, whichever replica it reaches.

Two controller replicas (real processes) on PostgreSQL and real Redis; two real bridges in
this process, each exposing two of four simulated devices behind the real adb server (one of
them builds with the simulated toolchain). Eight device-less runs, submitted alternately
through both replicas at once, must use all four devices, two runs each; labels from the
bridges' config and from an admin select devices; a 4-class suite sharded over two devices
runs each class once and merges one JUnit file.
"""

from __future__ import annotations

import asyncio
import contextlib
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from droidwire.run import write_junit
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    new_bridge_token,
    redis_ns,
    until,
)
from tests.controller.cluster.test_resume import BRIDGE_SETTINGS, _finished
from tests.controller.conftest import pg_url  # noqa: F401 - fixture
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.faults.test_process import wait_listed

pytestmark = [pytest.mark.adb, pytest.mark.timeout(180)]


def host_config(world: Cluster, urls: list[str], expose: list[str],
                labels: dict[str, list[str]] | None = None) -> HostConfig:
    devices = {s: {"profile": "full", "labels": v} for s, v in (labels or {}).items()}
    return HostConfig.from_mapping({
        "controller": {"url": [u.replace("http://", "ws://") for u in urls]},
        "adb": {"server_port": world.sim.server.port, "start_server": False},
        "policy": {"profile": "full", "expose": expose, "devices": devices},
    })


@contextlib.asynccontextmanager
async def fleet(world: Cluster, api: httpx.AsyncClient, adb_server: AdbServer,
                labels: dict[int, list[str]] | None = None,
                homes: tuple[int, int] = (0, 1), layer: type[AdbDevices] = AdbDevices,
                ) -> AsyncIterator[tuple[list[ConnectedSim], list[AdbDevices]]]:
    """Four simulated devices: world.sim and three more; bridge "north" (builds) with the
    first two dials replica ``homes[0]`` first (A), bridge "south" with the other two
    ``homes[1]`` (B), each the other replica next. The bridges' adb layers are ``layer``."""
    with contextlib.ExitStack() as stack:
        sims = [world.sim] + [stack.enter_context(connected_sim(adb_server)) for _ in range(3)]
        addresses = [s.address for s in sims]
        by_serial = {addresses[i]: v for i, v in (labels or {}).items()}
        north, _ = await new_bridge_token(api, "north")
        south, _ = await new_bridge_token(api, "south")
        layers = [layer(port=world.sim.server.port, call_timeout_s=15.0 * TIME_SCALE,
                        flush_s=0.02) for _ in range(2)]
        urls = [r.url for r in world.replicas[:2]]
        north_urls = [urls[homes[0]], urls[1 - homes[0]]]
        south_urls = [urls[homes[1]], urls[1 - homes[1]]]
        try:
            async with (
                Bridge(host_config(world, north_urls, addresses[:2], by_serial), token=north,
                       devices=layers[0], build=build_service(world.tmp_path / "ws"),
                       settings=BRIDGE_SETTINGS) as one,
                Bridge(host_config(world, south_urls, addresses[2:], by_serial), token=south,
                       devices=layers[1], settings=BRIDGE_SETTINGS) as two,
            ):
                await one.wait_open(WAIT_S)
                await two.wait_open(WAIT_S)
                for client in world.clients[:2]:
                    for address in addresses:
                        await wait_listed(client, address, "device")
                yield sims, layers
        finally:
            for layer in layers:
                await layer.aclose()


async def test_device_less_runs_use_every_idle_device(
    cluster: Cluster,  # noqa: F811 - fixture
    adb_server: AdbServer,
) -> None:
    world = cluster
    (_, api_a), (_, api_b) = await asyncio.gather(world.replica(), world.replica())
    async with fleet(world, api_a, adb_server) as (sims, _):
        code = llm_style_test("loadSettingsFromDisk()")

        async def submit(api: httpx.AsyncClient) -> str:
            started = await api.post("/v1/sandbox/execute", params={"wait": "false"},
                                     json={"test_code": code})
            assert started.status_code == 202, started.text
            return str(started.json()["run_id"])

        run_ids = await asyncio.gather(*(submit((api_a, api_b)[i % 2]) for i in range(8)))
        runs = [await _finished(world, api_a, r) for r in run_ids]
    assert all(run["result"] for run in runs), [(r["verdict"], r.get("summary")) for r in runs]
    used = Counter(run["result"]["device"]["serial"] for run in runs)
    assert sorted(used) == sorted(s.address for s in sims), used
    assert sorted(used.values()) == [2, 2, 2, 2], used
    assert all(run["verdict"] == "CONFIRMED" for run in runs), [
        (r["verdict"], r.get("summary"), (r["result"] or {}).get("failures"), r["steps"][-2:])
        for r in runs if r["verdict"] != "CONFIRMED"]


async def test_labels_from_the_bridge_config_and_from_an_admin(
    cluster: Cluster,  # noqa: F811 - fixture
    adb_server: AdbServer,
) -> None:
    """The owner labels devices 0 and 2 ``lab-a`` in the bridges' config; an admin labels
    device 3 ``lab-a`` and puts it in pool ``ci`` through replica B. Every replica lists the
    labels, ``label=lab-a`` fans out to those three, ``pool=ci`` picks device 3; a user who is
    not an admin cannot label."""
    world = cluster
    (_, api_a), (_, api_b) = await asyncio.gather(world.replica(), world.replica())
    async with fleet(world, api_a, adb_server, labels={0: ["lab-a"], 2: ["lab-a", "fast"]}
                     ) as (sims, _):
        addresses = [s.address for s in sims]
        listed = {d["serial"]: d for d in (await api_b.get("/v1/devices")).json()}
        assert listed[addresses[0]]["labels"] == ["lab-a"]  # bridge on A, listed by B
        assert listed[addresses[2]]["labels"] == ["fast", "lab-a"]
        assert listed[addresses[1]]["labels"] == [] and listed[addresses[1]]["pool"] is None
        third = listed[addresses[3]]["id"]

        made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
        assert made.status_code == 201, made.text
        bob = {"Authorization": f"Bearer {made.json()['token']}"}
        refused = await api_b.put(f"/v1/devices/{third}/labels", headers=bob,
                                  json={"labels": ["lab-a"]})
        assert refused.status_code == 403, refused.text
        bad = await api_b.put(f"/v1/devices/{third}/labels", json={"labels": ["no space"]})
        assert bad.status_code in (400, 422), bad.text
        labelled = await api_b.put(f"/v1/devices/{third}/labels",
                                   json={"labels": ["lab-a"], "pool": "ci"})
        assert labelled.status_code == 200, labelled.text
        assert (labelled.json()["labels"], labelled.json()["pool"]) == (["lab-a"], "ci")
        listed = {d["serial"]: d for d in (await api_a.get("/v1/devices")).json()}
        assert (listed[addresses[3]]["labels"], listed[addresses[3]]["pool"]) == (
            ["lab-a"], "ci")

        code = llm_style_test("loadSettingsFromDisk()")
        fanned = await api_a.post("/v1/sandbox/execute", params={"wait": "false"},
                                  json={"test_code": code, "device": "label=lab-a"})
        assert fanned.status_code == 202, fanned.text
        pooled = await api_b.post("/v1/sandbox/execute", params={"wait": "false"},
                                  json={"test_code": code, "device": "pool=ci"})
        assert pooled.status_code == 202, pooled.text
        runs = [await _finished(world, api_a, r)
                for r in [*fanned.json()["run_ids"], pooled.json()["run_id"]]]
    serials = [run["result"]["device"]["serial"] for run in runs]
    assert sorted(serials[:3]) == sorted([addresses[0], addresses[2], addresses[3]])
    assert serials[3] == addresses[3]
    assert all(run["verdict"] == "CONFIRMED" for run in runs), [
        (r["verdict"], r.get("summary"), (r["result"] or {}).get("failures"), r["steps"][-2:])
        for r in runs if r["verdict"] != "CONFIRMED"]


async def test_a_suite_sharded_over_two_devices_through_the_other_replica(
    cluster: Cluster,  # noqa: F811 - fixture
    adb_server: AdbServer,
    tmp_path: Path,
) -> None:
    """A 4-class suite with ``shard: 2`` through replica B: two devices, each class run once
    (its shard's one instrumentation), one merged result on the lead run, and one JUnit file
    with a suite per device."""
    from tests.controller.executor.test_sharding import CLASSES, SUITE

    world = cluster
    (_, api_a), (_, api_b) = await asyncio.gather(world.replica(), world.replica())
    async with fleet(world, api_a, adb_server) as (sims, _):
        started = await api_b.post("/v1/sandbox/execute", params={"wait": "false"},
                                   json={"test_code": SUITE, "shard": 2})
        assert started.status_code == 202, started.text
        body = started.json()
        assert body["run_ids"] == [body["run_id"]] and len(body["shard_run_ids"]) == 2
        lead = await _finished(world, api_a, body["run_id"])
        shards = [await _finished(world, api_a, r) for r in body["shard_run_ids"]]
    merged = lead["result"]
    devices = [s["device"]["serial"] for s in merged["shards"]]
    assert len(set(devices)) == 2 and set(devices) <= {s.address for s in sims}
    assert sorted(c for s in merged["shards"] for c in s["classes"]) == sorted(CLASSES)
    for shard, run in zip(merged["shards"], shards, strict=True):
        assert run["result"]["device"]["serial"] == shard["device"]["serial"]
        instrumented = [s["detail"]["params"]["args"]["class"] for s in run["steps"]
                        if s["detail"].get("method") == "device.instrument"]
        assert instrumented, (run["verdict"], run.get("summary"), run["steps"][-3:])
        assert instrumented[0] == ",".join(shard["classes"])  # its classes, once
    assert merged["verification_status"] == "CONFIRMED"
    report = tmp_path / "junit.xml"
    write_junit(report, [merged])
    suites = ET.parse(report).getroot().findall("testsuite")
    assert len(suites) == 2
    cases = sorted((c.get("classname"), c.get("name")) for s in suites
                   for c in s.findall("testcase"))
    assert cases == sorted((t["class"], t["name"]) for t in merged["tests"])
    assert len(cases) == 5
