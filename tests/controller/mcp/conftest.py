"""A real controller (uvicorn on a free loopback port), the real bridge dialling it, the real
adb server and a simulated device; MCP clients are the SDK's own (``streamable_http_client``
+ ``ClientSession``) with a Bearer header. Reuses the executor suite's device fixtures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.executor.conftest import adb, build_service, sim, state_dir  # noqa: F401 - fixtures
from tests.controller.test_hub_support import InLoopController, in_loop_controller

WAIT_S = 30.0 * TIME_SCALE
BRIDGE = "desk"


@dataclass
class Rig:
    controller: InLoopController
    sim: ConnectedSim

    @property
    def mcp_url(self) -> str:
        return f"{self.controller.url}/mcp"

    @property
    def device_id(self) -> str:
        return f"{BRIDGE}~{self.sim.address}"

    async def user_token(self, name: str) -> str:
        response = await self.controller.http.post(
            "/v1/tokens", json={"kind": "user", "name": name}
        )
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    @contextlib.asynccontextmanager
    async def session(self, token: str = ADMIN_TOKEN) -> AsyncIterator[ClientSession]:
        """An initialized MCP client session speaking to ``/mcp`` with ``token``."""
        async with (
            httpx2.AsyncClient(
                headers=bearer(token), timeout=httpx2.Timeout(WAIT_S, read=4 * WAIT_S)
            ) as http,
            streamable_http_client(self.mcp_url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@pytest.fixture
async def rig(
    tmp_path: Path,
    adb_server: AdbServer,
    adb: AdbDevices,  # noqa: F811
    sim: ConnectedSim,  # noqa: F811
    state_dir: Path,  # noqa: F811
) -> AsyncIterator[Rig]:
    async with in_loop_controller(tmp_path) as controller:
        token = await controller.bridge_token(BRIDGE)
        host = HostConfig.from_mapping({
            "controller": {"url": [controller.ws_url]},
            "adb": {"server_port": adb_server.port, "start_server": False},
        })
        async with Bridge(host, token=token, devices=adb, build=build_service(state_dir)) as bridge:
            await bridge.wait_open(WAIT_S)

            def ready() -> bool:
                return any(
                    serial == sim.address and info.state == "device"
                    for entry in controller.hub.entries()
                    for serial, info in entry.live_devices().items()
                )

            async with asyncio.timeout(WAIT_S):
                while not ready():  # noqa: ASYNC110 - the hub's registry has no event to wait on
                    await asyncio.sleep(0.01)
            yield Rig(controller, sim)
