"""Network faults between a real bridge and a real controller, through tests/faults/netem.py.

A real controller (uvicorn, on this loop) and a real :class:`device_bridge.bridge.Bridge`
(in-process, its link dialling through the fault proxy) serve a simulated device behind the
real adb server. Fault after fault — cut, blackhole, half-open, stall, delay, bandwidth
limit — lands while shell RPCs are in flight and a logcat stream is open. Figures:

* recovery: how many disconnecting faults ended with the bridge back (open, welcomed), and
  the median / p99 time from the fault to that moment (keepalive faults take the ping
  interval + timeout to notice: they are reported apart from cuts);
* lost results (a call that did not get its right answer) and doubled results (a command the
  device ran twice, from its SimShell log): both must be 0;
* logcat lines: duplicates must be 0, and no line may vanish without a ``dropped`` /
  ``lost_batches`` marker saying so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import InLoopController, in_loop_controller
from tests.faults.figures import record, record_times, size
from tests.faults.netem import FaultProxy
from tests.faults.timing import SETTINGS, WAIT_S, wait_until

pytestmark = pytest.mark.adb

AREA = "network faults (bridge <-> controller)"
#: The order faults come in; every profile sees each at least once.
MODES = ["cut", "blackhole", "cut", "half_open", "cut", "delay", "cut", "stall", "cut",
         "bandwidth"]
DISCONNECTING = {"cut", "blackhole", "half_open", "stall"}
CALLS_PER_FAULT = 4
LINES_PER_FAULT = 20


class Stream:
    """A logcat stream consumer on the controller's REST WebSocket, collecting marked lines."""

    def __init__(self, url: str, tag: str) -> None:
        self.url = url
        self.tag = tag
        self.lines: list[str] = []
        self.dropped = 0
        self.lost_batches = 0
        self.task: asyncio.Task[None] | None = None
        self.opened = asyncio.Event()

    async def run(self) -> None:
        async with connect(self.url, additional_headers=bearer(ADMIN_TOKEN),
                           open_timeout=WAIT_S, max_size=None) as ws:
            self.opened.set()
            async for message in ws:
                chunk = json.loads(message)
                self.dropped += chunk.get("dropped", 0)
                self.lost_batches += chunk.get("lost_batches", 0)
                self.lines += [line.rsplit(" ", 1)[1] for line in chunk.get("lines", [])
                               if self.tag in line]
                if chunk.get("eof"):
                    return


@dataclasses.dataclass
class Rig:
    controller: InLoopController
    proxy: FaultProxy
    bridge: Bridge
    sim: ConnectedSim

    def entry(self) -> Any:
        [entry] = self.controller.hub.entries()
        return entry

    def ready(self) -> bool:
        entries = self.controller.hub.entries()
        return bool(entries) and entries[0].is_open and self.sim.address in entries[0].devices

    async def shell(self, *argv: str) -> Any:
        return await self.controller.http.post(
            f"/v1/devices/{self.sim.address}/shell", json={"argv": list(argv)},
            timeout=WAIT_S * 2,
        )

    def shell_log(self) -> list[str]:
        text: str = self.sim.call(lambda: self.sim.device.logbuf.text())
        return [line for line in text.splitlines() if " SimShell" in line]


@contextlib.asynccontextmanager
async def rig(tmp_path: Path, adb_server: AdbServer, sim: ConnectedSim) -> AsyncIterator[Rig]:
    async with in_loop_controller(tmp_path, SETTINGS) as controller:
        token = await controller.bridge_token("lab")
        async with FaultProxy(controller.port) as proxy:
            host = HostConfig.from_mapping({
                "controller": {"url": [proxy.url]},
                "adb": {"server_port": adb_server.port, "start_server": False},
                "policy": {"profile": "full"},
            })
            adb = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE,
                             flush_s=0.02)
            try:
                async with Bridge(host, token=token, devices=adb, build=None,
                                  settings=SETTINGS) as bridge:
                    await bridge.wait_open(WAIT_S)
                    r = Rig(controller, proxy, bridge, sim)
                    await wait_until(r.ready, "bridge and device ready")
                    yield r
            finally:
                await adb.aclose()


async def _fault(r: Rig, mode: str, index: int, nonce: str) -> tuple[list[tuple[str, Any]],
                                                                   float | None]:
    """One fault while calls are in flight: (calls and their responses, recovery seconds)."""
    entry = r.entry()
    before = entry.connections
    calls: list[tuple[str, asyncio.Task[Any]]] = []
    for k in range(CALLS_PER_FAULT):
        if k % 2:
            word = f"0.03{index:05d}{k}"  # a sleep of ~30 ms, unique in the device's log
            calls.append((f"sleep {word}", asyncio.create_task(r.shell("sleep", word))))
        else:
            word = f"{nonce}-{index}-{k}"
            calls.append((f"echo {word}", asyncio.create_task(r.shell("echo", word))))
    await wait_until(lambda: entry.session.pending_count > 0, "calls in flight")
    started = time.monotonic()
    recovered: float | None = None
    if mode in DISCONNECTING:
        getattr(r.proxy, mode)()
        await wait_until(lambda: entry.connections > before and r.ready(), f"recovery ({mode})")
        recovered = time.monotonic() - started
    elif mode == "delay":
        r.proxy.delay_s = 0.05
    elif mode == "bandwidth":
        r.proxy.rate_bps = 64 * 1024
    results: list[tuple[str, Any]] = []
    for command, task in calls:
        try:
            results.append((command, await asyncio.wait_for(task, WAIT_S * 2)))
        except Exception as exc:  # counted as a lost result, with its reason
            results.append((command, exc))
    r.proxy.delay_s = 0.0
    r.proxy.rate_bps = None
    return results, recovered


