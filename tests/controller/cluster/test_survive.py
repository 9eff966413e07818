"""Runs outlive the replica they were submitted through (docs/cluster.md, "When a replica
dies").

Two controller replicas (real processes) on PostgreSQL and real Redis; two real bridges in
this process with two simulated devices each, both holding their session on replica A (B is
their failover URL). Twelve runs are submitted through A — one with ``droidwire run`` given
both replicas' URLs, then eleven over REST at once — and A is SIGKILLed right after: some runs are
compiling or waiting for a device, up to one per device is installing or running its tests.
Every run must end finished exactly once — the tests of a run never run twice on a device —
or PENDING with its reason; at least 11 of the 12 finish normally (their devices are still
reachable through B); the CLI, which printed its run id as soon as it was accepted, follows
its run to B.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from device_bridge.adb import AdbDevices
from tests.adb_support import AdbServer
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    redis_ns,
    until,
)
from tests.controller.cluster.test_placement import fleet
from tests.controller.conftest import ADMIN_TOKEN, pg_url  # noqa: F401 - fixture
from tests.controller.executor.support import llm_style_test

pytestmark = [pytest.mark.adb, pytest.mark.timeout(240)]


class Counted(AdbDevices):
    """The bridge's adb layer, counting the instrumentations each device was asked for."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.instrumented: Counter[str] = Counter()

    async def instrument(self, serial: str, *args: Any, **kw: Any) -> Any:
        self.instrumented[serial] += 1
        return await super().instrument(serial, *args, **kw)


async def _final(api: httpx.AsyncClient, run_id: str, world: Cluster) -> dict[str, Any]:
    run: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal run
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        return run.get("status") in ("finished", "cancelled")

    await until(done, f"run {run_id} ended", world)
    return run


async def test_runs_submitted_through_a_replica_that_dies_finish_once(
    cluster: Cluster,  # noqa: F811 - fixture
    adb_server: AdbServer,
    tmp_path: Path,
) -> None:
    world = cluster
    (a, api_a), (b, api_b) = await asyncio.gather(world.replica(), world.replica())
    code = llm_style_test("loadSettingsFromDisk()")
    test_file = tmp_path / "GeneratedBlockingTest.kt"
    test_file.write_text(code)
    async with fleet(world, api_a, adb_server, homes=(0, 0), layer=Counted) as (_, layers):
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from droidwire import main; main()",
            "run", str(test_file), "--json", "--timeout", "120",
            env={**os.environ, "DROIDWIRE_CONTROLLER": f"{a.url},{b.url}",
                 "DROIDWIRE_TOKEN": ADMIN_TOKEN},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        assert cli.stderr is not None and cli.stdout is not None
        async with asyncio.timeout(WAIT_S):
            line = (await cli.stderr.readline()).decode()
        assert line.startswith("accepted: "), line
        run_ids = [line.split()[1]]

        async def submit() -> str:
            started = await api_a.post("/v1/sandbox/execute", params={"wait": "false"},
                                       json={"test_code": code})
            assert started.status_code == 202, started.text
            return str(started.json()["run_id"])

        run_ids += await asyncio.gather(*(submit() for _ in range(11)))
        await a.kill9()
        runs = [await _final(api_b, r, world) for r in run_ids]
        out, err = await asyncio.wait_for(cli.communicate(), WAIT_S)
    assert cli.returncode == 0, err.decode()
    (followed,) = json.loads(out)["results"]
    assert followed["run_id"] == run_ids[0]
    assert followed == runs[0]["result"]

    # Exactly once: a device was asked for an instrumentation only for a run that recorded
    # one (a run's single instrument step: a request is recorded before it goes out, so the
    # dead replica may have recorded one it never sent).
    instrument_steps = Counter(
        run["result"]["device"]["id"].split("~", 1)[1]
        for run in runs
        for s in run["steps"] if s["detail"].get("method") == "device.instrument"
    )
    asked = sum((layer.instrumented for layer in layers), Counter())  # type: ignore[attr-defined]
    assert all(asked[d] <= instrument_steps[d] for d in asked), (asked, instrument_steps)
    assert sum(asked.values()) >= 11, [(r["verdict"], r["result"].get("summary")) for r in runs]
    for run in runs:
        instruments = [s for s in run["steps"] if s["detail"].get("method") == "device.instrument"]
        assert len(instruments) <= 1, run["steps"]
        assert run["status"] == "finished", run
    normal = [r for r in runs if r["verdict"] == "CONFIRMED"]
    pending = [r for r in runs if r["verdict"] != "CONFIRMED"]
    assert len(normal) >= 11, [r["result"]["summary"] for r in pending]
    for run in pending:
        assert run["verdict"] == "PENDING" and run["result"]["reason_code"], run["result"]
        assert run["result"]["summary"], run["result"]
    # The runs the dead replica had not taken to their tests were continued from the start.
    continued = [r for r in runs if any(
        s["kind"] == "recovery" and s["status"] == "ok" for s in r["steps"])]
    assert continued, "no run was continued on the survivor"
