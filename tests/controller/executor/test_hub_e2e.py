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


async def test_a_run_submitted_while_its_bridge_reconnects_waits_for_it(
    tmp_path: Path, adb_server: AdbServer, adb: AdbDevices, sim: ConnectedSim, state_dir: Path
) -> None:
    """A bridge that dropped less than the grace period ago is expected back: a run whose
    devices are all on it waits for it (docs/sandbox.md, "Device selection") instead of ending
    PENDING ``bridge_unavailable`` at once — what a blip of a lab's link did to a burst."""
    from dataclasses import replace

    from controller.hub.entry import BridgeState
    from tests.controller.test_hub_support import fast_settings
    from tests.e2e.proxy import Proxy

    settings = fast_settings(grace_period_s=20.0 * TIME_SCALE)
    async with in_loop_controller(tmp_path, settings) as controller, \
            Proxy(controller.port) as proxy:
        token = await controller.bridge_token("desk")
        host = HostConfig.from_mapping({
            "controller": {"url": [proxy.url.replace("http://", "ws://")]},
            "adb": {"server_port": adb_server.port, "start_server": False},
        })
        fast = replace(settings, backoff_first_max_s=0.05, backoff_base_s=0.1,
                       backoff_cap_s=0.2)
        async with Bridge(host, token=token, devices=adb, build=build_service(state_dir),
                          settings=fast) as bridge:
            await bridge.wait_open(WAIT_S)
            gateway = HubGateway(controller.hub)
            async with asyncio.timeout(WAIT_S):
                while not any(d.ready for d in gateway.devices()):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            [entry] = controller.hub.entries()
            proxy.hold()
            proxy.cut()
            async with asyncio.timeout(WAIT_S):
                while entry.state is not BridgeState.RECONNECTING:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            submitted = asyncio.create_task(controller.http.post(
                "/v1/sandbox/execute", json={"test_code": llm_style_test("fetchGreetingBlocking()")},
                timeout=WAIT_S * 2))
            # Not back yet: the request is still waiting (had it been planned now, it would
            # have ended PENDING bridge_unavailable within this second).
            await asyncio.wait({submitted}, timeout=1.0)
            proxy.release()
            response = await submitted
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["verification_status"] == "CONFIRMED", result["summary"]
    assert result["device"]["id"] == f"desk~{sim.address}"