@pytest.mark.timeout(size(1800, 120))
async def test_faults_during_rpcs_and_a_logcat_stream(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    faults = size(400, 10)  # half of them cuts: 200 in the full profile
    nonce = uuid.uuid4().hex[:8]
    tag = f"FaultLine{nonce}"
    recovery: dict[str, list[float]] = {}
    lost: list[str] = []
    sent_lines = 0
    async with rig(tmp_path, adb_server, sim_device) as r:
        stream = Stream(f"{r.controller.ws_url}/v1/devices/{sim_device.address}/logcat/stream",
                        tag)
        stream.task = asyncio.create_task(stream.run())
        await asyncio.wait_for(stream.opened.wait(), WAIT_S)
        await wait_until(lambda: any(e.streams for e in r.controller.hub.entries()), "stream")
        all_calls: list[str] = []
        seen_shell: set[str] = set()  # the device's log is a ring: read it after every fault
        for i in range(faults):
            mode = MODES[i % len(MODES)]
            results, took = await _fault(r, mode, i, nonce)
            if took is not None:
                recovery.setdefault(mode, []).append(took)
            for command, response in results:
                all_calls.append(command)
                word = command.split(" ", 1)[1]
                ok = (not isinstance(response, BaseException) and response.status_code == 200
                      and response.json()["exit_code"] == 0
                      and (command.startswith("sleep") or response.json()["stdout"] == f"{word}\n"))
                if not ok:
                    detail = response if isinstance(response, BaseException) else response.text
                    lost.append(f"fault {i} ({mode}): {command}: {str(detail)[:200]}")
            start = sent_lines
            await asyncio.to_thread(sim_device.run, lambda s=start: sim_device.device.log_burst(
                LINES_PER_FAULT, tag=tag, message=f"line {s}+{{i}}"))
            sent_lines += LINES_PER_FAULT
            seen_shell.update(r.shell_log())
        # Every line logged reaches the consumer (or is announced as lost).
        expected = [f"{s}+{i}" for s in range(0, sent_lines, LINES_PER_FAULT)
                    for i in range(LINES_PER_FAULT)]
        with contextlib.suppress(AssertionError):
            await wait_until(lambda: len(set(stream.lines)) >= len(expected)
                             or stream.dropped or stream.lost_batches, "logcat lines",
                             limit_s=10 * TIME_SCALE)
        stream.task.cancel()
        with contextlib.suppress(BaseException):
            await stream.task
        seen_shell.update(r.shell_log())
    ran = collections.Counter(line.split("SimShell: ", 1)[-1].strip() for line in seen_shell)
    doubled = [c for c in all_calls if ran[c] > 1]
    never_ran = [c for c in all_calls if ran[c] == 0]
    got = stream.lines
    duplicates = len(got) - len(set(got))
    missing = len(set(expected) - set(got))
    silent = missing if not (stream.dropped or stream.lost_batches) else 0

    disconnecting = [t for mode in DISCONNECTING for t in recovery.get(mode, [])]
    n_disc = sum(1 for i in range(faults) if MODES[i % len(MODES)] in DISCONNECTING)
    counts = collections.Counter(MODES[i % len(MODES)] for i in range(faults))
    record(AREA, "faults injected", faults)
    record(AREA, "  by kind", ", ".join(f"{m} {n}" for m, n in counts.items()))
    record(AREA, "  disconnecting faults recovered", f"{len(disconnecting)}/{n_disc}")
    record(AREA, "  recovery rate", round(100.0 * len(disconnecting) / max(1, n_disc), 1),
           unit="%")
    record_times(AREA, "  recovery after a cut", recovery.get("cut", []))
    record_times(AREA, "  recovery after blackhole/half-open/stall (keepalive)",
                 [t for m in ("blackhole", "half_open", "stall") for t in recovery.get(m, [])])
    record(AREA, "RPCs in flight across the faults", len(all_calls))
    record(AREA, "  lost results", len(lost), must_be_zero=True)
    record(AREA, "  doubled results (ran twice on the device)", len(doubled), must_be_zero=True)
    record(AREA, "logcat lines logged during the run", len(expected))
    record(AREA, "  received", len(set(got)))
    record(AREA, "  announced as dropped (lines / lost batches)",
           f"{stream.dropped} / {stream.lost_batches}")
    record(AREA, "  lost without a marker", silent, must_be_zero=True)
    record(AREA, "  duplicated", duplicates, must_be_zero=True)
    assert not lost, lost[:5]
    assert not doubled, doubled[:5]
    assert not never_ran, never_ran[:5]
    assert len(disconnecting) == n_disc
    assert duplicates == 0 and silent == 0, (duplicates, missing, stream.dropped)
