"""The device layer end to end: AdbDevices → the real adb server → the simulated device.

Fixtures (``adb_server``, ``sim_device``) come from ``tests/adb_support.py``: a private adb
server on a free port and a connected ``SimDevice`` in a thread of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image

from device_bridge.adb import ABSENT, AdbDevices, NetworkKeeper
from device_bridge.sim.apk import SimPackage, build_apk
from protocol.errors import ErrorCode, RpcError
from tests.adb_support import TIME_SCALE, AdbServer, ConnectedSim

pytestmark = pytest.mark.adb

WAIT_S = 20.0 * TIME_SCALE
W = "/data/local/tmp/droidwire"
BURST = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} +\d+ +\d+ I Burst\s*: (.*)$")


@pytest.fixture
async def devices(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE)
    try:
        yield layer
    finally:
        await layer.aclose()


def profile(sim: ConnectedSim) -> Any:
    return sim.device.profile


async def test_the_port_comes_from_the_environment(adb_server: AdbServer) -> None:
    layer = AdbDevices()
    try:
        assert layer.port == adb_server.port == int(os.environ["ANDROID_ADB_SERVER_PORT"])
        assert await layer.server_version() >= 39
    finally:
        await layer.aclose()


async def test_list_and_state(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    listed = {d.serial: d.state for d in await devices.devices()}
    assert listed[sim_device.address] == "device"
    assert await devices.state(sim_device.address) == "device"
    with pytest.raises(RpcError) as info:
        await devices.state("127.0.0.1:1")
    assert info.value.code is ErrorCode.NOT_FOUND


async def test_shell_v2_exit_codes_and_streams(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    assert "shell_v2" in await devices.features(serial)
    ok = await devices.shell(serial, ["echo", "hello world"])
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "hello world\n", "")
    assert (await devices.shell(serial, ["false"])).exit_code == 1
    missing = await devices.shell(serial, ["no-such-tool", "x"])
    assert missing.exit_code == 127
    assert "no-such-tool" in missing.stderr and missing.stdout == ""
    # argv is quoted for the device shell: a metacharacter in an argument stays an argument
    quoted = await devices.shell(serial, ["echo", "a;b", "$HOME"])
    assert quoted.stdout == "a;b $HOME\n"


async def test_shell_v1_fallback_keeps_the_exit_code(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    devices._features[serial] = frozenset()  # a device without shell_v2 (Android < 7)
    ok = await devices.shell(serial, ["echo", "hi"])
    assert (ok.exit_code, ok.stdout) == (0, "hi\n")
    assert (await devices.shell(serial, ["false"])).exit_code == 1
    assert (await devices.shell(serial, ["no-such-tool"])).exit_code == 127


async def test_shell_output_cap_truncates(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    result = await devices.shell(sim_device.address, ["echo", "x" * 1000], max_output_bytes=100)
    assert result.truncated and len(result.stdout) == 100 and result.exit_code == 0


async def test_shell_timeout_then_the_device_still_answers(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    with pytest.raises(RpcError) as info:
        await devices.shell(sim_device.address, ["sleep", "30"], timeout_s=0.3)
    assert info.value.code is ErrorCode.TIMEOUT
    assert (await devices.shell(sim_device.address, ["echo", "after"])).stdout == "after\n"


async def test_unknown_device(devices: AdbDevices, adb_server: AdbServer) -> None:
    with pytest.raises(RpcError) as info:
        await devices.shell("127.0.0.1:1", ["echo"])
    assert info.value.code is ErrorCode.NOT_FOUND


async def test_info(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    p = profile(sim_device)
    facts = await devices.info(sim_device.address)
    assert facts.model == p.model
    assert facts.manufacturer == p.manufacturer
    assert facts.release == p.release
    assert facts.sdk == p.sdk
    assert facts.abi == p.abi
    assert facts.screen == (p.width, p.height)
    assert facts.battery is not None and 0 <= facts.battery <= 100
    wire = facts.to_device_info()
    assert wire.serial == sim_device.address and wire.sdk == p.sdk


async def test_logcat_follow_ten_thousand_lines_in_order(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    await devices.logcat_clear(serial)
    stream = await devices.logcat_follow(serial, lossless=True)
    burst = asyncio.create_task(
        asyncio.to_thread(sim_device.run, lambda: sim_device.device.log_burst(10_000, tag="Burst"))
    )
    got: list[str] = []
    sizes: list[int] = []
    dropped = 0
    try:
        async with asyncio.timeout(WAIT_S * 3):
            async for batch in stream:
                sizes.append(len(batch.lines))
                dropped += batch.dropped
                got += [m[1] for line in batch.lines if (m := BURST.search(line))]
                assert not batch.eof, batch.reason
                if len(got) >= 10_000:
                    break
    finally:
        await stream.aclose()
        await burst
    assert dropped == 0
    assert max(sizes) <= devices.batch_lines
    assert got == [f"line {i}" for i in range(10_000)]


async def test_logcat_clear_and_dump(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    serial = sim_device.address
    await devices.logcat_clear(serial)
    sim_device.call(lambda: sim_device.device.log("W", "Probe", "needle 42", pid=4242, tid=4243))
    lines = await devices.logcat_dump(serial)
    # threadtime: "MM-DD hh:mm:ss.mmm  PID  TID P TAG     : message" (tag padded to 8)
    assert any(re.search(r" 4242  4243 W Probe\s*: needle 42$", line) for line in lines)
    # every command the device ran is in its log: the dump itself among them
    assert any("SimShell" in line and "logcat" in line for line in lines)
    tail = await devices.logcat_dump(serial, lines=1)
    assert len(tail) <= 2  # `-t 1` (some logcats print a "--------- beginning of" header)


async def test_push_pull_five_megabytes(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    serial = sim_device.address
    data = os.urandom(5 * 1024 * 1024)
    assert await devices.push(serial, f"{W}/big.bin", data) == len(data)
    back = await devices.pull(serial, f"{W}/big.bin")
    assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()
    listing = await devices.shell(serial, ["ls", W])
    assert "big.bin" in listing.stdout
    with pytest.raises(RpcError) as info:
        await devices.pull(serial, f"{W}/big.bin", max_bytes=1024)
    assert info.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(RpcError) as info:
        await devices.pull(serial, f"{W}/missing.bin")
    assert info.value.code is ErrorCode.NOT_FOUND


async def test_push_file_and_pull_file_stream_and_a_directory_is_refused(
    devices: AdbDevices, sim_device: ConnectedSim, tmp_path: Any
) -> None:
    serial = sim_device.address
    data = os.urandom(200_000)  # several sync DATA blocks
    assert await devices.push_file(serial, io.BytesIO(data), f"{W}/f.bin", mode=0o600) == len(data)
    local = tmp_path / "f.bin"
    assert await devices.pull_file(serial, f"{W}/f.bin", str(local), max_bytes=1 << 20) == len(data)
    assert local.read_bytes() == data
    # a directory at the target is an error, not a file written inside it under another name
    with pytest.raises(RpcError):
        await devices.push(serial, W, b"x")
    listing = await devices.shell(serial, ["ls", W])
    assert listing.stdout.split() == ["f.bin"]


async def test_install_uninstall(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    serial = sim_device.address
    apk = build_apk(SimPackage(package="com.example.droidwire", kind="app"))
    installed = await devices.install(serial, apk)
    assert (installed.package, installed.existed) == ("com.example.droidwire", False)
    listed = await devices.shell(serial, ["pm", "list", "packages"])
    assert "package:com.example.droidwire" in listed.stdout.splitlines()
    staged = await devices.shell(serial, ["ls", f"{W}/.install"])
    assert ".apk" not in staged.stdout  # the staged copy was removed
    # replace=False says -R: pm would otherwise replace the installed package anyway.
    with pytest.raises(RpcError) as kept:
        await devices.install(serial, apk, replace=False)
    assert kept.value.data is not None
    assert kept.value.data["reason"] == "INSTALL_FAILED_ALREADY_EXISTS", kept.value.data
    again = await devices.install(serial, apk)
    assert (again.package, again.existed) == ("com.example.droidwire", True)
    assert await devices.uninstall(serial, "com.example.droidwire")
    assert not await devices.uninstall(serial, "com.example.droidwire")


async def test_install_failure_names_the_reason(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    with pytest.raises(RpcError) as info:
        await devices.install(sim_device.address, b"not an apk")
    assert info.value.code is ErrorCode.BAD_REQUEST
    assert info.value.data is not None and info.value.data["reason"].startswith("INSTALL_")


async def test_instrument_without_instrumentation(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    seen: list[str] = []
    result = await devices.instrument(
        sim_device.address, "com.example.missing.test", on_lines=seen.extend
    )
    assert "Unable to find instrumentation info" in result.output
    assert "INSTRUMENTATION_STATUS_CODE: -1" in result.output
    assert seen and result.output.splitlines() == seen


async def test_screenshot_is_a_png_of_the_screen(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    p = profile(sim_device)
    png = await devices.screenshot(sim_device.address)
    image = Image.open(io.BytesIO(png))
    image.load()
    assert image.format == "PNG"
    assert image.size == (p.width, p.height)


async def test_offline_detection_and_reconnect(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    address = sim_device.address
    keeper = NetworkKeeper(devices, [address], offline_grace_s=0.2, retry_s=0.1, retry_cap_s=1.0)
    async with devices.watch() as watcher:
        await watcher.wait_for(address, "device", timeout_s=WAIT_S)
        keeper_task = asyncio.create_task(keeper.run())
        try:
            await asyncio.to_thread(sim_device.sim.stop_device)
            async with asyncio.timeout(WAIT_S):
                async for change in watcher:
                    if change.serial == address and change.state in ("offline", ABSENT):
                        break
            with pytest.raises(RpcError) as info:
                await devices.shell(address, ["echo", "hi"])
            assert info.value.code in (ErrorCode.DEVICE_OFFLINE, ErrorCode.NOT_FOUND)
            await asyncio.to_thread(sim_device.sim.start)
            await watcher.wait_for(address, "device", timeout_s=WAIT_S)
            # The keeper may be between a disconnect and its reconnect when the phone comes
            # back (adb lists it, then forgets it): with the keeper running, a command gets
            # through again.
            async with asyncio.timeout(WAIT_S):
                while True:
                    try:
                        back = await devices.shell(address, ["echo", "back"])
                        break
                    except RpcError as exc:
                        if exc.code not in (ErrorCode.DEVICE_OFFLINE, ErrorCode.NOT_FOUND):
                            raise
                        await asyncio.sleep(0.1)
        finally:
            keeper_task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await keeper_task
    assert back.stdout == "back\n"


async def test_keeper_cancelled_as_a_change_arrives_still_ends(
    devices: AdbDevices, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cancel() landing in the same loop tick as a device change must end the keeper.

    CI once hung here for two minutes: on Python 3.11 ``asyncio.wait_for`` returns the inner
    result when it completes alongside a cancellation, and the keeper's loop went on forever.
    Each round posts a change and cancels after ``ticks`` loop iterations, so one of them
    lands between the change being consumed and the keeper resuming.
    """
    from device_bridge.adb.tracker import DeviceWatcher

    made: list[DeviceWatcher] = []
    real_watch = devices.watch

    def watch(*, retry_s: float = 0.5) -> DeviceWatcher:
        made.append(real_watch(retry_s=retry_s))
        return made[-1]

    monkeypatch.setattr(devices, "watch", watch)
    for ticks in range(8):
        made.clear()
        keeper = NetworkKeeper(devices, [], retry_s=60.0)
        task = asyncio.create_task(keeper.run())
        async with asyncio.timeout(WAIT_S):
            while not (made and made[0].server_up):  # noqa: ASYNC110 - a thread's flag
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the first snapshot consumed: the keeper waits again
        made[0]._post({f"127.0.0.1:{ticks + 1}": "offline"})
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait({task}, timeout=5.0 * TIME_SCALE)  # does not cancel it again
        ended = task.done()
        if not ended:
            task.cancel()  # a second cancel gets through; do not leak the task
            await asyncio.wait({task})
        assert ended, f"the keeper went on after cancel() ({ticks} ticks after a change)"
        assert task.cancelled()


