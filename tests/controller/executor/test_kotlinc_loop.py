"""The fix loop on a real compiler's diagnostics: the build bridge checks every round with the
warm kotlinc (the session's one, tests/conftest.py) in front of the simulated toolchain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.executor import ExecuteRequest, SandboxExecutor
from controller.store import Store
from device_bridge.adb import AdbDevices
from device_bridge.build import BuildService
from device_bridge.kotlinc import KotlincChecker
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace import ProjectRegistry, WorkspaceManager
from tests.adb_support import ConnectedSim
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.controller.executor.test_fix_loop import fenced, llm_client
from tests.llm_server import LlmServer

pytestmark = pytest.mark.adb


@pytest.fixture
def llm_server() -> Iterator[LlmServer]:
    with LlmServer() as server:
        yield server


@pytest.fixture
def gateway(adb: AdbDevices, sim: ConnectedSim, state_dir: Path,
            kotlinc_checker: KotlincChecker) -> LocalGateway:
    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=state_dir / "kotlinc")
    build = BuildService(manager, prefer="kotlinc", simulated=SimulatedToolchain(),
                         checker=kotlinc_checker)
    gw = LocalGateway()
    gw.add_bridge("desk", Dispatcher(policy=Policy(PolicyConfig()), devices=adb, build=build),
                  [sim.address])
    return gw


TYPE_ERROR = "val saved: String = activity.saveDraftSync(\"hello\")"


async def test_a_type_error_is_fixed_in_a_round_driven_by_kotlinc(
    gateway: LocalGateway, store: Store, llm_server: LlmServer
) -> None:
    good = llm_style_test("saveDraftSync(\"hello\")")
    draft = good.replace("activity.saveDraftSync(\"hello\")", TYPE_ERROR)
    assert draft != good
    llm_server.enqueue(fenced(good))
    executor = SandboxExecutor(gateway, store, settings=SETTINGS, llm=llm_client(llm_server))
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.verification_status == "CONFIRMED", result.summary
    assert result.toolchain == "kotlinc"
    first, second = result.compile_rounds
    assert not first["ok"] and second["ok"] and second["fixer"] == "llm"
    # K2 reports the initializer and the inferred type, both at the call
    assert [e["kind"] for e in first["errors"]] == ["type_mismatch", "type_mismatch"]
    assert all("'kotlin.Boolean'" in e["message"] and "'kotlin.String'" in e["message"]
               for e in first["errors"])
    assert first["check"]["compiler"] == "kotlinc 2.0.21" and first["check"]["api_level"] == 34
    # The LLM saw the real compiler's words.
    prompt = llm_server.completions[0].json["messages"][-1]["content"]
    assert "Initializer type mismatch" in prompt


async def test_code_kotlinc_rejects_never_runs(gateway: LocalGateway, store: Store) -> None:
    draft = llm_style_test("saveDraftSync(\"hello\")").replace(
        "activity.saveDraftSync(\"hello\")", TYPE_ERROR
    )
    executor = SandboxExecutor(gateway, store, settings=SETTINGS)  # no LLM: no fix for it
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.verification_status == "PENDING"
    assert result.reason_code == "compile_failed"
    assert result.toolchain == "kotlinc"
    assert "Initializer type mismatch" in result.compile_output
    assert not any(m.startswith("device.") for m in gateway.methods_called())
    # the simulated toolchain alone would have run it: it does not infer types
    sim = SimulatedToolchain().compile(ProjectRegistry.from_config().get(None).path, draft)
    assert sim.ok


async def test_a_missing_import_is_fixed_by_the_rules_from_kotlincs_message(
    gateway: LocalGateway, store: Store
) -> None:
    draft = llm_style_test("loadSettingsFromDisk()").replace("import android.util.Log\n", "")
    executor = SandboxExecutor(gateway, store, settings=SETTINGS)
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.verification_status == "CONFIRMED", result.summary
    rounds = result.compile_rounds
    assert [(r["ok"], r["fixer"]) for r in rounds] == [(False, None), (True, "rules")]
    assert {e["symbol"] for e in rounds[0]["errors"]} == {"Log"}
    assert all(e["message"] == "Unresolved reference 'Log'." for e in rounds[0]["errors"])
