"""The live screen and remote control on a real bridge, through the profile (issue 17,
docs/screen.md): ``instrument-only`` gets neither; under ``standard`` an input's argv passes
the allow-list (its metacharacter screen included) before anything reaches the device, taps
are mapped through the screen's real size, and every event goes down one persistent shell."""

from __future__ import annotations

import asyncio
from typing import Any

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import ControllerConfig, HostConfig
from device_bridge.policy import PolicyConfig
from protocol.envelope import Profile
from tests.adb_support import ConnectedSim
from tests.device_bridge.test_connection import TOKEN, WAIT, Peer, PeerConn, Script, fast_settings
from tests.device_bridge.test_rpc_bridge import devices  # the fixture

__all__ = ["devices"]


async def _serve(adb: AdbDevices, calls: list[tuple[str, dict[str, Any]]],
                 profiles: dict[str, Profile] | None = None, **policy: Any) -> list[Any]:
    answers: list[Any] = []
    stop = asyncio.Event()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            for method, params in calls:
                answers.append(await conn.call(method, params))
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        config = HostConfig(controller=ControllerConfig(urls=(peer.url,), token=TOKEN),
                            policy=PolicyConfig(devices=profiles or {}, **policy))
        bridge = Bridge(config, settings=fast_settings(), devices=adb, build=None,
                        software="9.9-test")
        async with asyncio.timeout(WAIT * 3):
            await bridge.run(stop)
    assert not peer.errors
    return answers


async def test_instrument_only_gets_no_screen_and_no_input(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    before = sim_device.sim.call(lambda: len(sim_device.device.input_log))
    screen, tap = await _serve(devices, [
        ("device.screen.subscribe", {"serial": serial, "codec": "jpeg"}),
        ("device.input", {"serial": serial, "action": "tap", "x": 0.5, "y": 0.5}),
    ], profiles={serial: Profile.INSTRUMENT_ONLY})
    assert screen.error.code == "forbidden" and tap.error.code == "forbidden"
    assert sim_device.sim.call(lambda: len(sim_device.device.input_log)) == before


async def test_inputs_are_checked_mapped_and_share_one_shell(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    before = sim_device.sim.call(lambda: len(sim_device.device.input_log))
    answers = await _serve(devices, [
        ("device.input", {"serial": serial, "action": "text", "text": "hi; reboot"}),
        ("device.input", {"serial": serial, "action": "tap", "x": 0.5, "y": 0.25}),
        ("device.input", {"serial": serial, "action": "swipe", "x": 0.5, "y": 0.75,
                          "x2": 0.5, "y2": 0.25, "duration_ms": 200}),
        ("device.input", {"serial": serial, "action": "key", "key": "back"}),
        ("device.input", {"serial": serial, "action": "tap", "x": 1.5, "y": 0.5}),
    ])
    refused, tap, swipe, back, outside = answers
    assert refused.error.code == "forbidden" and refused.error.data["rule"]
    assert tap.unwrap()["argv"] == ["input", "tap", "540", "600"]  # 1080x2400
    assert swipe.unwrap()["argv"] == ["input", "swipe", "540", "1800", "540", "600", "200"]
    assert back.unwrap() == {"ok": True, "exit_code": 0,
                             "argv": ["input", "keyevent", "KEYCODE_BACK"]}
    assert outside.error.code == "bad_request"
    events = sim_device.sim.call(lambda: list(sim_device.device.input_log))[before:]
    assert [kind for kind, _ in events] == ["tap", "swipe", "keyevent"]
    # One shell ran them all: the device logs each command line with its shell's pid.
    lines = [line for line in await devices.logcat_dump(serial, lines=500)
             if "SimShell" in line and "@dw-input" in line]
    assert len(lines) == 3 and len({line.split()[2] for line in lines}) == 1