async def test_start_and_kill_a_server_on_a_private_port() -> None:
    from tests.adb_support import free_port

    layer = AdbDevices(port=free_port())
    try:
        await layer.start_server()
        assert await layer.devices() == []
        await layer.kill_server()
        with pytest.raises(RpcError) as info:
            await layer.devices()
        assert info.value.code is ErrorCode.UNAVAILABLE
    finally:
        await layer.aclose()


async def test_watcher_sees_a_device_come_and_go(
    devices: AdbDevices, adb_server: AdbServer
) -> None:
    from tests.adb_support import connected_sim

    async with devices.watch() as watcher:
        attached = connected_sim(adb_server)
        sim = await asyncio.to_thread(attached.__enter__)
        try:
            await watcher.wait_for(sim.address, "device", timeout_s=WAIT_S)
            assert watcher.devices[sim.address] == "device"
        finally:
            await asyncio.to_thread(attached.__exit__, None, None, None)
        await watcher.wait_for(sim.address, ABSENT, timeout_s=WAIT_S)
        waiter = asyncio.create_task(watcher.wait_for("never:1", "device", timeout_s=WAIT_S))
        await asyncio.sleep(0)
        await watcher.aclose()
        with pytest.raises(RpcError) as info:
            await waiter
        assert info.value.code is ErrorCode.UNAVAILABLE


async def test_aclose_ends_open_streams(adb_server: AdbServer, sim_device: ConnectedSim) -> None:
    layer = AdbDevices(port=adb_server.port)
    stream = await layer.logcat_follow(sim_device.address)
    await layer.aclose()
    async with asyncio.timeout(WAIT_S):
        batches = [batch async for batch in stream]
    assert batches[-1].eof and batches[-1].reason == "cancelled"
