"""The executor through the real hub: a controller on uvicorn, a bridge dialling it over a
WebSocket (in this process), the real adb server and the simulated device. The executor is
the one ``POST /v1/sandbox/execute`` builds on first use (:class:`HubGateway`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller.executor.hub_gateway import HubGateway
from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import llm_style_test
from tests.controller.test_hub_support import in_loop_controller

pytestmark = pytest.mark.adb

WAIT_S = 30.0 * TIME_SCALE


async def test_sandbox_run_through_the_hub(
    tmp_path: Path, adb_server: AdbServer, adb: AdbDevices, sim: ConnectedSim, state_dir: Path
) -> None:
    async with in_loop_controller(tmp_path) as controller:
        token = await controller.bridge_token("desk")
        host = HostConfig.from_mapping({
            "controller": {"url": [controller.ws_url]},
            "adb": {"server_port": adb_server.port, "start_server": False},
        })
        async with Bridge(host, token=token, devices=adb, build=build_service(state_dir)) as bridge:
            await bridge.wait_open(WAIT_S)
            gateway = HubGateway(controller.hub)

            def ready() -> bool:
                return any(d.serial == sim.address and d.ready for d in gateway.devices())

            async with asyncio.timeout(WAIT_S):
                while not ready():  # noqa: ASYNC110 - the hub's registry has no event to wait on
                    await asyncio.sleep(0.01)
            [builder] = gateway.bridges()
            assert builder.can_build and builder.caps.toolchain == "simulated"

            response = await controller.http.post(
                "/v1/sandbox/execute",
                json={"test_code": llm_style_test("fetchGreetingBlocking()"),
                      "device": f"desk~{sim.address}"},
            )
            assert response.status_code == 200, response.text
            result = response.json()
            assert result["verification_status"] == "CONFIRMED"
            assert result["summary"].startswith("StrictMode violations: Network | ")
            assert result["device"]["id"] == f"desk~{sim.address}"
            assert isinstance(controller.app.state.services.executor.gateway, HubGateway)
            metrics = (await controller.http.get("/metrics")).text
            assert ('droidwire_sandbox_runs_total{reason_code="strict_mode_violation",'
                    'verdict="CONFIRMED"} 1.0') in metrics
            assert "droidwire_sandbox_run_seconds_count 1.0" in metrics

        # The bridge is gone: a new run says so instead of failing.
        response = await controller.http.post(
            "/v1/sandbox/execute", json={"test_code": llm_style_test("formatTitle()")}
        )
        result = response.json()
        assert result["verification_status"] == "PENDING"
        assert result["reason_code"] in ("bridge_unavailable", "no_device")
