"""The agent toolkit's MCP tools, end to end: the MCP SDK's client → /mcp on the real
controller → a bridge session (the bridge's dispatcher) → the real adb server → the demo app."""

from __future__ import annotations

import base64
import contextlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from controller.agent import RulePlanner
from device_bridge.agent.frames import MARK_COLOR
from device_bridge.rpc import Dispatcher
from protocol.envelope import DeviceInfo
from tests.adb_support import ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import (
    FakeBridge,
    InLoopController,
    fast_settings,
    in_loop_controller,
)

pytestmark = pytest.mark.adb

WAIT_S = 30.0 * TIME_SCALE


@pytest.fixture
async def controller(
    tmp_path: Path, bridge: Dispatcher, sim: ConnectedSim
) -> AsyncIterator[InLoopController]:
    # Actions wait for settled frames: a generous RPC deadline for slow machines.
    async with in_loop_controller(tmp_path, fast_settings(rpc_timeout_s=60 * TIME_SCALE)) as ctl:
        ctl.app.state.agent_planner = RulePlanner()
        link = FakeBridge(ctl.url, await ctl.bridge_token("desk"), handler=bridge,
                          devices=[DeviceInfo(serial=sim.address, state="device", sdk=34)])
        await link.connect()
        try:
            yield ctl
        finally:
            await link.close()


@contextlib.asynccontextmanager
async def session(ctl: InLoopController) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=bearer(ADMIN_TOKEN),
                           timeout=httpx2.Timeout(WAIT_S, read=4 * WAIT_S)) as http,
        streamable_http_client(f"{ctl.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        yield s


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    [block] = [c for c in result.content if isinstance(c, types.TextContent)]
    out: dict[str, Any] = json.loads(block.text)
    return out


def image(result: types.CallToolResult) -> Image.Image:
    [block] = [c for c in result.content if isinstance(c, types.ImageContent)]
    return Image.open(io.BytesIO(base64.b64decode(block.data))).convert("RGB")


async def test_an_agent_looks_acts_and_verifies_over_mcp(
    controller: InLoopController, sim: ConnectedSim
) -> None:
    device = sim.address
    async with session(controller) as s:
        state = data(await s.call_tool("device_state", {"device": device}))
        assert state["activity_short"] == "MainActivity" and "[Device State]" in state["text"]
        ui = data(await s.call_tool("ui_elements", {"device": device}))
        button = next(e for e in ui["elements"] if e["text"] == "Settings")
        marked = image(await s.call_tool("marked_screenshot", {"device": device}))
        left, top, right, bottom = button["bounds"]
        assert marked.getpixel(((left + right) // 2, (top + bottom) // 2)) == MARK_COLOR

        tapped = await s.call_tool("device_action",
                                   {"device": device, "action": "tap", "index": button["index"]})
        assert data(tapped)["state"]["activity_short"] == "SettingsActivity"
        saved = await s.call_tool("device_action", {"device": device, "action": "tap",
                                                    "text": "Save", "settled": True})
        body = data(saved)
        assert body["ok"] is True and "at_action_png" not in body
        side_by_side = image(saved)  # the composite: at action left, settled right, half size
        half = (side_by_side.width - 1080 // 2) - 1  # where the right panel starts, less one
        assert side_by_side.width > 1080 and half >= 1080 // 2
        band = side_by_side.height - 2400 // 2
        toast = (1080 // 4, band + (2400 // 40) * 65 // 4)  # the toast box's middle, scaled
        assert side_by_side.getpixel(toast) == (50, 50, 50)
        assert side_by_side.getpixel((toast[0] + half + 1, toast[1])) != (50, 50, 50)

        refused = await s.call_tool("device_action",
                                    {"device": device, "action": "tap", "x": 9999, "y": 1})
        assert refused.is_error
        assert data_error(refused)["rule"] == "outside_screen"

        done = data(await s.call_tool("device_act",
                                      {"device": device, "instruction": "go back"}))
        assert done["ok"] is True and done["trace_id"]
    assert sim.call(lambda: sim.device.focus).endswith(".MainActivity")


def data_error(result: types.CallToolResult) -> dict[str, Any]:
    [block] = [c for c in result.content if isinstance(c, types.TextContent)]
    return dict(json.loads(block.text)["error"])
