"""The stack the web and tunnel tests share: a controller on uvicorn (this event loop), the real
bridge ``desk`` dialling it over a WebSocket, the real adb server and a simulated phone; three
users — ``olivia`` owns the bridge (she made its token) and lends the phone to ``bob``; ``sam``
is a stranger to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from controller.executor.hub_gateway import HubGateway
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import bearer
from tests.controller.test_hub_support import InLoopController, in_loop_controller

WAIT_S = 30.0 * TIME_SCALE
USERS = ("olivia", "bob", "sam")


async def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


async def grant_to_bob(olivia: httpx.AsyncClient, device_id: str) -> httpx.Response:
    return await olivia.post("/v1/grants", json={"device": device_id, "user": "bob"})


@dataclass
class Desk:
    controller: InLoopController
    sim: Any  # tests.adb_support.ConnectedSim
    tokens: dict[str, str]  # user name -> API token
    bridge_token: str
    bridge: Bridge
    device_id: str  # desk~SERIAL
    grant: dict[str, Any]  # olivia's loan to bob
    olivia: httpx.AsyncClient


@asynccontextmanager
async def desk(adb_server: AdbServer, tmp: Path, *, build: Any = None) -> AsyncIterator[Desk]:
    """The stack, up: the phone ready on the controller and lent to bob."""
    with connected_sim(adb_server) as sim:
        async with in_loop_controller(tmp) as controller:
            tokens = {}
            for name in USERS:
                body = await ok(await controller.http.post(
                    "/v1/tokens", json={"kind": "user", "name": name}), 201)
                tokens[name] = body["token"]
            async with httpx.AsyncClient(base_url=controller.url, timeout=WAIT_S,
                                         headers=bearer(tokens["olivia"])) as olivia:
                bridge_token = (await ok(
                    await olivia.post("/v1/tokens", json={"kind": "bridge", "name": "desk"}), 201
                ))["token"]
                host = HostConfig.from_mapping({
                    "controller": {"url": [controller.ws_url]},
                    "adb": {"server_port": adb_server.port, "start_server": False},
                })
                adb = AdbDevices(port=adb_server.port, call_timeout_s=WAIT_S, flush_s=0.025)
                try:
                    async with Bridge(host, token=bridge_token, devices=adb,
                                      build=build) as bridge:
                        await bridge.wait_open(WAIT_S)
                        gateway = HubGateway(controller.hub)
                        async with asyncio.timeout(WAIT_S):
                            while not any(d.serial == sim.address and d.ready  # noqa: ASYNC110
                                          for d in gateway.devices()):
                                await asyncio.sleep(0.01)  # the registry has no event to await
                        device_id = f"desk~{sim.address}"
                        # A grant needs the device in the store, written just after the
                        # inventory arrives: wait for that condition (bounded).
                        async with asyncio.timeout(WAIT_S):
                            granted = await grant_to_bob(olivia, device_id)
                            while granted.status_code == 404:  # no event to await for it
                                await asyncio.sleep(0.01)
                                granted = await grant_to_bob(olivia, device_id)
                        grant = await ok(granted, 201)
                        yield Desk(controller, sim, tokens, bridge_token, bridge, device_id,
                                   grant, olivia)
                finally:
                    await adb.aclose()
