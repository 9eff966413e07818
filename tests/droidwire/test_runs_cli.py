"""``droidwire runs list|show|cancel``, ``run --retries``, a fan-out's JUnit report (one suite
per device, one compile), and ``device logcat --json``: against a controller on real
uvicorn, its executor on the in-process gateway (real adb server, simulated devices)."""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from droidwire import app as cli
from tests.adb_support import AdbServer, connected_sim
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.controller.executor.test_sched_e2e import RETRY_TEST
from tests.controller.test_hub_support import FakeBridge, InLoopController, in_loop_controller
from tests.droidwire.test_run_cli import sandbox_controller

runner = CliRunner()
WAIT_S = 60.0


@pytest.fixture
def live(tmp_path: Path, gateway: LocalGateway) -> Iterator[LiveController]:
    with sandbox_controller(tmp_path, gateway) as controller:
        yield controller


def droidwire(url: str, *args: str) -> tuple[int, str, str]:
    env = {"DROIDWIRE_CONTROLLER": url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    result = runner.invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


async def cli_call(url: str, *args: str) -> tuple[int, str, str]:
    return await asyncio.to_thread(droidwire, url, *args)


@pytest.mark.adb
async def test_runs_list_show_with_retries_junit_and_logcat(
    live: LiveController, tmp_path: Path
) -> None:
    test = tmp_path / "RetryTest.kt"
    test.write_text(RETRY_TEST)
    code, out, err = await cli_call(live.url, "run", str(test), "--retries", "1", "--json")
    assert code == 0, err
    [result] = json.loads(out)["results"]
    run_id = result["run_id"]
    attempts = {t["name"]: t["attempts"] for t in result["tests"]}
    assert attempts == {"passes": 1, "breaks": 2}

    code, out, err = await cli_call(live.url, "runs", "list", "--json")
    assert code == 0, err
    listed = json.loads(out)["runs"]
    assert [r["id"] for r in listed] == [run_id] and listed[0]["status"] == "finished"
    code, out, _ = await cli_call(live.url, "runs", "list", "--status", "finished")
    assert code == 0 and run_id in out
    code, out, _ = await cli_call(live.url, "runs", "list", "--status", "queued", "--json")
    assert code == 0 and json.loads(out) == {"runs": []}

    report = tmp_path / "run.xml"
    code, out, err = await cli_call(live.url, "runs", "show", run_id, "--junit", str(report),
                                    "--logcat")
    assert code == 0, err
    assert run_id in out and "breaks" in out and "marker-breaks" in out  # table and slices
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert "marker-passes" in (cases["passes"].findtext("system-out") or "")
    assert {p.get("name"): p.get("value") for p in cases["breaks"].iter("property")} == {
        "attempts": "2", "flaky": "false"}

    code, out, _ = await cli_call(live.url, "runs", "show", run_id, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["id"] == run_id and shown["result"]["tests"]
    assert any(s["kind"] == "rpc" for s in shown["steps"])

    # Exit codes CI can tell apart: not found 4, usage 2, a conflict 1.
    assert (await cli_call(live.url, "runs", "show", "nosuchrun"))[0] == 4
    assert (await cli_call(live.url, "runs", "list", "--status", "bogus"))[0] == 2
    code, _, err = await cli_call(live.url, "runs", "cancel", run_id)
    assert code == 1 and "conflict" in err


@pytest.mark.adb
async def test_runs_cancel_waits_for_the_end(live: LiveController, gateway: LocalGateway) -> None:
    gateway.hang.add("device.instrument")
    async with httpx.AsyncClient(base_url=live.url, headers=bearer(ADMIN_TOKEN)) as http:
        started = await http.post("/v1/sandbox/execute", params={"wait": "false"},
                                  json={"test_code": llm_style_test("saveDraftSync()")})
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    code, out, err = await cli_call(live.url, "runs", "cancel", run_id, "--json")
    assert code == 0, err
    ended = json.loads(out)
    assert ended["status"] == "cancelled" and ended["verdict"] == "PENDING"
    assert ended["result"]["reason_code"] == "cancelled"


@pytest.mark.adb
async def test_fan_out_junit_has_one_suite_per_device_and_one_compile(
    live: LiveController, gateway: LocalGateway, adb_server: AdbServer, tmp_path: Path
) -> None:
    test = tmp_path / "DiskReadTest.kt"
    test.write_text(llm_style_test("loadSettingsFromDisk()"))
    report = tmp_path / "fanout.xml"
    with connected_sim(adb_server, profile="galaxy-a52") as second:
        pi = Dispatcher(policy=Policy(PolicyConfig()), devices=gateway.dispatchers["desk"].devices)
        gateway.add_bridge("pi", pi, [second.address])  # a bridge that cannot build
        code, out, err = await cli_call(live.url, "run", str(test), "-d", "all", "--json",
                                        "--junit", str(report), "--fail-on", "CONFIRMED")
    assert code == 1, err  # CONFIRMED on every device, and --fail-on names it
    results = json.loads(out)["results"]
    assert {r["device"]["bridge"] for r in results} == {"desk", "pi"}
    assert gateway.methods_called().count("workspace.compile") == 1
    suites = ET.parse(report).getroot().findall("testsuite")
    assert sorted(s.get("name") or "" for s in suites) == sorted(
        f"droidwire.{r['device']['id']}" for r in results)
    assert all(s.get("tests") == "2" for s in suites)


# -- device logcat --json ------------------------------------------------------------------


@pytest.fixture
async def controller(tmp_path: Path) -> Any:
    async with in_loop_controller(tmp_path) as c:
        yield c


async def test_device_logcat_json(controller: InLoopController) -> None:
    channel = "log-json"

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            return {"channel": channel}
        if method == "device.logcat.dump":
            return {"lines": ["a", "b"]}
        return {}

    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
    await fake.connect()
    try:
        code, out, err = await cli_call(controller.url, "device", "logcat", "emulator-5554",
                                        "--json")
        assert code == 0, err
        assert json.loads(out) == {"lines": ["a", "b"]}
        follow = asyncio.create_task(
            cli_call(controller.url, "device", "logcat", "emulator-5554", "-f", "--json"))
        entry = controller.hub.entries()[0]
        async with asyncio.timeout(WAIT_S):
            while channel not in entry.streams:  # noqa: ASYNC110 - hub state, no event
                await asyncio.sleep(0.001)
        await fake.emit(channel, {"lines": ["x", "y"], "dropped": 2})
        await fake.emit(channel, {"lines": [], "dropped": 0, "eof": True, "reason": "done"})
        code, out, err = await asyncio.wait_for(follow, WAIT_S)
        # -f runs until Ctrl-C: a stream the controller ends is never a success (exit 5,
        # unavailable; 3 when access ended), and what came before it is all printed.
        assert code == 5 and "the log stream ended: done" in err, err
        chunks = [json.loads(line) for line in out.splitlines()]
        assert chunks[0]["lines"] == ["x", "y"] and chunks[0]["dropped"] == 2
        assert chunks[-1]["eof"] is True and chunks[-1]["reason"] == "done"
    finally:
        await fake.close()


def test_stage_of_a_queued_or_cancelled_run() -> None:
    from droidwire.run import stage_of

    busy = {"kind": "device_busy", "status": "running", "detail": {"device": "desk~emu"}}
    assert stage_of({"status": "running", "steps": [busy]}).startswith("waiting for the device")
    cancel = {"kind": "cancel", "status": "ok", "detail": {"by": "alice"}}
    assert stage_of({"status": "running", "steps": [busy, cancel]}) == "cancelling"
    assert stage_of({"status": "cancelled", "verdict": "PENDING", "steps": []}) == "PENDING"
