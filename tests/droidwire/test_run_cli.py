"""``droidwire run TEST.kt`` against a controller on real uvicorn, its executor on the
in-process gateway (real adb server, simulated device)."""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from controller.config import ControllerConfig
from controller.executor import SandboxExecutor
from controller.services import services_of
from droidwire import app as cli
from droidwire.run import stage_of
from tests.controller.conftest import ADMIN_TOKEN, LiveController
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.controller.executor.test_api import with_sandbox

pytestmark = pytest.mark.adb

runner = CliRunner()


@contextmanager
def sandbox_controller(tmp_path: Path, gateway: LocalGateway) -> Iterator[LiveController]:
    """A controller on real uvicorn whose executor runs on the in-process ``gateway``."""
    apps: list[FastAPI] = []

    def customize(app: FastAPI) -> None:
        with_sandbox(app)
        apps.append(app)

    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", bootstrap_token=ADMIN_TOKEN)
    with LiveController(config, customize) as controller:
        with httpx.Client(base_url=controller.url) as http:
            assert http.get("/healthz").status_code == 200  # start-up (the store) is done
        app = apps[0]
        services = services_of(app)
        services.executor = SandboxExecutor(gateway, services.store, settings=SETTINGS)
        yield controller


@pytest.fixture
def live(tmp_path: Path, gateway: LocalGateway) -> Iterator[LiveController]:
    with sandbox_controller(tmp_path, gateway) as controller:
        yield controller


def droidwire(live: LiveController, *args: str) -> tuple[int, str, str]:
    env = {"DROIDWIRE_CONTROLLER": live.url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    result = runner.invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


async def test_run_json_junit_and_fail_on(live: LiveController, tmp_path: Path) -> None:
    test = tmp_path / "DiskReadTest.kt"
    test.write_text(llm_style_test("loadSettingsFromDisk()"))
    report = tmp_path / "report.xml"
    code, out, err = await asyncio.to_thread(
        droidwire, live, "run", str(test), "--json", "--junit", str(report)
    )
    assert code == 0, err
    [result] = json.loads(out)["results"]
    assert result["verification_status"] == "CONFIRMED" and result["blocking_time_ms"] >= 300
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "2"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verification_status"] == "CONFIRMED"

    code, out, err = await asyncio.to_thread(
        droidwire, live, "run", str(test), "--fail-on", "confirmed,partial"
    )
    assert code == 1, err
    assert "CONFIRMED" in out and "DiskRead" in out  # the verdict table


async def test_run_usage_errors(live: LiveController, tmp_path: Path) -> None:
    code, _, _ = await asyncio.to_thread(droidwire, live, "run", str(tmp_path / "missing.kt"))
    assert code == 2
    test = tmp_path / "T.kt"
    test.write_text("class T")
    code, _, _ = await asyncio.to_thread(droidwire, live, "run", str(test), "--fail-on", "maybe")
    assert code == 2
    code, _, err = await asyncio.to_thread(droidwire, live, "run", str(test), "-d", "sdk>=x")
    assert code == 2 and "bad_request" in err


def test_stage_of_follows_the_step_log() -> None:
    def rpc(method: str) -> dict[str, object]:
        return {"kind": "rpc", "detail": {"method": method}}

    assert stage_of({"status": "queued", "steps": []}) == "queued"
    assert stage_of({"status": "running", "steps": [rpc("workspace.compile")]}) == "compiling"
    steps = [rpc("workspace.compile"), rpc("source.lookup"),
             {"kind": "fix", "detail": {}}, rpc("workspace.compile")]
    assert stage_of({"status": "running", "steps": steps}) == "compiling (round 2)"
    assert stage_of({"status": "running", "steps": steps[:3]}) == "fixing compile errors (round 1/3)"
    assert stage_of({"status": "running", "steps": [rpc("device.install")]}) == "installing"
    assert stage_of({"status": "finished", "verdict": "REFUTED", "steps": []}) == "REFUTED"
