"""Fixtures: one simulated device per module, through the real adb server; a bridge
dispatcher whose agent toolkit sleeps on the device's UI clock, with the demo app installed
through droidwire and started on MainActivity."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.agent import AgentToolkit
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from device_bridge.sim.ui_demo import DEMO_PACKAGE
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.agent.support import install_demo, ui_sleep


@pytest.fixture(scope="module")
def sim(adb_server: AdbServer) -> Iterator[ConnectedSim]:
    with connected_sim(adb_server) as device:
        yield device


@pytest.fixture
async def adb(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=30.0 * TIME_SCALE)
    try:
        yield layer
    finally:
        await layer.aclose()


@pytest.fixture
async def bridge(adb: AdbDevices, sim: ConnectedSim) -> AsyncIterator[Dispatcher]:
    """A dispatcher with the demo app freshly started (its state reset) on MainActivity."""
    dispatcher = Dispatcher(policy=Policy(PolicyConfig()), devices=adb)
    AgentToolkit.install(dispatcher, sleep=ui_sleep(sim))
    sim.call(lambda: sim.device.force_stop(DEMO_PACKAGE))
    sim.call(lambda: sim.device.app_ui.reset())
    await install_demo(dispatcher, sim.address)
    yield dispatcher
