"""Resuming after a restart: a run whose bridge still holds its instrumentation result
completes when the bridge reconnects — the controller process is SIGKILLed while the tests
run on the device, restarted on the same SQLite database, and the run ends with its real
verdict; the tests ran once. An adopted request is never sent again (the session flag)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from protocol.envelope import PROTOCOL_VERSION, Hello, new_request_id
from protocol.errors import ErrorCode
from protocol.session import ControllerSession
from tests.adb_support import AdbServer, ConnectedSim, free_port
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.controller.executor.test_recovery import (
    WAIT_S,
    packages_on,
    start_run_until_instrumenting,
)
from tests.faults.procs import ControllerProcess
from tests.faults.test_process import host_config, wait_listed
from tests.faults.timing import SETTINGS


class CountingDevices(AdbDevices):
    """The bridge's adb layer: instrumentations wait until released, and are counted."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.instrumented = 0

    async def instrument(self, *args: Any, **kw: Any) -> Any:
        self.instrumented += 1
        self.started.set()
        await self.release.wait()
        return await super().instrument(*args, **kw)


async def _until_run(http: httpx.AsyncClient, run_id: str, done: Any) -> dict[str, Any]:
    """Poll ``GET /v1/runs/{run_id}`` (bounded) until ``done(run)``; return that run."""
    run: dict[str, Any] = {}
    try:
        async with asyncio.timeout(WAIT_S):
            while True:
                run = (await http.get(f"/v1/runs/{run_id}")).json()
                if done(run):
                    return run
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"run {run_id} not there in {WAIT_S:g} s: {run}") from None


def _hello(session: str, held: list[str]) -> Hello:
    return Hello(protocol=PROTOCOL_VERSION, session=session, software="test", held=held)


@pytest.mark.parametrize("same_session", [True, False])
def test_an_adopted_request_is_never_sent_again(same_session: bool) -> None:
    session = ControllerSession(bridge_id="desk")
    session.connection_made()
    pending = session.register("device.instrument", {"serial": "s", "package": "p"}, now=0.0,
                               request_id=new_request_id(), validate=False)
    bridge_session = new_request_id()
    pending.sent_session = bridge_session
    pending.resend = False
    resume = session.on_hello(
        _hello(bridge_session if same_session else new_request_id(), []), 1.0)
    assert resume.resent == [] and resume.welcome.waiting == []
    [failed] = resume.failed
    assert failed.id == pending.id and failed.error is not None
    assert failed.error.code is ErrorCode.UNAVAILABLE
    assert failed.error.data["reason"] == ("result_lost" if same_session else "bridge_restarted")


def test_an_adopted_request_held_by_the_bridge_is_waited_for() -> None:
    session = ControllerSession(bridge_id="desk")
    session.connection_made()
    rid = new_request_id()
    pending = session.register("device.instrument", {"serial": "s", "package": "p"}, now=0.0,
                               request_id=rid, validate=False)
    bridge_session = new_request_id()
    pending.sent_session = bridge_session
    pending.resend = False
    resume = session.on_hello(_hello(bridge_session, [rid]), 1.0)
    assert resume.resent == [] and resume.failed == [] and resume.welcome.waiting == [rid]


@dataclass
class Killable:
    """A controller process (SQLite in ``tmp_path``) with the real bridge connected to it and
    its device listed: kill it with ``controller.kill9()``, bring it back with ``start()``."""

    controller: ControllerProcess
    http: httpx.AsyncClient
    adb: CountingDevices


@contextlib.asynccontextmanager
async def killable(tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim
                   ) -> AsyncIterator[Killable]:
    db = f"sqlite:///{tmp_path / 'controller.db'}"
    controller = ControllerProcess(free_port(), db, ADMIN_TOKEN, tmp_path / "controller.log")
    await controller.start()
    adb = CountingDevices(port=adb_server.port, call_timeout_s=15.0 * WAIT_S / 30.0,
                          flush_s=0.02)
    try:
        async with httpx.AsyncClient(base_url=controller.url, headers=bearer(ADMIN_TOKEN),
                                     timeout=WAIT_S) as http:
            made = await http.post("/v1/tokens", json={"kind": "bridge", "name": "desk"})
            assert made.status_code == 201, made.text
            async with Bridge(host_config(f"ws://127.0.0.1:{controller.port}", adb_server),
                              token=made.json()["token"], devices=adb,
                              build=build_service(tmp_path / "ws"),
                              settings=SETTINGS) as bridge:
                await bridge.wait_open(WAIT_S)
                await wait_listed(http, sim.address, "device")
                yield Killable(controller, http, adb)
    finally:
        adb.release.set()
        with contextlib.suppress(Exception):
            await controller.stop()
        await adb.aclose()


