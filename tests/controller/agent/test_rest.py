"""The agent toolkit over REST, end to end: httpx → the real controller (uvicorn, hub, auth,
store) → a bridge session over a real WebSocket whose handler is the bridge's dispatcher →
the real adb server → the simulated demo app."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from controller.agent import RulePlanner
from device_bridge.agent.frames import MARK_COLOR
from device_bridge.rpc import Dispatcher
from protocol.envelope import DeviceInfo
from tests.adb_support import ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.agent.support import shell_log, toast_shown
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import (
    FakeBridge,
    InLoopController,
    fast_settings,
    in_loop_controller,
)

pytestmark = pytest.mark.adb


@pytest.fixture
async def controller(
    tmp_path: Path, bridge: Dispatcher, sim: ConnectedSim
) -> AsyncIterator[InLoopController]:
    # Actions wait for settled frames: a generous RPC deadline for slow machines.
    async with in_loop_controller(tmp_path, fast_settings(rpc_timeout_s=60 * TIME_SCALE)) as ctl:
        ctl.app.state.agent_planner = RulePlanner()  # no LLM in the environment, whatever it says
        token = await ctl.bridge_token("desk")
        link = FakeBridge(ctl.url, token, handler=bridge,
                          devices=[DeviceInfo(serial=sim.address, state="device", sdk=34)])
        await link.connect()
        try:
            yield ctl
        finally:
            await link.close()


def path(sim: ConnectedSim, tail: str) -> str:
    return f"/v1/devices/{sim.address}/{tail}"


async def test_state_ui_and_marks(controller: InLoopController, sim: ConnectedSim) -> None:
    http = controller.http
    state = (await http.get(path(sim, "state"))).json()
    assert {"package", "activity", "recent_activities", "keyboard", "screen", "text"} <= set(state)
    assert state["package"] == "com.droidwire.demo"
    assert state["activity"] == "com.droidwire.demo.MainActivity"
    assert state["screen"] == {"width": 1080, "height": 2400} and state["keyboard"] is False
    assert state["text"].startswith("[Device State] App: com.droidwire.demo Page: MainActivity")

    ui = (await http.get(path(sim, "ui"))).json()
    button = next(e for e in ui["elements"] if e["text"] == "Settings")
    assert {"index", "class", "text", "desc", "resource_id", "bounds", "clickable"} <= set(button)
    assert button["class"] == "android.widget.Button" and button["clickable"] is True
    left, top, right, bottom = button["bounds"]

    shot = await http.get(path(sim, "screenshot"), params={"marks": 1})
    assert shot.status_code == 200 and shot.headers["content-type"] == "image/png"
    img = Image.open(io.BytesIO(shot.content)).convert("RGB")
    assert img.getpixel(((left + right) // 2, (top + bottom) // 2)) == MARK_COLOR

    # Each tool call left a trace with its step.
    run = (await http.get(f"/v1/runs/{state['trace_id']}")).json()
    assert run["request"]["kind"] == "agent" and run["request"]["tool"] == "state"
    assert [s["kind"] for s in run["steps"]] == ["tool"]


async def test_actions_return_two_frame_evidence(
    controller: InLoopController, sim: ConnectedSim
) -> None:
    http = controller.http
    ui = (await http.get(path(sim, "ui"))).json()
    settings = next(e for e in ui["elements"] if e["text"] == "Settings")
    tapped = (await http.post(path(sim, "actions"),
                              json={"action": "tap", "index": settings["index"]})).json()
    assert tapped["ok"] is True and tapped["state"]["activity_short"] == "SettingsActivity"
    assert "settled_png" not in tapped and tapped["at_action_png"]

    saved = await http.post(path(sim, "actions"),
                            json={"action": "tap", "text": "Save", "settled": True})
    body = saved.json()
    assert saved.status_code == 200, body
    at, settled = base64.b64decode(body["at_action_png"]), base64.b64decode(body["settled_png"])
    assert toast_shown(at) and not toast_shown(settled)
    assert base64.b64decode(body["composite_png"]).startswith(b"\x89PNG")
    run = (await http.get(f"/v1/runs/{body['trace_id']}")).json()
    frame = run["steps"][0]["detail"]["frames"]["at_action"]
    got = await http.get(frame)
    assert got.status_code == 200 and got.content == at

    key = (await http.post(path(sim, "actions"), json={"action": "key", "key": "BACK"})).json()
    assert key["state"]["recent_activities"][-2:] == [
        "com.droidwire.demo.SettingsActivity", "com.droidwire.demo.MainActivity"]


async def test_refusals_are_403_with_the_rule_and_logged(
    controller: InLoopController, sim: ConnectedSim
) -> None:
    http = controller.http
    before = len(shell_log(sim))
    out = await http.post(path(sim, "actions"), json={"action": "tap", "x": 4000, "y": 5})
    assert out.status_code == 403
    assert out.json()["error"]["rule"] == "outside_screen"
    out = await http.post(path(sim, "actions"), json={"action": "start", "package": "com.x.y"})
    assert out.status_code == 403 and out.json()["error"]["rule"] == "package_scope"
    assert not any(line.startswith(("input", "am ")) for line in shell_log(sim)[before:])
    bad = await http.post(path(sim, "actions"), json={"action": "tap"})
    assert bad.status_code == 400
    runs = (await http.get("/v1/runs")).json()["runs"]
    refused = [r for r in runs if (r.get("summary") or "").startswith("ui.tap:")]
    assert refused, runs
    detail = (await http.get(f"/v1/runs/{refused[-1]['id']}")).json()
    assert detail["steps"][0]["status"] == "refused"
    assert detail["steps"][0]["detail"]["rule"] == "outside_screen"


async def test_act_runs_an_instruction_with_a_trace(
    controller: InLoopController, sim: ConnectedSim
) -> None:
    http = controller.http
    out = await http.post(path(sim, "act"),
                          json={"instruction": "open Settings and turn on dark mode"})
    body: dict[str, Any] = out.json()
    assert out.status_code == 200 and body["ok"] is True, body
    assert body["trace_id"] and [s["kind"] for s in body["steps"]][:3] == [
        "observe", "plan", "check"]
    assert sim.call(lambda: sim.device.app_ui.dark) is True
    run = (await http.get(f"/v1/runs/{body['trace_id']}")).json()
    assert run["status"] == "finished" and run["result"]["ok"] is True
    assert run["request"]["instruction"] == "open Settings and turn on dark mode"

    refused = (await http.post(path(sim, "act"), json={"instruction": "make me a coffee"})).json()
    assert refused["ok"] is False and "no rule covers" in refused["message"]


async def test_other_users_cannot_use_the_device(
    controller: InLoopController, sim: ConnectedSim
) -> None:
    made = await controller.http.post("/v1/tokens", json={"kind": "user", "name": "mallory"})
    token = made.json()["token"]
    async with httpx.AsyncClient(base_url=controller.url, headers=bearer(token)) as other:
        for method, tail, body in (("GET", "state", None), ("GET", "ui", None),
                                   ("POST", "act", {"instruction": "go home"})):
            response = await other.request(method, path(sim, tail), json=body)
            assert response.status_code in (403, 404), response.text
    assert ADMIN_TOKEN not in made.text


async def test_the_real_bridge_serves_the_toolkit(
    tmp_path: Path, adb_server: Any, adb: Any, sim: ConnectedSim
) -> None:
    """``droidwire bridge``'s own Bridge (not a test double) advertises and serves the toolkit."""
    import asyncio

    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig

    wait_s = 30 * TIME_SCALE
    async with in_loop_controller(tmp_path, fast_settings(rpc_timeout_s=60 * TIME_SCALE)) as ctl:
        token = await ctl.bridge_token("real")
        host = HostConfig.from_mapping({
            "controller": {"url": [ctl.ws_url]},
            "adb": {"server_port": adb_server.port, "start_server": False},
        })
        async with Bridge(host, token=token, devices=adb) as real:
            await real.wait_open(wait_s)
            assert {"device.state", "ui.dump", "ui.tap", "agent.check"} <= set(
                real.dispatcher.methods())

            def ready() -> bool:
                return any(serial == sim.address and info.state == "device"
                           for entry in ctl.hub.entries()
                           for serial, info in entry.live_devices().items())

            async with asyncio.timeout(wait_s):
                while not ready():  # noqa: ASYNC110 - the hub's registry has no event to wait on
                    await asyncio.sleep(0.01)
            state = await ctl.http.get(path(sim, "state"))
            assert state.status_code == 200, state.text
            assert state.json()["text"].startswith("[Device State] App: ")
            home = await ctl.http.post(path(sim, "actions"), json={"action": "key", "key": "HOME"})
            assert home.status_code == 200 and home.json()["ok"] is True, home.text
            assert sim.call(lambda: sim.device.focus) == sim.call(lambda: sim.device.launcher)
