"""(Support, no tests.) Three tenants on one live stack: alice, bob and mallory.

A real controller (uvicorn, on the test's event loop, SQLite), and for each user a real
bridge (``device_bridge.bridge.Bridge``) dialling it with that user's own bridge token,
serving one simulated device of its own through the real adb server. The bridges expose only
their own device (each has its own ``expose`` policy); ``alice-br`` and ``mallory-br`` also
build (the simulated toolchain), ``bob-br`` does not (a Raspberry Pi).

Tokens are made as a tenant would: the admin creates each user's token; each user creates
their own bridge token, so the bridge belongs to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from controller.store import Bridge as StoredBridge
from controller.store import Device
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from protocol.settings import Settings
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import bearer
from tests.controller.executor.conftest import build_service
from tests.controller.test_hub_support import InLoopController, fast_settings, in_loop_controller

__all__ = ["USERS", "WAIT_S", "Stack", "Tenant", "tenancy_stack"]

WAIT_S = 60.0 * TIME_SCALE
USERS = ("alice", "bob", "mallory")
BUILDERS = {"alice", "mallory"}


@dataclass
class Tenant:
    name: str
    token: str  # the user's unrestricted user token
    bridge_token: str
    bridge_name: str
    sim: ConnectedSim
    http: httpx.AsyncClient
    bridge: Bridge | None = None
    adb: AdbDevices | None = None
    host: HostConfig | None = None
    state_dir: Path | None = None

    @property
    def serial(self) -> str:
        return self.sim.address

    @property
    def device_id(self) -> str:
        return f"{self.bridge_name}~{self.serial}"


@dataclass
class Stack:
    controller: InLoopController
    tenants: dict[str, Tenant]
    admin: httpx.AsyncClient
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def __getitem__(self, name: str) -> Tenant:
        return self.tenants[name]

    @property
    def url(self) -> str:
        return self.controller.url

    def client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=bearer(token), timeout=WAIT_S)

    async def token(self, user: str, *, as_token: str | None = None, **body: Any) -> dict[str, Any]:
        """A new token (``body``: kind, scopes…) for ``user``, made by ``as_token``."""
        client = self.client(as_token or self[user].token)
        async with client:
            response = await client.post("/v1/tokens", json={"kind": "user", "name": user, **body})
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def start_bridge(self, name: str) -> None:
        tenant = self[name]
        assert tenant.host is not None and tenant.adb is not None
        bridge = Bridge(
            tenant.host, token=tenant.bridge_token, devices=tenant.adb,
            build=build_service(tenant.state_dir) if name in BUILDERS and tenant.state_dir
            else None,
        )
        await bridge.__aenter__()
        tenant.bridge = bridge
        await bridge.wait_open(WAIT_S)
        await self.wait_device(tenant.device_id, ready=True)

    async def stop_bridge(self, name: str) -> None:
        tenant = self[name]
        if tenant.bridge is not None:
            bridge, tenant.bridge = tenant.bridge, None
            await bridge.__aexit__(None, None, None)

    async def wait_device(self, device_id: str, *, ready: bool) -> None:
        """Until the hub lists ``device_id`` ready (or not): the registry has no event."""
        hub = self.controller.hub

        def state() -> bool:
            for entry in hub.entries():
                for serial, info in entry.live_devices().items():
                    if f"{entry.name}~{serial}" == device_id and info.state == "device":
                        return True
            return False

        async with asyncio.timeout(WAIT_S):
            while state() is not ready:  # noqa: ASYNC110 - polled registry, bounded
                await asyncio.sleep(0.02)
        if ready:
            await self.wait_recorded(device_id)

    async def wait_recorded(self, device_id: str) -> None:
        """Until the store has recorded ``device_id`` (written behind the live inventory;
        a loan names a device the store has seen)."""
        bridge, _, serial = device_id.partition("~")
        query = (select(Device.id).join(StoredBridge, Device.bridge_id == StoredBridge.id)
                 .where(StoredBridge.name == bridge, Device.serial == serial))

        async def recorded() -> bool:
            async with self.controller.hub.store.session() as session:
                return (await session.execute(query)).first() is not None

        async with asyncio.timeout(WAIT_S):
            while not await recorded():  # noqa: ASYNC110 - the write has no event, bounded
                await asyncio.sleep(0.02)

    async def lend(self, owner: str, device: str, to: str, **extra: Any) -> dict[str, Any]:
        response = await self[owner].http.post(
            "/v1/grants", json={"device": device, "user": to, **extra}
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def run(self, user: str, code: str, device: str | list[str] | None = None,
                  **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"test_code": code, **extra}
        if device is not None:
            body["device"] = device
        response = await self[user].http.post("/v1/sandbox/execute", json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def steps(self, user: str, run_id: str) -> list[dict[str, Any]]:
        response = await self[user].http.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        return list(response.json()["steps"])


@contextlib.asynccontextmanager
async def tenancy_stack(
    tmp_path: Path, adb_server: AdbServer, *, settings: Settings | None = None,
    bridges: tuple[str, ...] = USERS,
) -> AsyncIterator[Stack]:
    """The three tenants' stack; ``bridges``: whose bridges are started at once."""
    async with contextlib.AsyncExitStack() as outer:
        controller = await outer.enter_async_context(
            in_loop_controller(tmp_path, settings or fast_settings())
        )
        admin = controller.http
        tenants: dict[str, Tenant] = {}
        sims = outer.enter_context(_sims(adb_server, len(USERS)))
        for name, sim in zip(USERS, sims, strict=True):
            made = await admin.post("/v1/tokens", json={"kind": "user", "name": name})
            assert made.status_code == 201, made.text
            token = made.json()["token"]
            http = httpx.AsyncClient(base_url=controller.url, headers=bearer(token),
                                     timeout=WAIT_S)
            await outer.enter_async_context(http)
            bridge_name = f"{name}-br"
            made = await http.post("/v1/tokens", json={"kind": "bridge", "name": bridge_name})
            assert made.status_code == 201, made.text
            adb = AdbDevices(port=adb_server.port, call_timeout_s=30.0 * TIME_SCALE,
                             flush_s=0.025)
            outer.push_async_callback(adb.aclose)
            host = HostConfig.from_mapping({
                "controller": {"url": [controller.ws_url]},
                "adb": {"server_port": adb_server.port, "start_server": False},
                "policy": {"expose": [sim.address]},
            })
            state_dir = tmp_path / f"{name}-workspaces"
            state_dir.mkdir()
            tenants[name] = Tenant(name, token, made.json()["token"], bridge_name, sim, http,
                                   adb=adb, host=host, state_dir=state_dir)
        stack = Stack(controller, tenants, admin)
        try:
            for name in bridges:
                await stack.start_bridge(name)
            yield stack
        finally:
            for name in USERS:
                await stack.stop_bridge(name)
    # Anything this stack left unclosed is reported now, against the test that made it.
    gc.collect()


@contextlib.contextmanager
def _sims(adb_server: AdbServer, n: int) -> Iterator[list[ConnectedSim]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(connected_sim(adb_server)) for _ in range(n)]
