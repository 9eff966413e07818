"""Scheduling through the real adb server and the simulated device: only the failed tests are
run again (``-e class Cls#method``), each test keeps its logcat slice, a run is cancelled
while running (its device still cleaned up) or while waiting in the device's queue; and the
REST side: ``POST /v1/runs/{id}/cancel`` and the run scopes."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from controller.app import create_app
from controller.config import ControllerConfig
from controller.executor import ExecuteRequest, Progress, RunResult, SandboxExecutor
from controller.executor.gateway import Target
from controller.services import services_of
from controller.store import Run, RunStep, Store
from tests.controller.conftest import ADMIN_TOKEN, Api, _api, bearer
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.controller.executor.test_api import with_sandbox

pytestmark = pytest.mark.adb

WAIT_S = 60.0
ADMIN = bearer(ADMIN_TOKEN)

RETRY_TEST = textwrap.dedent("""\
    package com.droidwire.demo.test

    import android.util.Log
    import androidx.test.ext.junit.runners.AndroidJUnit4
    import org.junit.Assert.fail
    import org.junit.Test
    import org.junit.runner.RunWith

    @RunWith(AndroidJUnit4::class)
    class RetryTest {
        @Test
        fun passes() {
            Log.i("RetryTest", "marker-passes")
        }

        @Test
        fun breaks() {
            Log.i("RetryTest", "marker-breaks")
            fail("boom")
        }
    }
    """)


class ParamsGateway(LocalGateway):
    """Also keeps each call's parameters."""

    def __init__(self, inner: LocalGateway) -> None:
        super().__init__()
        self.__dict__.update(inner.__dict__)
        self.params: list[tuple[str, dict[str, Any]]] = []

    async def call_wire(self, target: Target, method: str, params: Mapping[str, Any], *,
                        timeout_s: float | None = None) -> dict[str, Any]:
        self.params.append((method, dict(params)))
        return await super().call_wire(target, method, params, timeout_s=timeout_s)


async def test_only_the_failed_tests_run_again_and_each_keeps_its_logcat(
    gateway: LocalGateway, store: Store
) -> None:
    gw = ParamsGateway(gateway)
    executor = SandboxExecutor(gw, store, settings=SETTINGS)
    [result] = await executor.execute(ExecuteRequest(test_code=RETRY_TEST, retries=2))
    instruments = [p for m, p in gw.params if m == "device.instrument"]
    assert len(instruments) == 3, result.summary
    assert instruments[0]["args"] == {"class": "com.droidwire.demo.test.RetryTest"}
    for again in instruments[1:]:
        assert again["args"] == {"class": "com.droidwire.demo.test.RetryTest#breaks"}
    tests = {t["name"]: t for t in result.tests}
    assert tests["passes"]["status"] == "passed" and tests["passes"]["attempts"] == 1
    assert tests["breaks"]["status"] == "failed" and tests["breaks"]["attempts"] == 3
    assert "boom" in (tests["breaks"]["stack"] or "")
    assert "marker-passes" in tests["passes"]["logcat"]
    assert "marker-breaks" not in tests["passes"]["logcat"]
    assert tests["breaks"]["logcat"].count("marker-breaks") == 3  # one window per attempt
    # Without retries (the default), one instrumentation only.
    gw.params.clear()
    [again] = await executor.execute(ExecuteRequest(test_code=RETRY_TEST))
    assert [m for m, _ in gw.params].count("device.instrument") == 1
    assert {t["name"]: t["attempts"] for t in again.tests} == {"passes": 1, "breaks": 1}


