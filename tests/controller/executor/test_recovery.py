"""Restart recovery: runs a dead controller left ``queued``/``running`` end PENDING
``controller_restarted``; runs of this process and of live replicas are left alone; what a
dead run installed is listed as owed. End to end: a controller process is SIGKILLed while a
run's tests are running and its bridge restarts too, the controller is restarted on the same
SQLite database; the run is final — never stuck ``running`` — and once the bridge is back its
packages are uninstalled (a bridge that did not restart: test_recovery_resume.py)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from controller.executor.recovery import REASON, recover_runs
from controller.store import Run, RunStep, Store, utcnow
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from tests.adb_support import AdbServer, ConnectedSim, free_port
from tests.conftest import TIME_SCALE
from tests.controller.conftest import (  # noqa: F401 - fixtures
    ADMIN_TOKEN,
    bearer,
    db_url,
    pg_url,
    sqlite_url,
)
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.faults.procs import ControllerProcess
from tests.faults.test_process import host_config, wait_listed
from tests.faults.timing import SETTINGS

WAIT_S = 30.0 * TIME_SCALE


async def start_run_until_instrumenting(
    http: httpx.AsyncClient, sim: ConnectedSim, adb: Any
) -> str:
    """Start the disk-read run in the background; return its id once its tests are running on
    the bridge (``adb.started``), their result not yet answered."""
    started = await http.post(
        "/v1/sandbox/execute", params={"wait": "false"},
        json={"test_code": llm_style_test("loadSettingsFromDisk()"), "device": sim.address})
    assert started.status_code == 202, started.text
    async with asyncio.timeout(WAIT_S):
        await adb.started.wait()
    return str(started.json()["run_id"])


def _run(run_id: str, status: str, controller: str | None) -> Run:
    request: dict[str, Any] = {"test_code": "x", "device_id": "desk~emu-1"}
    if controller is not None:
        request["controller"] = controller
    return Run(id=run_id, status=status, request=request)


async def test_runs_of_gone_controllers_end_pending(store: Store) -> None:
    now = utcnow()
    async with store.session() as session, session.begin():
        session.add_all([
            _run("dead1", "running", "gone"),
            _run("dead2", "queued", None),  # from before runs named their controller
            _run("mine", "running", "me"),
            _run("elsewhere", "running", "replica-b"),
            _run("done", "finished", "gone"),
        ])
        await session.flush()
        session.add_all([
            RunStep(run_id="dead1", seq=0, kind="rpc", status="ok",
                    detail={"method": "device.install", "package": "com.x"},
                    created_at=now, finished_at=now),
            RunStep(run_id="dead1", seq=1, kind="rpc", status="ok",
                    detail={"method": "device.install", "package": "com.x.test"},
                    created_at=now, finished_at=now),
            RunStep(run_id="dead1", seq=2, kind="rpc", status="running",
                    detail={"method": "device.instrument"}, created_at=now),
        ])

    async def alive(replica: str) -> bool:
        return replica == "replica-b"

    ended = {r.run_id: r for r in await recover_runs(store, instance="me", alive=alive)}
    assert sorted(ended) == ["dead1", "dead2"]
    assert ended["dead1"].packages == ["com.x.test", "com.x"]  # the test package first
    assert ended["dead1"].device == "desk~emu-1" and ended["dead1"].next_seq == 4
    assert ended["dead2"].packages == []
    async with store.session() as session:
        runs = {r.id: r for r in (await session.execute(select(Run))).scalars()}
        steps = (await session.execute(
            select(RunStep).where(RunStep.run_id == "dead1").order_by(RunStep.seq))).scalars().all()
    for run_id in ("dead1", "dead2"):
        run = runs[run_id]
        assert run.status == "finished" and run.verdict == "PENDING" and run.finished_at
        assert run.result is not None and run.result["reason_code"] == REASON
        assert run.result["run_id"] == run_id and run.result["device"] == {"id": "desk~emu-1"}
    assert "during device.instrument" in runs["dead1"].result["summary"]
    assert runs["dead1"].result["summary"].startswith("Inconclusive: controller_restarted")
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (0, "rpc", "ok"), (1, "rpc", "ok"), (2, "rpc", "failed"), (3, "recovery", "failed")]
    assert steps[-1].detail["cleanup"] == {"device": "desk~emu-1",
                                           "packages": ["com.x.test", "com.x"]}
    assert {runs[r].status for r in ("mine", "elsewhere")} == {"running"}
    assert runs["done"].status == "finished" and runs["done"].result is None
    # Idempotent: nothing more to end.
    assert await recover_runs(store, instance="me", alive=alive) == []


class HangingDevices(AdbDevices):
    """The bridge's adb layer, with instrumentations that wait until released: a run stays
    in its tests with its packages installed."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def instrument(self, *args: Any, **kw: Any) -> Any:
        self.started.set()
        await self.release.wait()
        return await super().instrument(*args, **kw)


def packages_on(sim: ConnectedSim) -> set[str]:
    return set(sim.call(lambda: list(sim.device.packages)))


