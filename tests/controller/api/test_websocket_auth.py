"""The auth dependencies on a WebSocket route refuse the handshake with a real HTTP status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from controller.auth import BridgePrincipal, UserPrincipal
from controller.config import ControllerConfig
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer

TIMEOUT_S = 10 * TIME_SCALE


def _add_echo(app: FastAPI) -> None:
    @app.websocket("/v1/test/whoami")
    async def whoami(websocket: WebSocket, principal: UserPrincipal) -> None:
        await websocket.accept()
        await websocket.send_text(principal.user_name)
        await websocket.close()

    @app.websocket("/v1/test/bridge")
    async def bridge(websocket: WebSocket, principal: BridgePrincipal) -> None:
        await websocket.accept()
        await websocket.send_text(principal.actor)
        await websocket.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveController]:
    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", bootstrap_token=ADMIN_TOKEN)
    with LiveController(config, customize=_add_echo) as live:
        yield live


def _ws(live: LiveController, query: str = "", *, path: str = "/v1/test/whoami") -> str:
    return live.url.replace("http://", "ws://") + path + query


async def test_a_valid_header_opens_the_socket(live: LiveController) -> None:
    async with connect(
        _ws(live), additional_headers=bearer(ADMIN_TOKEN), open_timeout=TIMEOUT_S
    ) as ws:
        assert await ws.recv() == "admin"


@pytest.mark.parametrize(
    ("headers", "query", "status", "code"),
    [
        ({}, "", 401, "unauthorized"),
        (bearer("dw_u_unknown"), "", 401, "unauthorized"),
        ({}, f"?token={ADMIN_TOKEN}", 400, "bad_request"),
        (bearer(ADMIN_TOKEN), f"?access_token={ADMIN_TOKEN}", 400, "bad_request"),
    ],
    ids=["no-header", "unknown", "query-token", "query-token-with-header"],
)
async def test_bad_credentials_refuse_the_handshake(
    live: LiveController, headers: dict[str, str], query: str, status: int, code: str
) -> None:
    with pytest.raises(InvalidStatus) as info:
        async with connect(_ws(live, query), additional_headers=headers, open_timeout=TIMEOUT_S):
            pass
    response = info.value.response
    assert response.status_code == status
    assert f'"code":"{code}"'.encode() in response.body
    assert ADMIN_TOKEN.encode() not in response.body


async def test_a_bridge_token_is_forbidden_here(live: LiveController) -> None:
    async with httpx.AsyncClient(base_url=live.url) as http:
        created = await http.post(
            "/v1/tokens", json={"kind": "bridge", "name": "pi"}, headers=bearer(ADMIN_TOKEN)
        )
    with pytest.raises(InvalidStatus) as info:
        async with connect(
            _ws(live), additional_headers=bearer(created.json()["token"]), open_timeout=TIMEOUT_S
        ):
            pass
    assert info.value.response.status_code == 403


async def test_only_bridge_tokens_open_a_bridge_route(live: LiveController) -> None:
    async with httpx.AsyncClient(base_url=live.url) as http:
        created = await http.post(
            "/v1/tokens", json={"kind": "bridge", "name": "pi"}, headers=bearer(ADMIN_TOKEN)
        )
    url = _ws(live, path="/v1/test/bridge")
    async with connect(
        url, additional_headers=bearer(created.json()["token"]), open_timeout=TIMEOUT_S
    ) as ws:
        assert await ws.recv() == "bridge:pi"
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=TIMEOUT_S):
            pass
    assert info.value.response.status_code == 403
    assert b"not_a_bridge_token" in info.value.response.body