class Stages:
    """Progress stages seen, by run id, each with an event to wait on."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], asyncio.Event] = {}

    def event(self, run_id: str, stage: str) -> asyncio.Event:
        return self.events.setdefault((run_id, stage), asyncio.Event())

    def __call__(self, progress: Progress) -> None:
        for run_id in progress.run_ids:
            self.event(run_id, progress.stage).set()

    async def wait(self, run_id: str, stage: str) -> None:
        async with asyncio.timeout(WAIT_S):
            await self.event(run_id, stage).wait()


async def _submit(executor: SandboxExecutor, request: ExecuteRequest, stages: Stages
                  ) -> tuple[str, asyncio.Future[list[RunResult]]]:
    plan = await executor.plan(request, None)
    done: asyncio.Future[list[RunResult]] = asyncio.get_running_loop().create_future()

    async def then(results: list[RunResult]) -> None:
        done.set_result(results)

    executor.submit(plan, listener=stages, then=then)
    return plan.run_ids[0], done


async def _run_row(store: Store, run_id: str) -> tuple[Run, list[RunStep]]:
    from sqlalchemy import select

    async with store.session() as session:
        run = (await session.execute(select(Run).where(Run.id == run_id))).scalar_one()
        steps = (await session.execute(
            select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq))).scalars().all()
    return run, list(steps)


async def test_cancel_a_running_run_and_a_queued_one(
    gateway: LocalGateway, store: Store
) -> None:
    gateway.hang.add("device.instrument")  # the first run sticks in its tests
    executor = SandboxExecutor(gateway, store, settings=SETTINGS)
    stages = Stages()
    code = llm_style_test("loadSettingsFromDisk()")
    first, first_done = await _submit(executor, ExecuteRequest(test_code=code), stages)
    await stages.wait(first, "running")
    second, second_done = await _submit(executor, ExecuteRequest(test_code=code), stages)
    await stages.wait(second, "waiting for the device")
    assert executor.scheduler.depth() == 1
    installs_before = gateway.methods_called().count("device.install")

    assert executor.cancel(second, by="alice")
    async with asyncio.timeout(WAIT_S):
        [queued] = await second_done
    assert queued.verification_status == "PENDING" and queued.reason_code == "cancelled"
    assert "cancelled by alice" in queued.summary
    assert gateway.methods_called().count("device.install") == installs_before  # never started
    assert executor.scheduler.depth() == 0 and executor.active(first)

    assert executor.cancel(first, by="alice")
    async with asyncio.timeout(WAIT_S):
        [running] = await first_done
    assert running.reason_code == "cancelled"
    called = gateway.methods_called()
    # Cleaned up after the cancel: the app's data cleared and both packages uninstalled.
    assert called[called.index("device.instrument"):].count("device.uninstall") == 2
    for run_id in (first, second):
        row, steps = await _run_row(store, run_id)
        assert row.status == "cancelled" and row.verdict == "PENDING"
        assert row.result is not None and row.result["reason_code"] == "cancelled"
        assert [s.kind for s in steps if s.kind == "cancel"] == ["cancel"]
        assert all(s.status != "running" for s in steps)
    assert not executor.active(first) and not executor.cancel(first)
    assert not executor.cancel("no-such-run")


async def test_cancel_during_the_compile_ends_every_run_of_the_plan(
    gateway: LocalGateway, store: Store
) -> None:
    gateway.hang.add("workspace.compile")
    executor = SandboxExecutor(gateway, store, settings=SETTINGS)
    stages = Stages()
    run_id, done = await _submit(
        executor, ExecuteRequest(test_code=llm_style_test("saveDraftSync()")), stages)
    await stages.wait(run_id, "compiling")
    assert executor.cancel(run_id)
    async with asyncio.timeout(WAIT_S):
        [result] = await done
    assert result.reason_code == "cancelled"
    assert "device.install" not in gateway.methods_called()
    row, _ = await _run_row(store, run_id)
    assert row.status == "cancelled"


# -- REST -------------------------------------------------------------------------------------


class OpenExecutor(SandboxExecutor):
    """Every device usable by anyone: the lending rules are tested elsewhere (the gateway's
    devices are not in the store); here the route's scopes are under test."""

    async def _usable_devices(self, principal: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        return list(self.gateway.devices()), []


@pytest.fixture
async def client(tmp_path: Path, gateway: LocalGateway) -> AsyncIterator[Api]:
    app = with_sandbox(create_app(ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                                   bootstrap_token=ADMIN_TOKEN)))
    async for api in _api(app):
        services = services_of(app)
        services.executor = OpenExecutor(gateway, services.store, settings=SETTINGS)
        yield api


async def _token(api: Api, name: str, scopes: list[str] | None) -> dict[str, str]:
    body: dict[str, Any] = {"kind": "user", "name": name}
    if scopes is not None:
        body["scopes"] = scopes
    made = await api.client.post("/v1/tokens", json=body, headers=ADMIN)
    assert made.status_code == 201, made.text
    return bearer(made.json()["token"])


async def _final(api: Api, run_id: str, headers: dict[str, str]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:  # polling over HTTP: the REST answer is all there is to wait on
            run = (await api.client.get(f"/v1/runs/{run_id}", headers=headers)).json()
            if run["status"] in ("finished", "cancelled"):
                return dict(run)
            await asyncio.sleep(0.02)


async def test_cancel_route_and_run_scopes(client: Api, gateway: LocalGateway) -> None:
    writer = await _token(client, "writer", ["runs:write"])
    reader = await _token(client, "reader", ["runs:read"])
    devices_only = await _token(client, "lurker", ["devices:read"])
    body = {"test_code": llm_style_test("loadSettingsFromDisk()")}

    # runs:read may not start or cancel runs; devices:read may not even read them.
    refused = await client.client.post("/v1/sandbox/execute", json=body, headers=reader)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert (await client.client.get("/v1/runs", headers=devices_only)).status_code == 403

    gateway.hang.add("device.instrument")
    started = await client.client.post("/v1/sandbox/execute", json=body, headers=writer,
                                       params={"wait": "false"})
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    assert (await client.client.get(f"/v1/runs/{run_id}", headers=reader)).status_code == 404
    assert (await client.client.get(f"/v1/runs/{run_id}", headers=devices_only)).status_code == 403
    assert (await client.client.post(f"/v1/runs/{run_id}/cancel", headers=reader)).status_code == 403
    assert (await client.client.post("/v1/runs/nosuchrun/cancel", headers=writer)).status_code == 404

    cancelled = await client.client.post(f"/v1/runs/{run_id}/cancel", headers=writer)
    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json() == {"id": run_id, "status": "cancelling"}
    run = await _final(client, run_id, writer)
    assert run["status"] == "cancelled" and run["verdict"] == "PENDING"
    assert run["result"]["reason_code"] == "cancelled"
    assert "cancelled by writer" in run["result"]["summary"]
    again = await client.client.post(f"/v1/runs/{run_id}/cancel", headers=writer)
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    listed = (await client.client.get("/v1/runs", headers=writer,
                                      params={"status": "cancelled"})).json()["runs"]
    assert [r["id"] for r in listed] == [run_id]
    entries = await services_of(client.app).audit.recent(limit=10)
    assert any(e.action == "run.cancel" and e.actor == "writer" for e in entries)