@pytest.mark.adb
@pytest.mark.timeout(120)
async def test_kill_9_mid_run_and_bridge_restart_end_the_run(
    tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim
) -> None:
    """The bridge process restarts too: the result it held is gone with it, so the run
    cannot be resumed (test_recovery_resume.py) and ends PENDING; its packages are removed."""
    db = f"sqlite:///{tmp_path / 'controller.db'}"
    controller = ControllerProcess(free_port(), db, ADMIN_TOKEN, tmp_path / "controller.log")
    await controller.start()
    adb = HangingDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.02)
    adb2 = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.02)
    before_run = packages_on(sim)
    try:
        async with httpx.AsyncClient(base_url=controller.url, headers=bearer(ADMIN_TOKEN),
                                     timeout=WAIT_S) as http:
            made = await http.post("/v1/tokens", json={"kind": "bridge", "name": "desk"})
            assert made.status_code == 201, made.text
            config = host_config(f"ws://127.0.0.1:{controller.port}", adb_server)
            token = made.json()["token"]
            async with Bridge(config, token=token, devices=adb,
                              build=build_service(tmp_path / "ws"), settings=SETTINGS) as bridge:
                await bridge.wait_open(WAIT_S)
                await wait_listed(http, sim.address, "device")
                run_id = await start_run_until_instrumenting(http, sim, adb)
                before = (await http.get(f"/v1/runs/{run_id}")).json()
                assert before["status"] == "running"
                installed = packages_on(sim) - before_run
                assert len(installed) == 2  # the app and its tests

                await controller.kill9()
                adb.release.set()  # the bridge holds the result… and then restarts
            await controller.start()
            async with Bridge(config, token=token, devices=adb2,
                              build=build_service(tmp_path / "ws2"), settings=SETTINGS) as bridge:
                async with asyncio.timeout(WAIT_S):
                    while True:  # polling over HTTP: the run's step log is all there is
                        run = (await http.get(f"/v1/runs/{run_id}")).json()
                        if run["steps"][-1]["kind"] == "cleanup":
                            break
                        await asyncio.sleep(0.05)
                left = packages_on(sim) & installed
    finally:
        adb.release.set()
        with contextlib.suppress(Exception):
            await controller.stop()
        await adb.aclose()
        await adb2.aclose()
    assert run["status"] == "finished" and run["verdict"] == "PENDING", run
    result = run["result"]
    assert result["reason_code"] == REASON and result["run_id"] == run_id
    assert "during device.instrument" in result["summary"]
    assert "bridge_restarted" in result["summary"]
    assert all(s["status"] != "running" for s in run["steps"])
    assert run["steps"][-2]["kind"] == "recovery"
    cleanup = run["steps"][-1]
    assert cleanup["status"] == "ok", cleanup
    assert set(cleanup["detail"]["removed"]) == installed and not left


async def test_two_replicas_recovering_at_once_take_each_run_exactly_once(
    db_url: str,  # noqa: F811 - fixture
) -> None:
    """A dead replica's runs, recovered by two survivors at the same time (the reaper and a
    replica starting up): the conditional UPDATE lets exactly one end or resume each."""
    store = Store(db_url)
    await store.migrate()
    now = utcnow()
    device = {"bridge_id": "b1", "bridge_name": "desk", "owner_id": "u1", "serial": "emu-1"}
    try:
        async with store.session() as session, session.begin():
            session.add_all([_run("cut", "running", "dead"), _run("queued", "queued", "dead")])
            await session.flush()
            session.add(RunStep(
                run_id="cut", seq=0, kind="rpc", status="running", created_at=now,
                detail={"method": "device.instrument", "request_id": "r", "bridge_session": "s",
                        "resume": {"device": device}}))
        resumed: list[tuple[str, str]] = []

        def resume_by(instance: str) -> Any:
            def resume(item: Any) -> Any:
                resumed.append((instance, item.run_id))
                done = asyncio.get_running_loop().create_future()
                done.set_result(None)
                return done
            return resume

        async def alive(replica: str) -> bool:
            return replica != "dead"

        first, second = await asyncio.gather(
            *(recover_runs(store, instance=i, alive=alive, resume=resume_by(i))
              for i in ("r1", "r2")))
        taken = [r.run_id for r in (*first, *second)]
        assert sorted(taken) == ["cut", "queued"]  # each run once, by one replica or the other
        assert len(resumed) == 1 and resumed[0][1] == "cut"
        async with store.session() as session:
            runs = {r.id: r for r in (await session.execute(select(Run))).scalars()}
            recovery = (await session.execute(
                select(RunStep).where(RunStep.kind == "recovery"))).scalars().all()
        assert runs["cut"].status == "running"  # resuming, not ended
        assert runs["cut"].request["controller"] == resumed[0][0]
        assert runs["queued"].status == "finished" and runs["queued"].verdict == "PENDING"
        assert runs["queued"].request["controller"] in ("r1", "r2")
        assert [s.run_id for s in recovery] == ["queued"]  # ended once
    finally:
        await store.close()
