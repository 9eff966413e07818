"""One real stack shared by the tests of this folder: a controller on uvicorn (this event
loop), the real bridge dialling it over a WebSocket, the real adb server and a simulated device; three users and
two real runs.

- ``olivia`` owns the bridge ``desk`` (she created its token) and so the device; she lends
  it to ``bob``; ``sam`` is a stranger to it.
- olivia's run: a draft missing an import, fixed by the rule fixer (two compile rounds, a
  diff), then run on the device: CONFIRMED with StrictMode evidence in its logcat.
- sam's run: no device he may use, so the run's log records the refusal and it ends PENDING.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from controller.executor.hub_gateway import HubGateway
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import bearer
from tests.controller.test_hub_support import InLoopController, in_loop_controller
from tests.executor.conftest import build_service
from tests.executor.support import llm_style_test

WAIT_S = 30.0 * TIME_SCALE


@dataclass
class Stack:
    controller: InLoopController
    serial: str
    device_id: str
    tokens: dict[str, str]  # user name -> API token
    bridge_token: str
    run_id: str  # olivia's CONFIRMED run
    refused_run_id: str  # sam's run with no usable device
    bridge: Bridge
    sim: Any = None  # tests.adb_support.ConnectedSim: the simulated phone itself

    @property
    def url(self) -> str:
        return self.controller.url

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """A browser-like client: no Authorization header, cookies kept, no redirects."""
        return httpx.AsyncClient(base_url=self.url, timeout=WAIT_S, **kwargs)

    def api(self, user: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=WAIT_S,
                                 headers=bearer(self.tokens[user]))


async def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


async def grant_to_bob(olivia: httpx.AsyncClient, device_id: str) -> httpx.Response:
    return await olivia.post("/v1/grants", json={"device": device_id, "user": "bob"})


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def stack(
    adb_server: AdbServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("web")
    with connected_sim(adb_server) as sim:
        async with in_loop_controller(tmp) as controller:
            admin = controller.http
            tokens = {}
            for name in ("olivia", "bob", "sam"):
                body = await _ok(await admin.post("/v1/tokens", json={"kind": "user", "name": name}),
                                 201)
                tokens[name] = body["token"]
            async with httpx.AsyncClient(base_url=controller.url, timeout=WAIT_S,
                                         headers=bearer(tokens["olivia"])) as olivia:
                bridge_token = (await _ok(
                    await olivia.post("/v1/tokens", json={"kind": "bridge", "name": "desk"}), 201
                ))["token"]
                host = HostConfig.from_mapping({
                    "controller": {"url": [controller.ws_url]},
                    "adb": {"server_port": adb_server.port, "start_server": False},
                })
                adb = AdbDevices(port=adb_server.port, call_timeout_s=WAIT_S, flush_s=0.025)
                try:
                    async with Bridge(host, token=bridge_token, devices=adb,
                                      build=build_service(tmp / "workspaces")) as bridge:
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
                        await _ok(granted, 201)
                        draft = llm_style_test("loadSettingsFromDisk()").replace(
                            "import android.util.Log\n", "")
                        result = await _ok(await olivia.post(
                            "/v1/sandbox/execute", json={"test_code": draft, "device": device_id}))
                        assert result["verification_status"] == "CONFIRMED", result["summary"]
                        async with httpx.AsyncClient(base_url=controller.url, timeout=WAIT_S,
                                                     headers=bearer(tokens["sam"])) as sam:
                            refused = await _ok(await sam.post(
                                "/v1/sandbox/execute",
                                json={"test_code": llm_style_test("formatTitle(\"a\", 1)")}))
                        assert refused["verification_status"] == "PENDING", refused
                        yield Stack(controller, sim.address, device_id, tokens, bridge_token,
                                    result["run_id"], refused["run_id"], bridge, sim)
                finally:
                    await adb.aclose()
