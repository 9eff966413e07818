"""The live screen's API without a browser (issue 17, docs/screen.md): an admin who does not
hold the device watches read-only; the newest picture is served without a new screencap; a
stranger is refused before the socket opens; ``droidwire device view`` names the page."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from controller.services import services_of
from tests.controller.conftest import bearer
from tests.controller.web.conftest import WAIT_S, Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package")]


def _ws(stack: Stack, codec: str = "jpeg") -> str:
    return (f"{stack.url.replace('http://', 'ws://')}/v1/devices/{stack.device_id}"
            f"/screen/stream?codec={codec}")


def _header(message: bytes) -> tuple[dict[str, Any], bytes]:
    size = int.from_bytes(message[:4], "big")
    return json.loads(message[4:4 + size]), message[4 + size:]


async def test_an_admin_watches_read_only_and_gets_the_live_picture(stack: Stack) -> None:
    admin = {"Authorization": stack.controller.http.headers["Authorization"]}
    inputs = stack.sim.sim.call(lambda: len(stack.sim.device.input_log))
    async with httpx.AsyncClient(base_url=stack.url, headers=admin, timeout=WAIT_S) as api:
        idle = await api.get(f"/v1/devices/{stack.device_id}/screen/latest")
        assert idle.status_code == 409, idle.text
        assert idle.json()["error"]["code"] == "conflict"
        async with connect(_ws(stack), additional_headers=admin, open_timeout=WAIT_S,
                           max_size=None) as ws:
            async with asyncio.timeout(WAIT_S):
                hello = json.loads(await ws.recv())
                assert hello == {"type": "hello", "codec": "jpeg", "source": "screencap",
                                 "control": False}
                message = await ws.recv()
                assert isinstance(message, bytes)
                header, picture = _header(message)
                assert picture.startswith(b"\xff\xd8") and max(header["w"], header["h"]) <= 720
                await ws.send(json.dumps({"id": 7, "action": "tap", "x": 0.5, "y": 0.5}))
                while True:
                    reply = await ws.recv()
                    if isinstance(reply, str):
                        break
            answer = json.loads(reply)
            assert answer["id"] == 7 and answer["ok"] is False
            assert answer["error"].startswith("forbidden: read-only")
            latest = await api.get(f"/v1/devices/{stack.device_id}/screen/latest")
            assert latest.status_code == 200, latest.text
            assert latest.headers["content-type"] == "image/jpeg"
            assert latest.content.startswith(b"\xff\xd8")
    # Nothing reached the phone, and the view is in the audit log, the refused input is not
    # a device call at all.
    assert stack.sim.sim.call(lambda: len(stack.sim.device.input_log)) == inputs
    entries = await services_of(stack.controller.app).audit.recent(limit=500)
    assert any(e.action == "device.screen.view" and e.outcome == "ok" for e in entries)


async def test_a_stranger_is_refused_before_the_socket_opens(stack: Stack) -> None:
    subscribes = stack.controller.hub.screens.subscribes
    with pytest.raises(InvalidStatus) as refused:
        async with connect(_ws(stack), additional_headers=bearer(stack.tokens["sam"]),
                           open_timeout=WAIT_S):
            pass
    assert refused.value.response.status_code == 404
    assert stack.controller.hub.screens.subscribes == subscribes  # nothing started for him


async def test_device_view_prints_the_page(stack: Stack) -> None:
    from typer.testing import CliRunner

    from droidwire import app as cli

    env = {"DROIDWIRE_CONTROLLER": stack.url, "DROIDWIRE_TOKEN": stack.tokens["olivia"]}
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "view", stack.serial, "--no-browser", "--json"],
        env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"url": f"{stack.url}/devices/{stack.device_id}",
                                         "opened": False}
    missing = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "view", "nope:1", "--no-browser"], env=env)
    assert missing.exit_code != 0


@pytest.mark.parametrize("codec", ["jpeg", "h264"])
async def test_the_owners_pause_switch_ends_a_live_screen(stack: Stack, codec: str) -> None:
    olivia = bearer(stack.tokens["olivia"])
    async with connect(_ws(stack, codec), additional_headers=olivia, open_timeout=WAIT_S,
                       max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        stack.bridge.policy.pause()
        try:
            async with asyncio.timeout(WAIT_S):
                while isinstance(message := await ws.recv(), bytes):
                    pass
        finally:
            stack.bridge.policy.resume()
    assert json.loads(message) == {"type": "eof", "reason": "paused"}
