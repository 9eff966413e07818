"""nl2sh end to end without HTTP: AgentRunner → the bridge's dispatcher → the real adb server
→ the simulated demo app, with traces in a real SQLite store. Rules only, and a scripted
OpenAI-compatible server (tests/llm_server.py) for the LLM planner."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from controller.agent import AgentRunner, LlmPlanner, RulePlanner, TraceStore
from controller.agent.runner import Caller
from controller.store import Run, RunStep, Store
from device_bridge.rpc import Dispatcher
from fixer.llm import LlmClient, LlmSettings
from protocol.methods import Method
from tests.adb_support import ConnectedSim
from tests.controller.agent.support import shell_log, toast_shown
from tests.llm_server import LlmServer

pytestmark = pytest.mark.adb

SETTINGS = "com.droidwire.demo.SettingsActivity"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'controller.db'}")
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


def caller(bridge: Dispatcher, sim: ConnectedSim) -> Caller:
    async def call(method: Method[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
        return await bridge(method.name, {**params, "serial": sim.address})

    return call


async def stored_steps(store: Store, trace_id: str) -> tuple[Run, list[RunStep]]:
    async with store.session() as session:
        run = (await session.execute(select(Run).where(Run.id == trace_id))).scalar_one()
        steps = (await session.execute(
            select(RunStep).where(RunStep.run_id == trace_id).order_by(RunStep.seq)
        )).scalars().all()
    return run, list(steps)


async def test_rules_open_settings_and_turn_on_dark_mode(
    bridge: Dispatcher, sim: ConnectedSim, store: Store
) -> None:
    traces = TraceStore(store)
    trace = await traces.open(user_id=None, device=sim.address, tool="act",
                              instruction="open Settings and turn on dark mode")
    out = await AgentRunner(RulePlanner()).act(
        caller(bridge, sim), "open Settings and turn on dark mode", trace)
    assert out["ok"] is True, out
    assert out["trace_id"] == trace.id
    commands = [s for s in out["steps"] if s["kind"] == "command"]
    assert [c["command"][:2] for c in commands] == [["input", "tap"], ["input", "tap"]]
    assert all(c["exit_code"] == 0 and c["duration_ms"] >= 0 for c in commands)
    assert all(set(c["frames"]) == {"at_action", "settled", "composite"} for c in commands)
    expect = [s for s in out["steps"] if s["kind"] == "expect"]
    assert expect and expect[-1]["status"] == "ok"  # "Dark mode" is checked afterwards
    assert sim.call(lambda: sim.device.app_ui.dark) is True
    # The frames are kept and linked.
    link = commands[0]["frames"]["at_action"]
    name = link.rsplit("/", 1)[1]
    kept = await traces.frames.get(trace.id, name)
    assert kept is not None and kept.png.startswith(b"\x89PNG")

    run, steps = await stored_steps(store, trace.id)
    assert run.request["kind"] == "agent" and run.request["instruction"].startswith("open")
    assert run.status == "finished" and run.result is not None and run.result["ok"] is True
    assert [s.kind for s in steps][:3] == ["observe", "plan", "check"]
    assert "command" in [s.kind for s in steps]

    # Saying it again changes nothing: the switch is already on.
    await bridge("ui.key", {"serial": sim.address, "key": "BACK"})
    again = await AgentRunner(RulePlanner()).act(
        caller(bridge, sim), "open Settings and turn on dark mode",
        await traces.open(user_id=None, device=sim.address, tool="act"))
    assert again["ok"] is True
    assert [s["status"] for s in again["steps"] if s["kind"] == "command"] == ["ok", "skipped"]


async def test_rules_refuse_what_they_do_not_cover(
    bridge: Dispatcher, sim: ConnectedSim, store: Store
) -> None:
    before = len(shell_log(sim))
    trace = await TraceStore(store).open(user_id=None, device=sim.address, tool="act")
    out = await AgentRunner(RulePlanner()).act(
        caller(bridge, sim), "order a pizza with extra cheese", trace)
    assert out["ok"] is False and out["reason"] == "refused"
    assert "no rule covers 'order a pizza with extra cheese'" in out["message"]
    assert not any(line.startswith(("input", "am ")) for line in shell_log(sim)[before:])
    _, steps = await stored_steps(store, trace.id)
    assert [(s.kind, s.status) for s in steps] == [("observe", "ok"), ("plan", "refused")]


async def test_rules_type_go_back_and_go_home(bridge: Dispatcher, sim: ConnectedSim) -> None:
    trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
    out = await AgentRunner(RulePlanner()).act(
        caller(bridge, sim), "type 'hi there' into the input field, then go back", trace)
    assert out["ok"] is True, out
    assert sim.call(lambda: sim.device.typed_text) == "hi there"
    home = await AgentRunner(RulePlanner()).act(
        caller(bridge, sim), "go home",
        await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
    assert home["ok"] is True
    assert sim.call(lambda: sim.device.focus) == sim.call(lambda: sim.device.launcher)


def llm(server: LlmServer) -> LlmClient:
    return LlmClient(LlmSettings(model="gpt-test", base_url=server.base_url, api_key="k",
                                 temperature=0.7, max_attempts=1, timeout_s=10))


async def test_llm_plan_runs_with_a_trace(bridge: Dispatcher, sim: ConnectedSim) -> None:
    plan = {"steps": [
        {"action": "tap", "target": "Settings", "expect": {"activity": "SettingsActivity"}},
        {"action": "tap", "target": "Save"},
    ], "note": "open settings, save"}
    with LlmServer(["Here is the plan:\n```json\n" + json.dumps(plan) + "\n```"]) as server:
        with llm(server) as client:
            trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
            out = await AgentRunner(LlmPlanner(client)).act(
                caller(bridge, sim), "open settings and save them", trace)
        request = server.completions[0].json
    assert out["ok"] is True, out
    assert request["temperature"] <= 0.1
    prompt = request["messages"][1]["content"]
    assert "[Device State] App: com.droidwire.demo Page: MainActivity" in prompt
    assert "'Settings'" in prompt and "open settings and save them" in prompt
    commands = [s for s in out["steps"] if s["kind"] == "command"]
    assert len(commands) == 2 and commands[1]["settled"] is True
    assert [s["status"] for s in out["steps"] if s["kind"] == "expect"] == ["ok"]
    frames = trace.frames
    at = await frames.get(trace.id, commands[1]["frames"]["at_action"].rsplit("/", 1)[1])
    settled = await frames.get(trace.id, commands[1]["frames"]["settled"].rsplit("/", 1)[1])
    assert at is not None and settled is not None
    assert toast_shown(at.png) and not toast_shown(settled.png)


async def test_llm_failure_gets_one_corrected_plan(bridge: Dispatcher, sim: ConnectedSim) -> None:
    wrong = {"steps": [{"action": "tap", "target": "Preferences"}]}
    fixed = {"steps": [{"action": "tap", "target": "Settings",
                        "expect": {"activity": "SettingsActivity"}}]}
    with LlmServer([json.dumps(wrong), json.dumps(fixed)]) as server:
        with llm(server) as client:
            trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
            out = await AgentRunner(LlmPlanner(client)).act(
                caller(bridge, sim), "open the preferences", trace)
        second = server.completions[1].json["messages"][1]["content"]
    assert out["ok"] is True and out["rounds"] == 2, out
    assert "The previous plan failed" in second and "Preferences" in second
    assert "Logcat issues:" in second and "[Device State]" in second
    kinds = [(s["kind"], s["status"]) for s in out["steps"]]
    assert ("command", "failed") in kinds and ("summary", "ok") in kinds
    assert kinds[-1] == ("expect", "ok")

    # A second failure stops: no third plan.
    with LlmServer([json.dumps(wrong), json.dumps(wrong), json.dumps(fixed)]) as server:
        with llm(server) as client:
            out = await AgentRunner(LlmPlanner(client)).act(
                caller(bridge, sim), "open the preferences",
                await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
        assert len(server.completions) == 2
    assert out["ok"] is False and out["reason"] == "failed"


async def test_invalid_llm_plans_are_refused(bridge: Dispatcher, sim: ConnectedSim) -> None:
    for reply in ("I would tap the button.", json.dumps({"steps": [{"action": "fly"}]}),
                  json.dumps({"steps": [{"action": "tap", "target": "x", "sudo": True}]})):
        with LlmServer([reply]) as server, llm(server) as client:
            out = await AgentRunner(LlmPlanner(client)).act(
                caller(bridge, sim), "do it",
                await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
        assert out["ok"] is False and out["reason"] == "invalid_plan", out


async def test_a_forbidden_command_refuses_the_plan_before_anything_is_sent(
    bridge: Dispatcher, sim: ConnectedSim, store: Store
) -> None:
    plan = {"steps": [
        {"action": "tap", "target": "Settings"},
        {"action": "shell", "target": "rm -rf /sdcard/DCIM"},
        {"action": "shell", "argv": ["reboot"]},
    ]}
    before = len(shell_log(sim))
    with LlmServer([json.dumps(plan)]) as server, llm(server) as client:
        trace = await TraceStore(store).open(user_id=None, device=sim.address, tool="act")
        out = await AgentRunner(LlmPlanner(client)).act(
            caller(bridge, sim), "clean up the device", trace)
    assert out["ok"] is False and out["reason"] == "refused"
    assert "nothing was sent" in out["message"]
    sent = shell_log(sim)[before:]
    assert not any(line.startswith(("input", "rm", "reboot")) for line in sent), sent
    assert sim.call(lambda: sim.device.focus).endswith(".MainActivity")
    _, steps = await stored_steps(store, trace.id)
    refused = [s for s in steps if s.kind == "check" and s.status == "refused"]
    assert [s.detail["rule"] for s in refused] == ["path_outside_workspace", "reboot"]
    assert [s.detail["step"] for s in refused] == [1, 2]
    assert not any(s.kind == "command" for s in steps)
