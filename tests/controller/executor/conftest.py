"""Fixtures: one simulated device (two for the cache test) through the real adb server, per
module; a bridge dispatcher over them with the simulated toolchain, per test (cheap)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controller.executor import ExecutorSettings, SandboxExecutor
from controller.store import Store
from device_bridge.adb import AdbDevices
from device_bridge.build import BuildService
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace import ProjectRegistry, WorkspaceManager
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.executor.support import LocalGateway


@pytest.fixture(scope="module")
def sim(adb_server: AdbServer) -> Iterator[ConnectedSim]:
    with connected_sim(adb_server) as device:
        yield device


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspaces")


def build_service(state_dir: Path) -> BuildService:
    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=state_dir)
    return BuildService(manager, prefer="simulated", simulated=SimulatedToolchain())


@pytest.fixture
async def adb(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=30.0 * TIME_SCALE, flush_s=0.025)
    try:
        yield layer
    finally:
        await layer.aclose()


@pytest.fixture
def gateway(adb: AdbDevices, sim: ConnectedSim, state_dir: Path) -> LocalGateway:
    gw = LocalGateway()
    dispatcher = Dispatcher(policy=Policy(PolicyConfig()), devices=adb,
                            build=build_service(state_dir))
    gw.add_bridge("desk", dispatcher, [sim.address])
    return gw


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'controller.db'}")
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


SETTINGS = ExecutorSettings(default_timeout_s=120.0 * TIME_SCALE,
                            step_timeout_s=30.0 * TIME_SCALE,
                            cleanup_timeout_s=20.0 * TIME_SCALE,
                            rpc_grace_s=0.5 * TIME_SCALE)


@pytest.fixture
def executor(gateway: LocalGateway, store: Store) -> SandboxExecutor:
    return SandboxExecutor(gateway, store, settings=SETTINGS)
