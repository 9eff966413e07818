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

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from device_bridge.bridge import Bridge
from tests.adb_support import AdbServer
from tests.conftest import TIME_SCALE
from tests.controller.conftest import bearer
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.controller.test_hub_support import InLoopController
from tests.desk import desk, ok

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




@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def stack(
    adb_server: AdbServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("web")
    async with desk(adb_server, tmp, build=build_service(tmp / "workspaces")) as d:
        draft = llm_style_test("loadSettingsFromDisk()").replace("import android.util.Log\n", "")
        result = await ok(await d.olivia.post(
            "/v1/sandbox/execute", json={"test_code": draft, "device": d.device_id}))
        assert result["verification_status"] == "CONFIRMED", result["summary"]
        async with httpx.AsyncClient(base_url=d.controller.url, timeout=WAIT_S,
                                     headers=bearer(d.tokens["sam"])) as sam:
            refused = await ok(await sam.post(
                "/v1/sandbox/execute",
                json={"test_code": llm_style_test("formatTitle(\"a\", 1)")}))
        assert refused["verification_status"] == "PENDING", refused
        yield Stack(d.controller, d.sim.address, d.device_id, d.tokens, d.bridge_token,
                    result["run_id"], refused["run_id"], d.bridge, d.sim)
