"""The logcat ring buffers and output formats."""

from __future__ import annotations

import re

from device_bridge.sim.device import SimDevice
from device_bridge.sim.logbuf import LogBuffer, format_entry
from tests.device_bridge.sim.helpers import new_device, sh

THREADTIME = re.compile(
    r"^(\d\d-\d\d) (\d\d:\d\d:\d\d\.\d{3})\s+(\d+)\s+(\d+) ([VDIWEF]) (.*?)\s*: (.*)$")


def test_ring_keeps_at_least_its_capacity_and_drops_the_oldest():
    buf = LogBuffer(capacity=256 * 1024)
    for i in range(20_000):
        buf.append("I", "Tag", f"message number {i:06d}", pid=1, tid=1, ts=1.0)
    kept = buf.entries(["main"])
    assert kept[-1].message == "message number 019999"
    assert 256 * 1024 - 100 <= sum(e.size for e in kept) <= 256 * 1024
    assert [e.seq for e in kept] == sorted(e.seq for e in kept)
    assert kept[0].message != "message number 000000"


def test_formats_match_logcat():
    buf = LogBuffer()
    buf.append("W", "Boot", "short tag\nsecond line", pid=1000, tid=1001, ts=86400 * 31.5)
    first, second = buf.entries(["main"])
    line = format_entry(first, "threadtime")
    assert line == "02-01 12:00:00.000  1000  1001 W Boot    : short tag\n"
    assert THREADTIME.match(line.rstrip("\n"))
    assert format_entry(second, "threadtime").endswith("W Boot    : second line\n")
    assert format_entry(first, "time") == "02-01 12:00:00.000 W/Boot    ( 1000): short tag\n"
    assert format_entry(first, "brief") == "W/Boot    ( 1000): short tag\n"


async def test_logcat_dump_clear_tail_buffers_and_filters():
    dev = new_device()
    for i in range(5):
        dev.log("I", "Mine", f"m{i}", pid=4242, tid=4242)
    dev.log("E", "AndroidRuntime", "FATAL EXCEPTION: main", pid=4242, tid=4242)
    dump = (await sh(dev, "logcat -d")).out.splitlines()
    assert dump[0] == "--------- beginning of main"
    assert "--------- beginning of crash" in dump
    assert all(THREADTIME.match(ln) for ln in dump if not ln.startswith("---"))
    assert (await sh(dev, "logcat -d -s Mine:I")).out.count("Mine") == 5
    tail = (await sh(dev, "logcat -t 2 -v brief Mine:V *:S")).out.splitlines()
    assert tail[-2:] == ["I/Mine    ( 4242): m3", "I/Mine    ( 4242): m4"]
    assert "FATAL" in (await sh(dev, "logcat -d -b crash")).out
    assert "m0" not in (await sh(dev, "logcat -d -b crash")).out
    assert (await sh(dev, "logcat -d --pid=4242 -v time")).out.count("( 4242)") == 6
    assert (await sh(dev, "logcat -c")).code == 0
    after = (await sh(dev, "logcat -d Mine:V *:S")).out
    assert after == ""
    assert (await sh(dev, "logcat --bogus")).code == 1
    assert "ring buffer is 256 KiB" in (await sh(dev, "logcat -g")).out


async def test_background_noise_is_low_and_plausible():
    dev = new_device(noise_interval=0.01, seed=3)
    async with dev:
        await dev.logbuf.wait_after(dev.logbuf.last_seq + 20)
    noise = [e for e in dev.logbuf.entries() if e.tag != "SimShell"]
    assert len({e.tag for e in noise}) >= 4
    assert all(THREADTIME.match(format_entry(e).rstrip("\n")) for e in noise)
    assert SimDevice(noise_interval=None).noise_interval is None  # and the default is ~1/s:
    assert SimDevice().noise_interval == 1.0
