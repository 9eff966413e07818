"""The tunnel's WebSocket without adb (issue 24, docs/tunnel.md): who may open one, the quota,
a client that sends garbage, and the end when the token is revoked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from protocol.tunnel_methods import decode_frame, encode_frame
from tests.controller.conftest import bearer
from tests.tunnel.conftest import WAIT_S, Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]


def _url(stack: Stack) -> str:
    return f"{stack.url.replace('http://', 'ws://')}/v1/devices/{stack.device_id}/tunnel"


@contextlib.asynccontextmanager
async def _ws(stack: Stack, token: str) -> AsyncIterator[tuple[ClientConnection, dict[str, Any]]]:
    async with connect(_url(stack), additional_headers=bearer(token), open_timeout=WAIT_S,
                       max_size=None) as ws:
        hello = decode_frame(await asyncio.wait_for(ws.recv(), WAIT_S))
        yield ws, hello


async def _until_end(ws: ClientConnection) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            frame = decode_frame(await ws.recv())
            if frame["op"] == "end":
                return frame


async def test_hello_then_a_refused_open_then_garbage_ends_it(stack: Stack) -> None:
    async with _ws(stack, stack.tokens["bob"]) as (ws, hello):
        assert hello["op"] == "hello" and hello["serial"] == stack.serial
        assert "shell_v2" in hello["features"] and "abb_exec" not in hello["features"]
        assert hello["banner"].startswith("device::")
        await ws.send(encode_frame("open", s=1, service="root:"))
        refused = decode_frame(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert refused == {"op": "refused", "s": 1, "rule": "adbd_control",
                           "message": "root: refused on a shared device (profile standard)"}
        await ws.send("not a frame")
        end = await _until_end(ws)
        assert end["reason"].startswith("bad_request")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT_S)
    async with asyncio.timeout(WAIT_S):
        while stack.controller.hub.tunnels.live():  # noqa: ASYNC110  (no event for it)
            await asyncio.sleep(0.02)


async def test_a_stranger_is_refused_before_the_socket_opens(stack: Stack) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with _ws(stack, stack.tokens["sam"]):
            pass
    assert refused.value.response.status_code == 404
    assert not stack.controller.hub.tunnels.live()


async def test_tunnels_per_user_are_bounded(stack: Stack) -> None:
    quota = stack.controller.hub.tunnels.per_user
    async with contextlib.AsyncExitStack() as held:
        for _ in range(quota):
            await held.enter_async_context(_ws(stack, stack.tokens["bob"]))
        with pytest.raises(InvalidStatus) as refused:
            async with _ws(stack, stack.tokens["bob"]):
                pass
        assert refused.value.response.status_code == 429
        async with _ws(stack, stack.tokens["olivia"]) as (_, hello):  # others are not held up
            assert hello["op"] == "hello"


async def test_a_revoked_token_ends_the_tunnel(stack: Stack) -> None:
    admin = stack.controller.http
    created = await admin.post("/v1/tokens", json={"kind": "user", "name": "olivia"})
    assert created.status_code == 201, created.text
    body = created.json()
    async with _ws(stack, body["token"]) as (ws, _):
        revoked = await admin.delete(f"/v1/tokens/{body['id']}")
        assert revoked.status_code in (200, 204), revoked.text
        end = await _until_end(ws)
        assert end["reason"].startswith("forbidden"), end
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_the_cli_exits_4_for_a_device_it_may_not_use(stack: Stack) -> None:
    from typer.testing import CliRunner

    from droidwire import app as cli

    env = {"DROIDWIRE_CONTROLLER": stack.url, "DROIDWIRE_TOKEN": stack.tokens["sam"]}
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "tunnel", stack.device_id, "--json"], env=env)
    assert result.exit_code == 4, result.output
    assert not stack.controller.hub.tunnels.live()
