"""The perf stream (issue 19): ``WebSocket /v1/devices/{device}/perf/stream`` sends CPU,
memory, FPS (``dumpsys gfxinfo``), battery and focus changes every ``interval_s``, through the
real controller, a bridge session, the real adb server and the simulated demo app."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from controller.perf import parse_cpuinfo, parse_gfxinfo, parse_meminfo
from controller.services import services_of
from tests.adb_support import ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.agent.test_rest import controller, path  # noqa: F401 - the fixture
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import InLoopController

pytestmark = pytest.mark.adb

WAIT_S = 30.0 * TIME_SCALE


async def _next(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    return message


async def test_samples_carry_cpu_memory_fps_battery_and_focus(
    controller: InLoopController, sim: ConnectedSim  # noqa: F811
) -> None:
    url = f"{controller.ws_url}/v1/devices/{sim.address}/perf/stream?interval_s=1"
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S) as ws:
        first, second = await _next(ws), await _next(ws)
        tapped = await controller.http.post(path(sim, "actions"),
                                            json={"action": "tap", "text": "Settings"})
        assert tapped.status_code == 200, tapped.text
        later = [await _next(ws) for _ in range(2)]
    for sample in (first, second):
        assert sample["package"] == "com.droidwire.demo"
        assert sample["activity"] == "MainActivity"
        assert sample["cpu_pct"] > 0 and sample["memory_kb"] > 0
        assert sample["janky_pct"] == 2.5 and isinstance(sample["battery"], int)
    assert first["fps"] is None  # FPS needs two readings
    assert second["fps"] is not None and second["fps"] >= 0
    assert first["focus_changed"] is False
    settled = [s for s in later if s["activity"] == "SettingsActivity"]
    assert settled and settled[0]["focus_changed"] is True
    # The stream is audited once, when it opens: its reads (four a sample, every second at
    # most, for as long as it runs) would otherwise grow the audit log without bound.
    actions = [e.action for e in await services_of(controller.app).audit.recent(limit=500)]
    assert actions.count("perf.stream") == 1, actions
    assert not [a for a in actions if a.startswith("perf.device.")], actions


async def test_an_interval_under_a_second_is_refused(
    controller: InLoopController, sim: ConnectedSim  # noqa: F811
) -> None:
    url = f"{controller.ws_url}/v1/devices/{sim.address}/perf/stream?interval_s=0.01"
    with pytest.raises(Exception):  # noqa: B017 - refused at the handshake
        async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S):
            pass


def test_the_reports_are_parsed() -> None:
    assert parse_gfxinfo("Total frames rendered: 4410\nJanky frames: 35 (0.79%)\n") == (
        4410, 0.79)
    assert parse_meminfo("** MEMINFO in pid 1 [a] **\n        TOTAL     51234    25617\n") == 51234
    assert parse_meminfo("TOTAL PSS:    98765            TOTAL RSS:   123456\n") == 98765
    cpu = ("CPU usage from 5012ms to 11ms ago:\n  48% 4321/com.example: 40% user + 8% kernel\n"
           "  2.5% 4400/com.example:sync: 2% user + 0.5% kernel\n"
           "  30% 1000/system_server: 20% user + 10% kernel\n")
    assert parse_cpuinfo(cpu, "com.example") == 50.5
    assert parse_cpuinfo(cpu, "com.other") is None


async def test_perf_streams_are_bounded_per_user(
    controller: InLoopController, sim: ConnectedSim  # noqa: F811
) -> None:
    controller.hub.streams_per_user = 1
    url = f"{controller.ws_url}/v1/devices/{sim.address}/perf/stream?interval_s=1"
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S) as ws:
        await _next(ws)
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, additional_headers=bearer(ADMIN_TOKEN),
                               open_timeout=WAIT_S):
                pass
        assert refused.value.response.status_code == 429
    # The slot is free again once the first stream ended.
    async with asyncio.timeout(WAIT_S):
        while True:
            try:
                async with connect(url, additional_headers=bearer(ADMIN_TOKEN),
                                   open_timeout=WAIT_S) as again:
                    assert (await _next(again))["package"] == "com.droidwire.demo"
                    break
            except InvalidStatus:  # the server may not have seen the first close yet
                await asyncio.sleep(0.05)
