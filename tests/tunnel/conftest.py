"""One real stack for the tunnel tests: a controller on uvicorn (this event loop), the real
bridge dialling it, the bridge's adb server with a simulated phone, and a *second* adb server
standing for the user's laptop — the one `adb connect`s to the tunnel's local port.

- ``olivia`` owns the bridge ``desk`` and so the device; she lends it to ``bob``; ``sam`` is a
  stranger. The device's profile is ``standard`` (the default).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from device_bridge.bridge import Bridge
from droidwire.tunnel import TunnelClient
from tests.adb_support import AdbServer, start_adb_server, wait_for_state
from tests.conftest import TIME_SCALE
from tests.controller.conftest import bearer
from tests.controller.test_hub_support import InLoopController
from tests.desk import desk

WAIT_S = 30.0 * TIME_SCALE


@dataclass
class Stack:
    controller: InLoopController
    serial: str
    device_id: str
    tokens: dict[str, str]
    bridge: Bridge
    sim: Any
    laptop: AdbServer  # the user's own adb server
    grant_id: str

    @property
    def url(self) -> str:
        return self.controller.url

    def api(self, user: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=WAIT_S,
                                 headers=bearer(self.tokens[user]))

    async def adb(self, *args: str, limit_s: float = 60.0, text: bool = True) -> Any:
        """``adb -P LAPTOP ARGS…`` off the event loop (the tunnel runs on it); ``limit_s`` is
        a hang guard (adb's own), never a timing assertion."""
        return await asyncio.to_thread(self.laptop.cli, *args, timeout=limit_s, text=text)

    @contextlib.asynccontextmanager
    async def tunnel(self, user: str) -> AsyncIterator[Tunnelled]:
        """A tunnel for ``user``, ``adb connect``-ed on the laptop's server; disconnected after."""
        client = TunnelClient(self.url, self.tokens[user], self.device_id)
        await client.start()
        address = f"127.0.0.1:{client.port}"
        try:
            connected = await self.adb("connect", address)
            assert "connected" in connected.stdout, connected.stdout + connected.stderr
            await asyncio.to_thread(wait_for_state, self.laptop.client(), address, "device",
                                    WAIT_S)
            yield Tunnelled(self, client, address)
        finally:
            await client.aclose()
            await self.adb("disconnect", address)


@dataclass
class Tunnelled:
    stack: Stack
    client: TunnelClient
    address: str

    async def adb(self, *args: str, limit_s: float = 60.0, text: bool = True) -> Any:
        return await self.stack.adb("-s", self.address, *args, limit_s=limit_s, text=text)


@pytest.fixture(scope="package")
def laptop() -> Iterator[AdbServer]:
    server = start_adb_server()
    try:
        yield server
    finally:
        server.kill()




@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def stack(
    adb_server: AdbServer, laptop: AdbServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("tunnel")
    async with desk(adb_server, tmp) as d:
        yield Stack(d.controller, d.sim.address, d.device_id, d.tokens, d.bridge, d.sim,
                    laptop, str(d.grant["id"]))