@pytest.mark.adb
@pytest.mark.timeout(120)
async def test_kill_9_mid_run_then_restart_resumes_the_run(
    tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim
) -> None:
    before_run = packages_on(sim)
    async with killable(tmp_path, adb_server, sim) as world:
        http, adb = world.http, world.adb
        run_id = await start_run_until_instrumenting(http, sim, adb)
        installed = packages_on(sim) - before_run
        assert len(installed) == 2

        await world.controller.kill9()
        await world.controller.start()
        # A new run on the device (once its bridge is back) waits for the resumed one's turn
        # to end.
        await wait_listed(http, sim.address, "device")
        second = await http.post(
            "/v1/sandbox/execute", params={"wait": "false"},
            json={"test_code": llm_style_test("loadSettingsFromDisk()"),
                  "device": sim.address})
        assert second.status_code == 202, second.text
        second_id = second.json()["run_id"]
        await _until_run(http, second_id, lambda r: any(
            s["kind"] == "device_busy" for s in r["steps"]))
        adb.release.set()  # the result comes while the controller is away or back
        run = await _until_run(http, run_id, lambda r: r["status"] != "running")
        after = await _until_run(http, second_id, lambda r: r["status"] == "finished")
        # Read once both runs are done: the second run installs the same two packages as soon
        # as the first one's turn ends, so the device between the two shows the second run's.
        left = packages_on(sim) & installed
    assert run["status"] == "finished" and run["verdict"] == "CONFIRMED", run
    result = run["result"]
    assert result["run_id"] == run_id and result["resumed"] is True
    assert result["summary"].startswith("StrictMode violations: DiskRead | Blocking time: ")
    assert adb.instrumented == 2  # the held result was delivered, the tests not run again;
    # the second run's tests ran once the resumed run was done with the device
    assert after["verdict"] == "CONFIRMED", after
    [busy] = [s for s in after["steps"] if s["kind"] == "device_busy"]
    assert busy["status"] == "ok"
    instrument = [s for s in run["steps"] if s["detail"].get("method") == "device.instrument"]
    assert [s["status"] for s in instrument] == ["ok"] and instrument[0]["detail"]["resumed"]
    assert all(s["status"] != "running" for s in run["steps"])
    # Cleaned up as a run that was never interrupted: it uninstalled both of its packages.
    uninstalled = {s["detail"]["params"]["package"] for s in run["steps"]
                   if s["detail"].get("method") == "device.uninstall" and s["status"] == "ok"}
    assert uninstalled == installed, run["steps"]
    assert not left


@pytest.mark.adb
@pytest.mark.timeout(120)
async def test_a_resumed_run_still_retries_its_failed_tests(
    tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim
) -> None:
    """``retries`` outlives the restart: the resumed run runs the failed test again, alone,
    before it concludes (before, a resumed run skipped its retries)."""
    from tests.controller.executor.test_sched_e2e import RETRY_TEST

    async with killable(tmp_path, adb_server, sim) as world:
        started = await world.http.post(
            "/v1/sandbox/execute", params={"wait": "false"},
            json={"test_code": RETRY_TEST, "device": sim.address, "retries": 1})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        async with asyncio.timeout(WAIT_S):
            await world.adb.started.wait()
        await world.controller.kill9()
        await world.controller.start()
        world.adb.release.set()
        run = await _until_run(world.http, run_id, lambda r: r["status"] == "finished")
        adb = world.adb
    result = run["result"]
    assert result["resumed"] is True, run
    assert adb.instrumented == 2  # the held first attempt, then the retry of the failed test
    tests = {t["name"]: t for t in result["tests"]}
    assert tests["passes"]["attempts"] == 1 and tests["passes"]["status"] == "passed"
    assert tests["breaks"]["attempts"] == 2 and tests["breaks"]["status"] == "failed"
    again = [s for s in run["steps"] if s["detail"].get("method") == "device.instrument"
             and not s["detail"].get("resumed")]
    assert len(again) == 1 and again[0]["status"] == "ok"
