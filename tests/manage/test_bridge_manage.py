"""The bridge's management toolkit against the real adb server and the simulated phone:
staged transfers, apps learned from the device, per-profile refusals, health readings."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.manage import ManageToolkit, parse_health
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from device_bridge.sim.apk import SimPackage, build_apk
from protocol.envelope import Profile
from protocol.errors import ErrorCode, RpcError
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE

pytestmark = pytest.mark.adb

APK = build_apk(SimPackage(package="com.example.borrowed", kind="app"))
FOLDER = "/data/local/tmp/droidwire/loan-test"


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


def _rpc(adb: AdbDevices, profile: Profile = Profile.STANDARD) -> tuple[Dispatcher, ManageToolkit]:
    dispatcher = Dispatcher(policy=Policy(PolicyConfig(profile=profile)), devices=adb)
    return dispatcher, ManageToolkit.install(
        dispatcher, max_stage_bytes=8 * 1024 * 1024, write_ahead_bytes=2
    )


async def _upload(rpc: Dispatcher, serial: str, data: bytes, chunk: int = 100_000) -> str:
    stage = (await rpc("stage.open", {"serial": serial, "size": len(data)}))["stage"]
    for offset in range(0, len(data), chunk):
        part = data[offset : offset + chunk]
        await rpc("stage.write", {"serial": serial, "stage": stage, "offset": offset, "data": part})
    return str(stage)


async def _download(rpc: Dispatcher, serial: str, stage: str, chunk: int = 65_536) -> bytes:
    out = bytearray()
    while True:
        got = await rpc(
            "stage.read", {"serial": serial, "stage": stage, "offset": len(out), "length": chunk}
        )
        out += got["data"]
        if got["eof"]:
            break
    await rpc("stage.close", {"serial": serial, "stage": stage})
    return bytes(out)


async def test_push_and_pull_through_stages(adb: AdbDevices, sim: ConnectedSim) -> None:
    rpc, toolkit = _rpc(adb)
    serial = sim.address
    data = os.urandom(700_001)
    stage = await _upload(rpc, serial, data)
    pushed = await rpc("files.push", {"serial": serial, "stage": stage, "path": f"{FOLDER}/a.bin"})
    assert pushed["size"] == len(data)
    assert not toolkit._stages  # the stage is gone once pushed
    pulled = await rpc("files.pull", {"serial": serial, "path": f"{FOLDER}/a.bin",
                                      "max_bytes": 1 << 20})
    assert pulled["size"] == len(data)
    back = await _download(rpc, serial, pulled["stage"])
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()

    # Chunks may arrive out of order (a few in flight): each waits for its turn.
    shuffled = (await rpc("stage.open", {"serial": serial, "size": 6}))["stage"]
    late = asyncio.create_task(
        rpc("stage.write", {"serial": serial, "stage": shuffled, "offset": 2, "data": b"cd"})
    )
    # The late chunk runs while the first one is being written (at its append, in a thread):
    # it finds the stage still empty, and waits instead of failing.
    await rpc("stage.write", {"serial": serial, "stage": shuffled, "offset": 0, "data": b"ab"})
    assert (await late)["size"] == 4
    await rpc("stage.write", {"serial": serial, "stage": shuffled, "offset": 4, "data": b"ef"})
    assert await _download(rpc, serial, shuffled) == b"abcdef"

    # A stage bounds what it takes: more than announced, or a gap, is refused.
    small = (await rpc("stage.open", {"serial": serial, "size": 3}))["stage"]
    with pytest.raises(RpcError) as gap:
        await rpc("stage.write", {"serial": serial, "stage": small, "offset": 3, "data": b""})
    assert gap.value.data["reason"] == "offset"
    with pytest.raises(RpcError) as big:
        await rpc("stage.write", {"serial": serial, "stage": small, "offset": 0, "data": b"xxxx"})
    assert big.value.data["reason"] == "too_large"
    with pytest.raises(RpcError) as cap:
        await rpc("stage.open", {"serial": serial, "size": 9 * 1024 * 1024})
    assert cap.value.code is ErrorCode.BAD_REQUEST
    # Too large to pull within the caller's bound.
    with pytest.raises(RpcError) as too_big:
        await rpc("files.pull", {"serial": serial, "path": f"{FOLDER}/a.bin", "max_bytes": 10})
    assert too_big.value.data["reason"] == "too_large"

    # Outside the droidwire folder the standard profile refuses, pushing and pulling alike.
    other = await _upload(rpc, serial, b"hi")
    with pytest.raises(RpcError) as outside:
        await rpc("files.push", {"serial": serial, "stage": other, "path": "/sdcard/x"})
    assert outside.value.data["rule"] == "path_outside_workspace"
    with pytest.raises(RpcError):
        await rpc("files.pull", {"serial": serial, "path": "/data/system/x", "max_bytes": 10})

    await rpc("files.remove", {"serial": serial, "path": FOLDER, "recursive": True})
    with pytest.raises(RpcError) as gone:
        await rpc("files.pull", {"serial": serial, "path": f"{FOLDER}/a.bin", "max_bytes": 10})
    assert gone.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(RpcError) as root:
        await rpc("files.remove", {"serial": serial, "path": "/data/local/tmp", "recursive": True})
    assert root.value.code is ErrorCode.FORBIDDEN


async def test_apps_learned_from_the_device(adb: AdbDevices, sim: ConnectedSim) -> None:
    rpc, toolkit = _rpc(adb)
    serial = sim.address
    stage = await _upload(rpc, serial, APK)
    installed = await rpc("apps.install", {"serial": serial, "stage": stage, "temporary": True})
    assert installed == {"package": "com.example.borrowed", "replaced": False}
    apps = (await rpc("apps.list", {"serial": serial}))["apps"]
    assert {"package": "com.example.borrowed", "managed": True} in apps

    await rpc("apps.launch", {"serial": serial, "package": "com.example.borrowed"})
    assert sim.call(lambda: "com.example.borrowed" in sim.device.processes)
    await rpc("apps.stop", {"serial": serial, "package": "com.example.borrowed"})
    await rpc("apps.clear", {"serial": serial, "package": "com.example.borrowed"})

    # A temporary install never replaces what is already there.
    again = await _upload(rpc, serial, APK)
    with pytest.raises(RpcError) as exists:
        await rpc("apps.install", {"serial": serial, "stage": again, "temporary": True})
    assert exists.value.code is ErrorCode.CONFLICT

    # Packages not installed through droidwire are out of reach (standard profile).
    with pytest.raises(RpcError) as foreign:
        await rpc("apps.uninstall", {"serial": serial, "package": "com.android.chrome"})
    assert foreign.value.data["rule"] == "package_scope"

    # The bridge stopping removes temporary installs.
    assert any("com.example.borrowed" in r for r in await rpc.cleanup())
    apps = (await rpc("apps.list", {"serial": serial}))["apps"]
    assert "com.example.borrowed" not in {a["package"] for a in apps}
    toolkit.close()


async def test_instrument_only_lists_only_its_own(adb: AdbDevices, sim: ConnectedSim) -> None:
    rpc, _ = _rpc(adb, Profile.INSTRUMENT_ONLY)
    apps = (await rpc("apps.list", {"serial": sim.address}))["apps"]
    assert apps == []
    stage = await _upload(rpc, sim.address, b"abc")
    with pytest.raises(RpcError) as refused:
        await rpc("files.push", {"serial": sim.address, "stage": stage, "path": f"{FOLDER}/x"})
    assert refused.value.data["rule"] == "push_not_allowed"


async def test_health_from_the_simulated_phone(adb: AdbDevices, sim: ConnectedSim) -> None:
    rpc, _ = _rpc(adb)

    def heat() -> None:
        sim.device.battery_level, sim.device.battery_temperature = 12, 471

    sim.call(heat)
    health = await rpc("device.health", {"serial": sim.address})
    assert health["battery_level"] == 12
    assert health["battery_temperature_c"] == pytest.approx(47.1)
    assert health["charging"] is True
    assert 0 < health["storage_free_bytes"] <= health["storage_total_bytes"]
    assert health["cpu_load"] >= 0 and 0 < health["memory_used_ratio"] < 1


def test_parse_health_tolerates_missing_parts() -> None:
    assert parse_health("", "", "") == {}
    got = parse_health("  level: 50\n  temperature: abc\n  AC powered: false\n", "garbage", "x")
    assert got == {"battery_level": 50, "charging": False}
