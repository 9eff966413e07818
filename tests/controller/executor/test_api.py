"""``POST /v1/sandbox/execute``, ``GET /v1/runs[/{id}]``, ``GET /v1/tools`` over the ASGI app,
with the executor on the in-process gateway (real adb server, simulated device)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from controller.api import sandbox
from controller.app import create_app
from controller.config import ControllerConfig
from controller.executor import SandboxExecutor
from controller.services import services_of
from tests.controller.conftest import ADMIN_TOKEN, Api, _api, bearer
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test

pytestmark = pytest.mark.adb

ADMIN = bearer(ADMIN_TOKEN)
TIMEOUT = 60.0


def with_sandbox(app: FastAPI) -> FastAPI:
    if not any(getattr(r, "path", "") == "/v1/sandbox/execute" for r in app.routes):
        app.include_router(sandbox.router)
    return app


@pytest.fixture
async def client(tmp_path: Path, gateway: LocalGateway) -> AsyncIterator[Api]:
    app = with_sandbox(create_app(ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                                   bootstrap_token=ADMIN_TOKEN)))
    async for api in _api(app):
        services = services_of(app)
        services.executor = SandboxExecutor(gateway, services.store, settings=SETTINGS)
        yield api


async def test_execute_waits_for_the_verdict(client: Api) -> None:
    body = {"test_code": llm_style_test("loadSettingsFromDisk()")}
    response = await client.client.post("/v1/sandbox/execute", json=body, headers=ADMIN,
                                        timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["verification_status"] == "CONFIRMED"
    assert result["summary"].startswith("StrictMode violations: DiskRead | Blocking time: ")

    run = (await client.client.get(f"/v1/runs/{result['run_id']}", headers=ADMIN)).json()
    assert run["status"] == "finished" and run["verdict"] == "CONFIRMED"
    assert run["result"]["run_id"] == result["run_id"]
    methods = [s["detail"].get("method") for s in run["steps"] if s["kind"] == "rpc"]
    assert methods[0] == "workspace.compile" and "device.instrument" in methods
    listed = (await client.client.get("/v1/runs", headers=ADMIN)).json()["runs"]
    assert [r["id"] for r in listed] == [result["run_id"]]
    entries = await services_of(client.app).audit.recent(limit=5)
    assert any(e.action == "sandbox.execute" and e.outcome == "confirmed" for e in entries)


async def test_execute_without_waiting_gives_run_ids(client: Api) -> None:
    body = {"test_code": llm_style_test("formatTitle(\"inbox\", 3)")}
    response = await client.client.post("/v1/sandbox/execute?wait=false", json=body,
                                        headers=ADMIN)
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    executor: SandboxExecutor = client.app.state.services.executor
    async with asyncio.timeout(TIMEOUT):
        while executor._tasks:
            await asyncio.gather(*executor._tasks, return_exceptions=True)
    run = (await client.client.get(f"/v1/runs/{run_id}", headers=ADMIN)).json()
    assert run["status"] == "finished" and run["verdict"] == "REFUTED"
    entries = await services_of(client.app).audit.recent(limit=5)
    assert any(e.action == "sandbox.execute" and e.detail.get("run_id") == run_id
               for e in entries)


async def test_bad_requests_and_strangers(client: Api) -> None:
    post = client.client.post
    assert (await post("/v1/sandbox/execute", json={}, headers=ADMIN)).status_code == 400
    assert (await post("/v1/sandbox/execute", json={"test_code": "x", "rm": 1},
                       headers=ADMIN)).status_code == 400
    bad_sel = await post("/v1/sandbox/execute", json={"test_code": "x", "device": "sdk>=abc"},
                         headers=ADMIN)
    assert bad_sel.status_code == 400 and bad_sel.json()["error"]["code"] == "bad_request"
    assert (await post("/v1/sandbox/execute", json={"test_code": "x"})).status_code == 401
    assert (await client.client.get("/v1/runs/nope", headers=ADMIN)).status_code == 404

    # A user who owns no device and holds no grant: no device for them, refusals written down.
    user = await client.new_token("user", "mallory")
    as_user = bearer(user["token"])
    response = await post("/v1/sandbox/execute", json={"test_code": llm_style_test("formatTitle()")},
                          headers=as_user, timeout=TIMEOUT)
    assert response.status_code == 200
    result = response.json()
    assert result["reason_code"] == "no_device"
    run = (await client.client.get(f"/v1/runs/{result['run_id']}", headers=as_user)).json()
    [refusal] = [s for s in run["steps"] if s["kind"] == "authorize"]
    assert refusal["status"] == "refused" and refusal["detail"]["devices"] == 1
    assert "127.0.0.1" not in json.dumps(run)  # which device it was is not hers to know
    # Runs are private: the admin's run is not hers to read or list.
    skipped = {"test_code": "// Could not generate test body"}
    admin_run = (await post("/v1/sandbox/execute", json=skipped, headers=ADMIN)).json()
    assert admin_run["reason_code"] == "skipped"
    assert (await client.client.get(f"/v1/runs/{admin_run['run_id']}",
                                    headers=as_user)).status_code == 404
    mine = (await client.client.get("/v1/runs", headers=as_user)).json()["runs"]
    assert [r["id"] for r in mine] == [result["run_id"]]


async def test_tools_is_the_seed_tool(client: Api) -> None:
    [tool] = (await client.client.get("/v1/tools", headers=ADMIN)).json()
    assert tool["type"] == "function"
    fn = tool["function"]
    assert fn["name"] == "sandbox_executor"
    params = fn["parameters"]
    assert params["required"] == ["test_code"]
    assert {"test_code", "project_dir", "device", "timeout_s"} <= set(params["properties"])
    assert (await client.client.get("/v1/tools")).status_code == 401


async def test_shutdown_cancels_background_runs(tmp_path: Path, gateway: LocalGateway) -> None:
    from sqlalchemy import select

    from controller.store import Run, Store

    db = f"sqlite:///{tmp_path / 'c.db'}"
    gateway.hang.add("device.instrument")  # the run stays in flight
    app = with_sandbox(create_app(ControllerConfig(db_url=db, bootstrap_token=ADMIN_TOKEN)))
    async for api in _api(app):
        services = services_of(app)
        executor = services.executor = SandboxExecutor(gateway, services.store, settings=SETTINGS)
        body = {"test_code": llm_style_test("formatTitle()")}
        response = await api.client.post("/v1/sandbox/execute?wait=false", json=body,
                                          headers=ADMIN)
        run_id = response.json()["run_id"]
        async with asyncio.timeout(TIMEOUT):
            while "device.instrument" not in gateway.methods_called():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    assert not executor._tasks
    async with Store(db) as store, store.session() as session:
        run = (await session.execute(select(Run).where(Run.id == run_id))).scalar_one()
    assert run.status == "cancelled" and run.finished_at is not None
    # ... and what the run had installed was removed on the way out.
    assert gateway.methods_called()[-2:] == ["device.uninstall", "device.uninstall"]
