"""The management world: a real controller, a bridge session whose handler is the bridge's
dispatcher with its management toolkit, the real adb server and a simulated phone; olivia owns
the bridge (``desk``), bob and eve are other users."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from controller import auth
from controller.config import ControllerConfig
from controller.services import services_of
from device_bridge.adb import AdbDevices
from device_bridge.manage import ManageToolkit
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from droidwire import app as cli
from protocol.envelope import DeviceInfo
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import FakeBridge, InLoopController, fast_settings
from tests.controller.test_lending import until_device_seen

__all__ = ["World", "sim", "world"]

runner = CliRunner()


@pytest.fixture(scope="module")
def sim(adb_server: AdbServer) -> Iterator[ConnectedSim]:
    with connected_sim(adb_server) as device:
        yield device


@dataclass
class World:
    ctl: InLoopController
    tokens: dict[str, str]
    sim: ConnectedSim
    user_ids: dict[str, str]
    bridge: FakeBridge  # olivia's bridge (desk), serving the simulated phone

    @property
    def base(self) -> str:
        return f"/v1/devices/{self.sim.address}"

    async def call(self, who: str, method: str, path: str, **kw: object) -> httpx.Response:
        return await self.ctl.http.request(
            method, self.base + path, headers=bearer(self.tokens[who]), **kw  # type: ignore[arg-type]
        )

    def cli(self, who: str, *args: str) -> tuple[int, str, str]:
        env = {"DROIDWIRE_CONTROLLER": self.ctl.url, "DROIDWIRE_TOKEN": self.tokens[who]}
        result = runner.invoke(cli, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    def packages(self) -> set[str]:
        return set(self.sim.call(lambda: set(self.sim.device.packages)))

    def exists(self, path: str) -> bool:
        return self.sim.call(lambda: self.sim.device.files.stat(path)) is not None


@pytest.fixture
async def world(tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim) -> AsyncIterator[World]:
    adb = AdbDevices(port=adb_server.port, call_timeout_s=30.0 * TIME_SCALE)
    dispatcher = Dispatcher(policy=Policy(PolicyConfig()), devices=adb)
    toolkit = ManageToolkit.install(dispatcher, health_max_age_s=0)  # every reading fresh
    config = ControllerConfig(
        db_url=f"sqlite:///{tmp_path / 'controller.db'}",
        bootstrap_token=ADMIN_TOKEN,
        settings=fast_settings(rpc_timeout_s=60 * TIME_SCALE),
        max_transfer_bytes=4 * 1024 * 1024,
        loan_sweep_s=3600,  # sweeps are called by the test (and by revocation)
    )
    ctl = InLoopController(config)
    await ctl.start()
    link: FakeBridge | None = None
    try:
        tokens = {"admin": ADMIN_TOKEN}
        ids: dict[str, str] = {}
        for user in ("olivia", "bob", "eve"):
            made = (await ctl.http.post("/v1/tokens", json={"kind": "user", "name": user})).json()
            tokens[user] = made["token"]
        for user in ("olivia", "bob", "eve"):
            principal = await auth.authenticate(services_of(ctl.app).store, f"Bearer {tokens[user]}")
            ids[user] = principal.user_id
        bridge = await ctl.http.post("/v1/tokens", json={"kind": "bridge", "name": "desk"},
                                     headers=bearer(tokens["olivia"]))
        link = FakeBridge(ctl.url, bridge.json()["token"], handler=dispatcher,
                          devices=[DeviceInfo(serial=sim.address, state="device", sdk=34)])
        await link.connect()
        await until_device_seen(ctl, tokens["olivia"])
        yield World(ctl, tokens, sim, ids, link)
    finally:
        if link is not None:
            await link.close()
        await ctl.stop()
        toolkit.close()
        await adb.aclose()
