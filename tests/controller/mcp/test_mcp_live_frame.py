"""``live_frame``: the newest frame of a device's live screen, without a new screencap
(issue 17, docs/screen.md) — refused while nobody watches, a picture while someone does."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import mcp_types as types
from PIL import Image
from websockets.asyncio.client import connect

from controller.services import services_of
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.mcp.conftest import WAIT_S, Rig


async def test_live_frame_needs_a_viewer_and_starts_no_screencap(rig: Rig) -> None:
    async with rig.session() as session:
        idle = await session.call_tool("live_frame", {"device": rig.device_id})
        assert idle.is_error
        assert json.loads(idle.content[0].text)["error"]["code"] == "conflict"

        url = (f"{rig.controller.url.replace('http://', 'ws://')}/v1/devices/"
               f"{rig.device_id}/screen/stream?codec=h264")
        async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S,
                           max_size=None) as ws:
            async with asyncio.timeout(WAIT_S):
                hello = json.loads(await ws.recv())
                assert hello["type"] == "hello" and hello["control"] is True
                while not isinstance(await ws.recv(), bytes):
                    pass
            shot = await session.call_tool("live_frame", {"device": rig.device_id})
            assert not shot.is_error, shot.content
            [image, meta] = shot.content
            assert isinstance(image, types.ImageContent) and image.mime_type == "image/jpeg"
            with Image.open(io.BytesIO(base64.b64decode(image.data))) as picture:
                size = picture.size
            data = json.loads(meta.text)
            assert size == (data["width"], data["height"]) and max(size) <= 720
    # Decoded from the stream the viewer already had: no screenshot was taken for it.
    actions = [e.action for e in await services_of(rig.controller.app).audit.recent(limit=500)]
    assert "mcp.live_frame" in actions and "device.screen.view" in actions
    assert "device.screenshot" not in actions and "ui.screenshot" not in actions
