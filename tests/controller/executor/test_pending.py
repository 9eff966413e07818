"""PENDING for each failure mode (docs/design.md §5): a reason code and §5's summary, never an
exception; the step log says what was refused or failed."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from controller.executor import ExecuteRequest, SandboxExecutor
from controller.store import Run, RunStep, Store
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from tests.conftest import TIME_SCALE
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test

pytestmark = pytest.mark.adb

GOOD = llm_style_test("formatTitle(\"inbox\", 3)")


async def steps_of(store: Store, run_id: str) -> list[RunStep]:
    async with store.session() as session:
        return list((await session.execute(
            select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq)
        )).scalars())


async def test_skipped(executor: SandboxExecutor, gateway: LocalGateway, store: Store) -> None:
    code = "// Could not generate test body for MainActivity.loadSettingsFromDisk\n"
    [result] = await executor.execute(ExecuteRequest(test_code=code))
    assert (result.verification_status, result.reason_code) == ("PENDING", "skipped")
    assert result.summary.startswith("Skipped: ")
    assert result.blocking_time_ms == -1 and result.strict_mode_violations == []
    assert gateway.calls == []
    [step] = await steps_of(store, result.run_id)
    assert (step.kind, step.status) == ("skipped", "skipped")


async def test_no_device(executor: SandboxExecutor, gateway: LocalGateway) -> None:
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD, device="no-such-phone"))
    assert (result.verification_status, result.reason_code) == ("PENDING", "no_device")
    assert result.summary.startswith("Sandbox unavailable: no_device")
    assert result.device is None and gateway.calls == []


async def test_adb_unavailable_when_the_device_is_offline(
    executor: SandboxExecutor, gateway: LocalGateway
) -> None:
    [serial] = gateway.serials["desk"]
    gateway.state[serial] = "offline"
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD, device=serial))
    assert result.reason_code == "adb_unavailable"
    assert result.summary.startswith("Sandbox unavailable: adb_unavailable")


async def test_adb_unavailable_when_the_device_is_gone(
    executor: SandboxExecutor, gateway: LocalGateway, store: Store
) -> None:
    gateway.serials["desk"] = ["127.0.0.1:9"]  # the bridge lists it, adb has never seen it
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD))
    assert result.verification_status == "PENDING", result.summary
    assert result.reason_code == "adb_unavailable"
    assert result.summary.startswith("Sandbox unavailable: adb_unavailable")
    assert result.compile_rounds and result.compile_rounds[-1]["ok"]
    failed = [s for s in await steps_of(store, result.run_id) if s.status == "failed"]
    assert failed and failed[0].detail["method"] == "device.logcat.clear"


async def test_bridge_unavailable_when_the_bridge_is_away(
    executor: SandboxExecutor, gateway: LocalGateway
) -> None:
    gateway.connected["desk"] = False
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD))
    assert result.reason_code == "bridge_unavailable"
    assert result.summary.startswith("Sandbox unavailable: bridge_unavailable")
    assert gateway.calls == []


async def test_bridge_unavailable_when_no_bridge_builds(
    gateway: LocalGateway, store: Store
) -> None:
    devices_only = Dispatcher(policy=Policy(PolicyConfig()),
                              devices=gateway.dispatchers["desk"].devices)
    gw = LocalGateway()
    gw.add_bridge("pi", devices_only, gateway.serials["desk"])
    executor = SandboxExecutor(gw, store, settings=SETTINGS)
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD))
    assert result.reason_code == "bridge_unavailable"
    assert "build" in result.summary
    [step] = [s for s in await steps_of(store, result.run_id) if s.kind == "compile"]
    assert step.status == "refused"


async def test_refused_by_the_bridge_policy_is_logged(
    gateway: LocalGateway, store: Store
) -> None:
    [serial] = gateway.serials["desk"]
    paused = Dispatcher(policy=Policy(PolicyConfig(paused=True)),
                        devices=gateway.dispatchers["desk"].devices,
                        build=gateway.dispatchers["desk"].build)
    gw = LocalGateway()
    gw.add_bridge("desk", paused, [serial])
    executor = SandboxExecutor(gw, store, settings=SETTINGS)
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD))
    assert result.verification_status == "PENDING"
    refused = [s for s in await steps_of(store, result.run_id) if s.status == "refused"]
    assert refused and refused[0].detail["error"]["rule"] == "paused"


async def test_timeout(executor: SandboxExecutor, gateway: LocalGateway) -> None:
    gateway.hang.add("device.instrument")  # the device never answers
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD, timeout_s=2.0 * TIME_SCALE))
    assert (result.verification_status, result.reason_code) == ("PENDING", "timeout")
    assert result.summary.startswith("Sandbox unavailable: timeout")
    # Logcat was still collected and the cleanup ran, though the deadline had passed.
    assert gateway.methods_called()[-4:] == [
        "device.logcat.dump", "device.shell", "device.uninstall", "device.uninstall"
    ]


async def test_a_long_main_thread_stall_is_an_anr(executor: SandboxExecutor) -> None:
    stall = GOOD.replace('activity.formatTitle("inbox", 3)', "SystemClock.sleep(8_000)", 1)
    [result] = await executor.execute(ExecuteRequest(test_code=stall))
    assert (result.verification_status, result.reason_code) == ("CONFIRMED", "anr")
    assert result.anrs and result.anrs[0]["package"] == "com.droidwire.demo"


async def test_test_crashed(executor: SandboxExecutor, store: Store) -> None:
    crashing = GOOD.replace(
        "val start = SystemClock.elapsedRealtime()",
        'throw IllegalStateException("settings missing")\n'
        "                val start = SystemClock.elapsedRealtime()",
        1,
    )
    [result] = await executor.execute(ExecuteRequest(test_code=crashing))
    assert (result.verification_status, result.reason_code) == ("PENDING", "test_crashed")
    assert result.summary.startswith("Inconclusive: java.lang.IllegalStateException")
    assert result.crashes and result.tests
    async with store.session() as session:
        run = (await session.execute(select(Run).where(Run.id == result.run_id))).scalar_one()
    assert run.verdict == "PENDING" and run.status == "finished"


async def test_bridge_unavailable_when_no_bridge_serves_the_project(
    executor: SandboxExecutor, gateway: LocalGateway
) -> None:
    assert gateway.caps["desk"].projects == ["demo"]
    [result] = await executor.execute(ExecuteRequest(test_code=GOOD, project_dir="shop"))
    assert result.reason_code == "bridge_unavailable"
    assert "project shop" in result.summary
    assert gateway.calls == []
