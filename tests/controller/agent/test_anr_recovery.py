"""An ANR of the app under test during an instruction (issue 19, L2): with ``anr_recovery``
(opt-in per call) the app is force-stopped and its screen and ANR lines are captured in the
trace; without it nothing is done. Through the bridge's dispatcher, the real adb server and
the simulated demo app (the ANR report is written into the device's log as a step runs)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.agent import AgentRunner, RulePlanner, RunnerSettings, TraceStore
from controller.agent.runner import Caller
from device_bridge.rpc import Dispatcher
from device_bridge.sim.ui_demo import DEMO_PACKAGE
from protocol.methods import Method
from tests.adb_support import ConnectedSim
from tests.controller.agent.test_nl2sh import caller

pytestmark = pytest.mark.adb


def anr_on_first_tap(bridge: Dispatcher, sim: ConnectedSim) -> Caller:
    call = caller(bridge, sim)
    fired = False

    async def wrapped(method: Method[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
        nonlocal fired
        out = await call(method, params)
        if method.name == "ui.tap" and not fired:
            fired = True
            sim.call(lambda: sim.device._sys(
                "E", "ActivityManager",
                f"ANR in {DEMO_PACKAGE} ({DEMO_PACKAGE}/.SettingsActivity)"))
        return out

    return wrapped


async def test_an_anr_force_stops_the_app_and_is_captured(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
    runner = AgentRunner(RulePlanner(), settings=RunnerSettings(anr_recovery=True))
    out = await runner.act(anr_on_first_tap(bridge, sim), "open Settings", trace)
    assert out["ok"] is False and "stopped responding (ANR): force-stopped" in out["message"]
    [anr] = [s for s in out["steps"] if s["kind"] == "anr"]
    assert anr["status"] == "recovered" and anr["package"] == DEMO_PACKAGE
    assert any(f"ANR in {DEMO_PACKAGE}" in line for line in anr["lines"])
    kept = await trace.frames.get(trace.id, anr["frames"]["screenshot"].rsplit("/", 1)[1])
    assert kept is not None and kept.png.startswith(b"\x89PNG")
    assert sim.call(lambda: DEMO_PACKAGE not in sim.device.processes)


async def test_without_the_opt_in_an_anr_changes_nothing(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    trace = await TraceStore(None).open(user_id=None, device=sim.address, tool="act")
    out = await AgentRunner(RulePlanner()).act(anr_on_first_tap(bridge, sim), "open Settings",
                                               trace)
    assert out["ok"] is True, out
    assert not [s for s in out["steps"] if s["kind"] == "anr"]
    assert sim.call(lambda: DEMO_PACKAGE in sim.device.processes)
