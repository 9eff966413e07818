"""``mark_done`` for an agent that drives the device itself (REST ``POST .../done``, MCP
``mark_done``): the verifier judges the last action's frames, the state and the goal; a
rejection names the gap; the verdict and its frames are in the trace."""

from __future__ import annotations

import json

import pytest

from controller.agent import Verifier
from fixer.llm import LlmClient, LlmSettings
from tests.adb_support import ConnectedSim
from tests.controller.agent.test_rest import controller, path  # noqa: F401 - the fixture
from tests.controller.test_hub_support import InLoopController
from tests.llm_server import LlmServer

pytestmark = pytest.mark.adb


async def test_done_is_judged_on_the_last_actions_frames(
    controller: InLoopController, sim: ConnectedSim  # noqa: F811
) -> None:
    http = controller.http
    reject = {"done": False, "gap": "Dark mode is still off"}
    accept = {"done": True, "evidence": "Dark mode checked"}
    with LlmServer([json.dumps(reject), json.dumps(accept)]) as server, LlmClient(
        LlmSettings(model="gpt-test", base_url=server.base_url, api_key="k", max_attempts=1,
                    timeout_s=10)) as client:
        controller.app.state.agent_verifier = Verifier(client)
        goal = {"goal": "turn on dark mode", "summary": "opened the settings"}
        tapped = await http.post(path(sim, "actions"), json={"action": "tap", "text": "Settings",
                                                              "settled": True})
        assert tapped.status_code == 200, tapped.text
        early = (await http.post(path(sim, "done"), json=goal)).json()
        assert early["ok"] is False and early["verdict"] == {
            "status": "rejected", "gap": "Dark mode is still off"}
        await http.post(path(sim, "actions"), json={"action": "tap", "text": "Dark mode",
                                                     "settled": True})
        done = (await http.post(path(sim, "done"), json=goal)).json()
        first = server.completions[0].json
    assert done["ok"] is True and done["verdict"]["status"] == "accepted", done
    assert first["temperature"] <= 0.1
    [text, image] = first["messages"][1]["content"]
    assert "Goal: turn on dark mode" in text["text"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    trace = (await http.get(f"/v1/runs/{early['trace_id']}")).json()
    [verify] = [s for s in trace["steps"] if s["kind"] == "verify"]
    frames = verify["detail"]["frames"]
    assert verify["status"] == "rejected" and {"at_action", "settled", "composite"} <= set(frames)
    frame = await http.get(frames["composite"])
    assert frame.status_code == 200 and frame.content.startswith(b"\x89PNG")
