"""The whole bridge runner (device_bridge.bridge) end to end: a scripted controller peer on a
loopback WebSocket ↔ Bridge ↔ the real adb server ↔ simulated devices."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import ControllerConfig, HostConfig
from device_bridge.policy import PolicyConfig
from protocol import DEVICES_CHANNEL, Evt, parse_log_batch
from tests.adb_support import AdbServer, ConnectedSim, connected_sim
from tests.conftest import TIME_SCALE
from tests.device_bridge.test_connection import TOKEN, WAIT, Peer, PeerConn, Script, fast_settings

pytestmark = pytest.mark.adb


@pytest.fixture
async def devices(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE)
    try:
        yield layer
    finally:
        await layer.aclose()


def make_bridge(url: str, devices: AdbDevices, **policy: Any) -> Bridge:
    config = HostConfig(
        controller=ControllerConfig(urls=(url,), token=TOKEN),
        policy=PolicyConfig(**policy),
    )
    settings = dataclasses.replace(fast_settings(), logcat_flush_s=0.025)
    return Bridge(config, settings=settings, devices=devices, build=None, software="9.9-test")


async def next_evt(conn: PeerConn, ch: str) -> Evt:
    while True:
        frame = await conn.recv_kind(Evt)
        if frame.channel == ch:
            return frame


async def test_bridge_announces_serves_and_streams(
    devices: AdbDevices, sim_device: ConnectedSim, adb_server: AdbServer
) -> None:
    serial = sim_device.address
    seen: dict[str, Any] = {}
    stop = asyncio.Event()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            hello = await conn.welcome()
            seen["hello"] = hello
            seen["shell"] = await conn.call(
                "device.shell", {"serial": serial, "argv": ["echo", "over", "the", "link"]}
            )
            seen["refused"] = await conn.call(
                "device.shell", {"serial": serial, "command": "rm -rf /"}
            )
            ch = (await conn.call("device.logcat.subscribe", {"serial": serial, "tail": 1})).result
            assert ch is not None
            channel = ch["channel"]
            count = 300
            await asyncio.to_thread(
                sim_device.run, lambda: sim_device.device.log_burst(count, tag="Burst")
            )
            seqs: list[int] = []
            lines: list[str] = []
            while len(lines) < count:
                evt = await next_evt(conn, channel)
                seqs.append(evt.seq)
                lines += [ln for ln in parse_log_batch(evt.data).lines if " Burst" in ln]
            seen["seqs"], seen["lines"] = seqs, lines
            # a device appears and goes: the inventory is announced each time
            cm = connected_sim(adb_server)
            extra = await asyncio.to_thread(cm.__enter__)
            try:
                while True:
                    evt = await next_evt(conn, DEVICES_CHANNEL)
                    if extra.address in {d["serial"] for d in evt.data["devices"]}:
                        seen["appeared"] = evt.data["devices"]
                        break
            finally:
                await asyncio.to_thread(cm.__exit__, None, None, None)
            while True:
                evt = await next_evt(conn, DEVICES_CHANNEL)
                if extra.address not in {d["serial"] for d in evt.data["devices"]}:
                    break
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        bridge = make_bridge(peer.url, devices)
        async with asyncio.timeout(WAIT * 3):
            await bridge.run(stop)
    assert not peer.errors
    hello = seen["hello"]
    listed = {d.serial: d for d in hello.devices}
    assert listed[serial].state == "device"
    assert listed[serial].model == sim_device.device.profile.model
    assert hello.caps.devices and "device.shell" in hello.caps.methods
    assert "workspace.compile" not in hello.caps.methods  # no build service: not claimed
    assert seen["shell"].unwrap()["stdout"] == "over the link\n"
    assert seen["refused"].error.code == "forbidden" and seen["refused"].error.data["rule"]
    assert seen["seqs"] == list(range(len(seen["seqs"])))  # per-channel seq from 0, no gap
    assert [ln.rsplit("line ", 1)[1] for ln in seen["lines"]] == [str(i) for i in range(300)]
    assert any(d["serial"] == serial for d in seen["appeared"])
    assert bridge.dispatcher.subscriptions == []  # ended with the link


async def test_hidden_devices_are_never_announced(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    seen: dict[str, Any] = {}
    stop = asyncio.Event()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            seen["hello"] = await conn.welcome()
            seen["list"] = await conn.call("devices.list")
            seen["shell"] = await conn.call(
                "device.shell", {"serial": sim_device.address, "argv": ["echo"]}
            )
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        bridge = make_bridge(peer.url, devices, hide=frozenset({sim_device.address}))
        async with asyncio.timeout(WAIT * 3):
            await bridge.run(stop)
    assert sim_device.address not in {d.serial for d in seen["hello"].devices}
    assert sim_device.address not in {d["serial"] for d in seen["list"].unwrap()["devices"]}
    assert seen["shell"].error.code == "not_found"


async def test_bridge_as_context_manager_waits_open(devices: AdbDevices) -> None:
    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        async with make_bridge(peer.url, devices) as bridge:
            await bridge.wait_open(WAIT)
            assert bridge.link is not None and bridge.link.is_open
        assert not bridge.opened.is_set()


async def test_cli_wrong_token_exits_non_zero_after_one_attempt(adb_server: AdbServer) -> None:
    async with Peer(lambda n: None, refuse=lambda n: 401) as peer:  # type: ignore[arg-type,return-value]
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(adb_server.port)}
        env.pop("DROIDWIRE_BRIDGE_TOKEN", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from droidwire import main; main()",
            "bridge",
            "--controller",
            peer.url,
            "--token",
            "wrong-token",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(WAIT * 3):
            _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "unauthorized" in err.decode()
    assert peer.attempts == 1


async def test_a_change_between_hello_and_welcome_is_announced_on_open() -> None:
    from protocol import DeviceInfo

    seen: dict[str, Any] = {}
    stop = asyncio.Event()
    holder: dict[str, Bridge] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            seen["hello"] = await conn.hello()
            # the device watcher finishes a change while the controller is still answering
            holder["bridge"]._devices["late-1"] = DeviceInfo(serial="late-1", state="device")
            await conn.welcome()
            seen["evt"] = await next_evt(conn, DEVICES_CHANNEL)
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        config = HostConfig(controller=ControllerConfig(urls=(peer.url,), token=TOKEN))
        bridge = Bridge(config, settings=fast_settings(), devices=None, build=None)
        holder["bridge"] = bridge
        async with asyncio.timeout(WAIT * 3):
            await bridge.run(stop)
    assert seen["hello"].devices == []
    assert [d["serial"] for d in seen["evt"].data["devices"]] == ["late-1"]
