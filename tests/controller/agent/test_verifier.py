"""The agent loop closed (issue 19): a scripted local model (tests/llm_server.py, the real
openai client) plans, claims done too early, is corrected by the verifier — a model call of
its own (its own prompt, temperature ≤ 0.1, a JSON verdict with the gap it sees) — and then
finishes; remember/recall, request_screenshot, the page rules and the overlay warning in the
planner prompt, the rule planner as the fallback for a bad reply, and "unverified" without a
verifier model. Through the bridge's dispatcher, the real adb server and the demo app."""

from __future__ import annotations

import json

import pytest

from controller.agent import AgentRunner, LlmPlanner, TraceStore, Verifier
from controller.agent.prompts import OVERLAY_WARNING
from device_bridge.rpc import Dispatcher
from tests.adb_support import ConnectedSim
from tests.controller.agent.test_nl2sh import caller, llm
from tests.llm_server import LlmServer, RecordedRequest

pytestmark = pytest.mark.adb

EARLY = {"steps": [
    {"action": "tap", "target": "Settings", "expect": {"activity": "SettingsActivity"}},
    {"action": "remember", "target": "the Dark mode switch is on SettingsActivity"},
    {"action": "mark_done", "target": "dark mode is on"},
]}
FINISH = {"steps": [
    {"action": "tap", "target": "Dark mode", "state": "on", "expect": {"checked": "Dark mode"}},
    {"action": "mark_done", "target": "Dark mode switched on"},
]}
REJECT = {"done": False, "gap": "the Dark mode switch is still off",
          "evidence": "SettingsActivity, switch unchecked"}
ACCEPT = {"done": True, "gap": "", "evidence": "Dark mode is checked"}


def _system(request: RecordedRequest) -> str:
    return str(request.json["messages"][0]["content"])


def _user_text(request: RecordedRequest) -> str:
    content = request.json["messages"][1]["content"]
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content)


def _images(request: RecordedRequest) -> list[str]:
    content = request.json["messages"][1]["content"]
    if not isinstance(content, list):
        return []
    return [part["image_url"]["url"] for part in content if part.get("type") == "image_url"]


