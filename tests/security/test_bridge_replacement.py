"""A connection with a bridge's token replaces the live bridge only after a valid, compatible
``hello`` (docs/security.md, "Bounds and secrets"). Garbage, a silent probe, a text frame, a
request instead of a hello, or a newer protocol version must not evict the real bridge (4409
is terminal for it: it would exit and stay down)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from protocol.closecodes import CloseCode
from protocol.codec import encode
from protocol.envelope import Capabilities, Hello, Req, new_request_id
from tests.adb_support import AdbServer, ConnectedSim
from tests.faults.figures import record
from tests.security.support import WAIT_S, raw_bridge_client, stack, wait_until

AREA = "hostile tenants"

Attempt = Callable[[ClientConnection], Awaitable[None]]


async def _garbage(ws: ClientConnection) -> None:
    await ws.send(b"\xc1\xff not msgpack")


async def _text(ws: ClientConnection) -> None:
    await ws.send('{"t": "hello"}')


async def _probe(ws: ClientConnection) -> None:
    await ws.close()


async def _request_first(ws: ClientConnection) -> None:
    await ws.send(encode(Req(id=new_request_id(), m="ping", p={})))


async def _newer_protocol(ws: ClientConnection) -> None:
    await ws.send(encode(Hello(session=new_request_id(), software="x", protocol=99)))


async def _bad_hello(ws: ClientConnection) -> None:
    # A hello map whose fields do not validate (session is not a UUID4).
    import msgpack

    await ws.send(msgpack.packb({"t": "hello", "session": "nope", "software": 5}))


ATTEMPTS: dict[str, Attempt] = {
    "garbage": _garbage, "text": _text, "probe": _probe, "request_first": _request_first,
    "newer_protocol": _newer_protocol, "bad_hello": _bad_hello,
}


@pytest.mark.timeout(240)
async def test_only_a_valid_hello_replaces_the_live_bridge(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    async with stack(tmp_path) as world:
        token = await world.token("bridge", "alice-br")
        bridge = await world.bridge(token, adb_server)
        await world.listed(world.http, sim_device.address)
        hub = world.controller.hub
        [entry] = hub.entries()
        live = entry.conn
        assert live is not None
        evicted: list[str] = []
        for name, attempt in ATTEMPTS.items():
            async with raw_bridge_client(world.controller.url, token) as ws:
                await attempt(ws)
                with contextlib.suppress(ConnectionClosed):
                    async with asyncio.timeout(WAIT_S):
                        await ws.recv()
                        raise AssertionError(f"{name}: the controller answered a bad handshake")
                code = ws.close_code
            if code == CloseCode.REPLACED or entry.conn is not live or not bridge.alive:
                evicted.append(name)
                break
        record(AREA, "bridge replacement before a valid hello: attempts", len(ATTEMPTS))
        record(AREA, "bridge replacement before a valid hello: evictions", len(evicted),
               must_be_zero=True)
        assert not evicted, f"{evicted} replaced the live bridge:\n{bridge.log()[-2000:]}"
        for name in ATTEMPTS:
            shell = await world.http.post(f"/v1/devices/{sim_device.address}/shell",
                                          json={"argv": ["echo", name]})
            assert shell.status_code == 200 and shell.json()["stdout"].strip() == name

        # The positive case: a valid, compatible hello does take over (and 4409 is terminal
        # for the real bridge, which exits non-zero).
        async with raw_bridge_client(world.controller.url, token) as ws:
            await ws.send(encode(Hello(session=new_request_id(), software="x",
                                       caps=Capabilities(devices=True))))
            welcome = await asyncio.wait_for(ws.recv(), WAIT_S)
            assert isinstance(welcome, bytes)
            assert await bridge.wait() != 0
            await wait_until(lambda: entry.conn is not live, "replaced")
