"""Every demo method's verdict, end to end: the executor → the bridge's dispatcher → the real
adb server → the simulated device, with tests written the way an LLM writes them."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from controller.executor import ExecuteRequest, SandboxExecutor
from controller.store import Run, RunStep, Store
from tests.adb_support import ConnectedSim
from tests.controller.executor.support import LocalGateway, llm_style_test

pytestmark = pytest.mark.adb

CASES = [
    ("loadSettingsFromDisk()", "CONFIRMED", "DiskRead"),
    ("saveDraftSync(\"hello\")", "CONFIRMED", "DiskWrite"),
    ("fetchGreetingBlocking()", "CONFIRMED", "Network"),
    ("computeLayoutHash()", "CONFIRMED", None),
    ("decodeThumbnail()", "PARTIAL", None),
    ("formatTitle(\"inbox\", 3)", "REFUTED", None),
    ("loadAvatarAsync()", "REFUTED", None),
]


@pytest.mark.parametrize(("call", "status", "violation"), CASES, ids=[c[0] for c in CASES])
async def test_demo_method_verdict(
    executor: SandboxExecutor, call: str, status: str, violation: str | None
) -> None:
    [result] = await executor.execute(ExecuteRequest(test_code=llm_style_test(call)))
    assert result.verification_status == status, result.summary
    assert result.toolchain == "simulated"
    assert [t["status"] for t in result.tests] == ["passed", "passed"]
    if violation is not None:
        assert result.has_violations
        assert result.summary.startswith(f"StrictMode violations: {violation} | Blocking time:")
        assert any(violation in line for line in result.strict_mode_violations)
    else:
        assert not result.has_violations
        assert result.summary.startswith("StrictMode violations: none | Blocking time: ")
    if status == "CONFIRMED" and violation is None:
        assert result.blocking_time_ms > 300  # CONFIRMED by blocking time alone
    elif status == "PARTIAL":
        assert 16 < result.blocking_time_ms <= 300
    elif status == "REFUTED":
        assert result.blocking_time_ms <= 16


async def test_result_fields_steps_and_cleanup(
    executor: SandboxExecutor, gateway: LocalGateway, store: Store, sim: ConnectedSim
) -> None:
    [result] = await executor.execute(
        ExecuteRequest(test_code=llm_style_test("loadSettingsFromDisk()"))
    )
    base = {"strict_mode_violations", "has_violations", "blocking_time_ms", "systrace", "summary"}
    ours = {"verification_status", "reason_code", "run_id", "device", "toolchain",
            "compile_rounds", "tests", "anrs", "crashes", "issues", "timings"}
    assert base | ours <= set(result.to_json())
    assert result.summary == f"StrictMode violations: DiskRead | Blocking time: {result.blocking_time_ms}ms"
    assert 0 < len(result.systrace) <= 2000
    assert result.device["serial"] == sim.address
    assert result.compile_rounds == [
        {"round": 1, "ok": True, "errors": [], "fixer": None, "diff": ""}
    ]
    assert {"compile_ms", "install_ms", "run_ms", "logcat_ms", "total_ms"} <= set(result.timings)
    # The flow, in order, and the cleanup: pm clear of the app, then both packages removed.
    assert gateway.methods_called() == [
        "workspace.compile", "device.logcat.clear", "device.install", "device.install",
        "device.instrument", "device.logcat.dump", "device.shell", "device.uninstall",
        "device.uninstall",
    ]
    packages = sim.adb.shell("pm list packages")
    assert "com.droidwire.demo" not in packages
    async with store.session() as session:
        run = (await session.execute(select(Run).where(Run.id == result.run_id))).scalar_one()
        steps = (await session.execute(
            select(RunStep).where(RunStep.run_id == run.id).order_by(RunStep.seq)
        )).scalars().all()
    assert run.status == "finished" and run.verdict == "CONFIRMED"
    assert run.result is not None and run.result["blocking_time_ms"] == result.blocking_time_ms
    rpc = [(s.detail["method"], s.status) for s in steps if s.kind == "rpc"]
    assert rpc == [(m, "ok") for m in gateway.methods_called()]
    assert [s.seq for s in steps] == list(range(len(steps)))


async def test_concurrent_runs_on_one_device_take_turns(
    executor: SandboxExecutor, gateway: LocalGateway
) -> None:
    import asyncio

    disk, fast = await asyncio.gather(
        executor.execute(ExecuteRequest(test_code=llm_style_test("loadSettingsFromDisk()"))),
        executor.execute(ExecuteRequest(test_code=llm_style_test("loadAvatarAsync()"))),
    )
    assert disk[0].verification_status == "CONFIRMED"
    assert fast[0].verification_status == "REFUTED"
    # One run's install → instrument → uninstall never interleaves with the other's.
    device_calls = [m for m in gateway.methods_called() if m.startswith("device.")]
    per_run = ["device.logcat.clear", "device.install", "device.install", "device.instrument",
               "device.logcat.dump", "device.shell", "device.uninstall", "device.uninstall"]
    assert device_calls == per_run * 2