async def test_a_claim_of_done_too_early_is_corrected_by_the_verifier(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    script = [json.dumps(EARLY), json.dumps(REJECT), json.dumps(FINISH), json.dumps(ACCEPT)]
    with LlmServer(script) as server, llm(server) as client:
        trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
        out = await AgentRunner(LlmPlanner(client), verifier=Verifier(client)).act(
            caller(bridge, sim), "turn on dark mode", trace)
        requests = server.completions
    assert out["ok"] is True, out
    assert out["rounds"] == 2 and out["verdict"]["status"] == "accepted"
    assert sim.call(lambda: sim.device.app_ui.dark) is True
    planner_calls = [r for r in requests if "You are the verifier" not in _system(r)]
    verifier_calls = [r for r in requests if "You are the verifier" in _system(r)]
    assert len(planner_calls) == 2 and len(verifier_calls) == 2
    # The verifier: its own prompt, near-deterministic, the goal, the claim and the evidence.
    for call in verifier_calls:
        assert call.json["temperature"] <= 0.1
        assert "Goal: turn on dark mode" in _user_text(call)
        assert "[Device State]" in _user_text(call) and OVERLAY_WARNING in _system(call)
        [image] = _images(call)  # the at-action + settled composite of the last action
        assert image.startswith("data:image/png;base64,")
    assert "The agent says it is done: dark mode is on" in _user_text(verifier_calls[0])
    # Every planner prompt: the page rules and the overlay warning; the second one also the
    # rejection with its gap, and what the agent remembered.
    for call in planner_calls:
        assert "Page awareness" in _system(call) and OVERLAY_WARNING in _system(call)
    second = _user_text(planner_calls[1])
    assert "the verifier rejected it" in second and "Dark mode switch is still off" in second
    assert "the Dark mode switch is on SettingsActivity" in second
    # The trace: both verdicts, each with its frames.
    verdicts = [s for s in out["steps"] if s["kind"] == "verify"]
    assert [v["status"] for v in verdicts] == ["rejected", "accepted"]
    assert verdicts[0]["gap"] == "the Dark mode switch is still off"
    for verdict in verdicts:
        assert {"at_action", "settled", "composite"} <= set(verdict["frames"])
    composite = verdicts[0]["frames"]["composite"].rsplit("/", 1)[1]
    kept = await trace.frames.get(trace.id, composite)
    assert kept is not None and kept.png.startswith(b"\x89PNG")
    assert [s["fact"] for s in out["steps"] if s["kind"] == "remember"] == [
        "the Dark mode switch is on SettingsActivity"]


async def test_without_a_verifier_model_done_is_unverified_not_approved(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    with LlmServer([json.dumps(EARLY)]) as server, llm(server) as client:
        out = await AgentRunner(LlmPlanner(client)).act(
            caller(bridge, sim), "turn on dark mode",
            await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
        assert len(server.completions) == 1  # nothing asked a model to approve it
    assert out["ok"] is False and out["reason"] == "unverified", out
    assert "no verifier model" in out["message"]
    [verdict] = [s for s in out["steps"] if s["kind"] == "verify"]
    assert verdict["status"] == "unverified"


async def test_request_screenshot_shows_the_next_plan_the_screen(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    look = {"steps": [{"action": "request_screenshot", "marks": True}]}
    done = {"steps": [{"action": "mark_done", "target": "the main page is shown"}]}
    script = [json.dumps(look), json.dumps(done), json.dumps(ACCEPT)]
    with LlmServer(script) as server, llm(server) as client:
        out = await AgentRunner(LlmPlanner(client), verifier=Verifier(client)).act(
            caller(bridge, sim), "show me the main page",
            await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
        second = server.completions[1]
    assert out["ok"] is True, out
    [image] = _images(second)
    assert image.startswith("data:image/png;base64,")
    assert "You asked to see the screen" in _user_text(second)
    [shot] = [s for s in out["steps"] if s["kind"] == "screenshot"]
    assert shot["marks"] is True and "screenshot" in shot["frames"]


@pytest.mark.parametrize("reply", ["I would press back.", json.dumps({"steps": [{"fly": 1}]})],
                         ids=["prose", "invalid-step"])
async def test_a_bad_model_reply_falls_back_to_the_rule_planner(
    bridge: Dispatcher, sim: ConnectedSim, reply: str, caplog: pytest.LogCaptureFixture
) -> None:
    await bridge("ui.tap", {"serial": sim.address, "text": "Settings"})
    with LlmServer([reply]) as server, llm(server) as client:
        out = await AgentRunner(LlmPlanner(client)).act(
            caller(bridge, sim), "go back",
            await TraceStore(None).open(user_id=None, device=sim.address, tool="act"))
    assert out["ok"] is True, out
    plans = [(s["status"], s.get("source")) for s in out["steps"] if s["kind"] == "plan"]
    assert plans == [("fallback", None), ("ok", "rules")]
    [fallback] = [s for s in out["steps"] if s["status"] == "fallback"]
    assert fallback["reason"] == "invalid_plan" and fallback["planner"] == "rules"
    assert any("falling back to the rule planner" in r.getMessage() for r in caplog.records)
    assert sim.call(lambda: sim.device.focus).endswith(".MainActivity")


def test_a_verdict_reply_that_is_not_json_is_unverified() -> None:
    from controller.agent.verifier import parse_verdict

    assert parse_verdict("looks good to me").status == "unverified"
    assert parse_verdict('{"done": "yes"}').status == "unverified"
    rejected = parse_verdict('Sure: {"done": false, "gap": "no toast"}')
    assert (rejected.status, rejected.gap) == ("rejected", "no toast")
    assert parse_verdict('{"done": true}').accepted


