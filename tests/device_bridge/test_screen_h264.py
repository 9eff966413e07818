"""The simulated phone's ``screenrecord --output-format=h264 -`` through the real adb server,
cut into access units by the bridge's parser (device_bridge/screen.py), decoded by FFmpeg's
H.264 decoder: the format a phone sends, key frames first and repeated, and a tap shows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.screen import AnnexB
from device_bridge.sim.ui_demo import launch_demo
from tests.adb_support import TIME_SCALE, AdbServer, ConnectedSim

pytestmark = pytest.mark.adb
av = pytest.importorskip("av")


@pytest.fixture
async def devices(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    adb = AdbDevices(port=adb_server.port, call_timeout_s=20 * TIME_SCALE)
    try:
        yield adb
    finally:
        await adb.aclose()


async def _units(devices: AdbDevices, serial: str, count: int) -> list[tuple[bytes, bool]]:
    sock = await devices.open_socket(
        serial, "exec:screenrecord --output-format=h264 --size=180x400 -", what="screenrecord")
    parser = AnnexB()
    units: list[tuple[bytes, bool]] = []
    try:
        async with asyncio.timeout(30 * TIME_SCALE):
            while len(units) < count:
                data = await asyncio.to_thread(sock.sock.recv, 65536)
                assert data, "screenrecord ended early"
                units += parser.feed(data)
    finally:
        sock.close()
    return units


async def test_screenrecord_streams_h264_a_decoder_reads(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    sim_device.sim.call(lambda: launch_demo(sim_device.device))
    units = await _units(devices, sim_device.address, 7)
    assert units[0][1] is True  # the first access unit is a key frame
    assert sum(key for _, key in units) >= 2  # and they repeat (one a second)
    assert all(b"\x00\x00\x01\x67" in u or b"\x00\x00\x00\x01\x67" in u
               for u, key in units if key)  # each key frame carries its SPS
    decoder = av.CodecContext.create("h264", "r")
    frames = []
    for unit, _ in units:
        frames += decoder.decode(av.Packet(unit))
    assert frames and (frames[0].width, frames[0].height) == (180, 400)


def test_annexb_cuts_access_units_at_new_pictures() -> None:
    sps, pps = b"\x00\x00\x00\x01\x67\x42", b"\x00\x00\x00\x01\x68\xce"
    idr = b"\x00\x00\x01\x65\x88\x01"  # first_mb_in_slice = 0 (its first bit set)
    second_slice = b"\x00\x00\x01\x65\x40\x02"  # the same picture's next slice
    p1 = b"\x00\x00\x01\x41\x9a\x03"
    parser = AnnexB()
    out = parser.feed(sps + pps + idr + second_slice + p1 + sps)
    assert out == [(sps + pps + idr + second_slice, True)]
    assert parser.finish() == [(p1, False)]
