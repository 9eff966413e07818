"""The dashboard's live logcat tail: a same-origin WebSocket authenticated by the session
cookie, through the real bridge to the simulated device."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from controller.web import COOKIE_NAME
from tests.controller.web.conftest import WAIT_S, Stack
from tests.controller.web.support import sign_in

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package")]


async def session_cookie(stack: Stack, user: str) -> str:
    async with stack.client() as browser:
        response = await sign_in(browser, stack.tokens[user])
        assert response.status_code == 303
        return str(browser.cookies[COOKIE_NAME])


def stream_url(stack: Stack, device: str | None = None) -> str:
    ws = stack.url.replace("http://", "ws://")
    return f"{ws}/devices/{device or stack.device_id}/logcat/stream?tail=5"


def open_stream(stack: Stack, headers: dict[str, str], device: str | None = None) -> Any:
    return connect(stream_url(stack, device), additional_headers=headers, open_timeout=WAIT_S)


async def read_until(ws: ClientConnection, marker: str) -> list[str]:
    """Lines received until one holds ``marker`` (bounded by WAIT_S)."""
    seen: list[str] = []
    async with asyncio.timeout(WAIT_S):
        while True:
            chunk = json.loads(await ws.recv())
            seen.extend(chunk.get("lines", []))
            if any(marker in line for line in seen) or chunk.get("eof"):
                return seen


@pytest.mark.parametrize("user", ["olivia", "bob"])
async def test_live_lines_arrive_over_the_cookie_authenticated_stream(
    stack: Stack, user: str
) -> None:
    cookie = await session_cookie(stack, user)
    marker = f"live-{secrets.token_hex(4)}"
    headers = {"Cookie": f"{COOKIE_NAME}={cookie}", "Origin": stack.url}
    async with open_stream(stack, headers) as ws, stack.api(user) as api:
        # The simulated device logs every shell command it runs (tag SimShell).
        shell = await api.post(f"/v1/devices/{stack.device_id}/shell",
                               json={"argv": ["echo", marker]})
        assert shell.status_code == 200, shell.text
        lines = await read_until(ws, marker)
    assert any(marker in line and "SimShell" in line for line in lines)


async def test_the_stream_needs_a_session(stack: Stack) -> None:
    for headers in ({"Origin": stack.url},
                    {"Cookie": f"{COOKIE_NAME}=forged", "Origin": stack.url},
                    {"Authorization": f"Bearer {stack.tokens['olivia']}"}):  # not a cookie
        with pytest.raises(InvalidStatus) as refused:
            async with open_stream(stack, headers):
                pass
        assert refused.value.response.status_code == 401


async def test_the_stream_refuses_other_sites(stack: Stack) -> None:
    cookie = await session_cookie(stack, "olivia")
    with pytest.raises(InvalidStatus) as refused:
        async with open_stream(stack, {"Cookie": f"{COOKIE_NAME}={cookie}",
                                       "Origin": "http://evil.example"}):
            pass
    assert refused.value.response.status_code == 403


async def test_a_stranger_cannot_tail_the_device(stack: Stack) -> None:
    cookie = await session_cookie(stack, "sam")
    with pytest.raises(InvalidStatus) as refused:
        async with open_stream(stack, {"Cookie": f"{COOKIE_NAME}={cookie}",
                                       "Origin": stack.url}):
            pass
    assert refused.value.response.status_code == 404  # as if it did not exist
