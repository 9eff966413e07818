"""Sharding (docs/sandbox.md, "Sharding"): a 4-class suite over 2 devices runs each class once,
retries a failed test on the other device, and merges one result and one JUnit file with
per-device detail. The executor on the in-process gateway over the bridge's real dispatcher,
two simulated devices behind the real adb server."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from controller.executor import ExecuteRequest, RunResult, SandboxExecutor
from controller.executor.sharding import (
    Units,
    discover_units,
    merge_results,
    merge_retry,
    split,
    unit_durations,
)
from controller.store import Run, RunStatus, Store
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from droidwire.run import write_junit
from tests.adb_support import AdbServer, connected_sim
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway

HEAD = """package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith
"""
FAILING = """
    @Test
    fun breaks() {
        throw IllegalStateException("boom")
    }
"""
PKG = "com.droidwire.demo.test"


def suite_class(name: str, call: str, extra: str = "") -> str:
    return textwrap.dedent(f"""
        @RunWith(AndroidJUnit4::class)
        class {name} {{
            @Test
            fun measured() {{
                ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
                    scenario.onActivity {{ activity ->
                        val start = SystemClock.elapsedRealtime()
                        activity.{call}
                        val ms = SystemClock.elapsedRealtime() - start
                        Log.i("DroidUnblocker", "elapsed=${{ms}}ms")
                    }}
                }}
            }}
        """) + textwrap.indent(textwrap.dedent(extra), "    ") + "}\n"


SUITE = HEAD + "".join([
    suite_class("AlphaTest", 'formatTitle("inbox", 3)'),
    suite_class("BetaTest", "loadSettingsFromDisk()"),
    suite_class("GammaTest", 'formatTitle("a", 1)', FAILING),
    suite_class("DeltaTest", 'formatTitle("b", 2)'),
])
CLASSES = [f"{PKG}.{c}" for c in ("AlphaTest", "BetaTest", "GammaTest", "DeltaTest")]


@pytest.mark.adb
async def test_a_four_class_suite_over_two_devices_runs_each_class_once(
    adb_server: AdbServer, gateway: LocalGateway, store: Store, tmp_path: Path,
) -> None:
    with connected_sim(adb_server, profile="galaxy-a52") as second:
        pi = Dispatcher(policy=Policy(PolicyConfig()), devices=gateway.dispatchers["desk"].devices)
        gateway.add_bridge("pi", pi, [second.address])
        executor = SandboxExecutor(gateway, store, settings=SETTINGS)
        request = ExecuteRequest(test_code=SUITE, shard=2)
        plan = await executor.plan(request, None)
        assert plan.lead_id is not None and len(plan.run_ids) == 2
        (merged,) = await executor.run(plan)

    # Each class ran in exactly one shard's instrumentation; the failed test once more,
    # alone, on the other device.
    instrumented = [(t, p["args"]["class"]) for t, m, p in gateway.sent
                    if m == "device.instrument"]
    shard_runs = [(t, c) for t, c in instrumented if "#" not in c]
    assert len(shard_runs) == 2 and len({t for t, _ in shard_runs}) == 2
    ran = Counter(cls for _, c in shard_runs for cls in c.split(","))
    assert ran == Counter(CLASSES)
    (retry,) = [(t, c) for t, c in instrumented if "#" in c]
    gamma_device = next(t for t, c in shard_runs if f"{PKG}.GammaTest" in c)
    assert retry[1] == f"{PKG}.GammaTest#breaks" and retry[0] != gamma_device

    assert merged.run_id == plan.lead_id
    # BetaTest blocks the main thread reading from disk: the suite's verdict, whichever
    # shard found it.
    assert merged.verification_status == "CONFIRMED"
    assert merged.blocking_time_ms == max(s["blocking_time_ms"] for s in merged.shards)
    assert merged.blocking_time_ms > 300
    assert merged.summary == (
        f"StrictMode violations: none | Blocking time: {merged.blocking_time_ms}ms")
    assert sorted(s["device"]["id"] for s in merged.shards) == ["desk~" + gateway.serials[
        "desk"][0], "pi~" + second.address]
    assert sorted(c for s in merged.shards for c in s["classes"]) == sorted(CLASSES)
    tests = {(t["class"], t["name"]): t for t in merged.tests}
    assert len(merged.tests) == 5 and len(tests) == 5
    breaks = tests[(f"{PKG}.GammaTest", "breaks")]
    assert breaks["status"] == "failed" and breaks["attempts"] == 2
    assert breaks["retried_on"] != breaks["device"]
    assert all(t["status"] == "passed" for k, t in tests.items() if k[1] == "measured")
    assert set(merged.unit_ms) == set(CLASSES)

    # The lead run carries the merge; each shard run its own result.
    async with store.session() as session:
        lead = await session.get(Run, plan.lead_id)
        shards = [await session.get(Run, r) for r in plan.run_ids]
    assert lead is not None and lead.status == RunStatus.FINISHED.value
    assert lead.result is not None and lead.result["shards"] == merged.shards
    assert all(s is not None and s.status == "finished" for s in shards)

    # One JUnit file: a suite per device, every class's tests once.
    report = tmp_path / "junit.xml"
    write_junit(report, [merged.to_json()])  # as the CLI gets it
    suites = ET.parse(report).getroot().findall("testsuite")
    assert len(suites) == 2
    cases = [(c.get("classname"), c.get("name")) for s in suites for c in s.findall("testcase")]
    assert sorted(cases) == sorted(tests)
    assert sum(int(s.get("failures") or 0) for s in suites) == 1


def test_units_split_by_duration_when_known_else_by_test_count() -> None:
    units = discover_units(SUITE)
    assert list(units.classes) == CLASSES and units.classes[CLASSES[2]] == ["measured", "breaks"]
    # By test count: Gamma (2 tests) alone against the three others' 1 each... balanced 2/2.
    by_count = split(units.for_devices(2), {c: units.tests_in(c) for c in CLASSES}, 2)
    assert sorted(map(len, by_count)) == [2, 2]
    assert any(CLASSES[2] in s for s in by_count)
    # Known durations: the slow class alone on one device.
    slow = {CLASSES[0]: 9000.0, CLASSES[1]: 100.0, CLASSES[2]: 200.0, CLASSES[3]: 300.0}
    assert split(CLASSES, slow, 2) == [[CLASSES[0]], CLASSES[1:]]
    # More devices than classes: the methods are split.
    one_class = Units({f"{PKG}.Only": ["a", "b", "c"]})
    assert one_class.for_devices(3) == [f"{PKG}.Only#a", f"{PKG}.Only#b", f"{PKG}.Only#c"]
    assert split(one_class.for_devices(3), {}, 3) == [[f"{PKG}.Only#a"], [f"{PKG}.Only#b"],
                                                       [f"{PKG}.Only#c"]]
    assert split(["x"], {}, 4) == [["x"]]  # never an empty shard
    assert unit_durations([{"unit_ms": {"x": 5}}, {"unit_ms": {"x": 9, "y": 2}}]) == {
        "x": 5.0, "y": 2.0}


def test_a_retry_elsewhere_is_folded_into_its_shard() -> None:
    result = RunResult(run_id="shard", tests=[
        {"class": "C", "name": "m", "status": "failed", "stack": "s1", "attempts": 1}])
    merge_retry(result, RunResult(run_id="retry", tests=[
        {"class": "C", "name": "m", "status": "passed", "stack": None}]), "pi~x")
    (test,) = result.tests
    assert (test["status"], test["attempts"], test["flaky"], test["first_stack"],
            test["retried_on"]) == ("passed", 2, True, "s1", "pi~x")


def test_the_merged_result_names_violation_kinds_not_lines() -> None:
    # The summary speaks of the kinds (DiskRead …), as one run's does; the raw log lines stay
    # in strict_mode_violations, and violation_kinds is every shard's, each once.
    line_a = "04-01 10:00:00.000 1 1 D StrictMode: StrictMode policy violation; ~duration=5 ms"
    line_b = "04-01 10:00:01.000 1 1 D StrictMode: StrictMode policy violation: network"
    results = [
        RunResult(run_id="a", verification_status="CONFIRMED", strict_mode_violations=[line_a],
                  violation_kinds=["DiskRead"], blocking_time_ms=40),
        RunResult(run_id="b", verification_status="CONFIRMED", strict_mode_violations=[line_b],
                  violation_kinds=["Network", "DiskRead"], blocking_time_ms=90),
    ]
    merged = merge_results("lead", [["A"], ["B"]], results, Units({"A": ["x"], "B": ["y"]}))
    assert merged.violation_kinds == ["DiskRead", "Network"]
    assert merged.strict_mode_violations == [line_a, line_b]
    assert merged.has_violations is True
    assert merged.summary == (
        "StrictMode violations: DiskRead, Network | Blocking time: 90ms")


async def test_earlier_durations_balance_the_next_split(store: Store) -> None:
    from controller.executor.placement import Placement

    executor = SandboxExecutor(LocalGateway(), store, settings=SETTINGS)
    async with store.session() as session, session.begin():
        session.add(Run(status="finished", request={"kind": "sharded"},
                        result={"unit_ms": {CLASSES[0]: 8000, CLASSES[1]: 100}}))
    units = discover_units(SUITE)
    async with Placement(store).transaction() as session:
        weights = await executor._unit_weights(session, CLASSES, units)
    assert weights[CLASSES[0]] == 8000 and weights[CLASSES[1]] == 100
    # Unknown ones at the known mean per test: (8000 + 100) / 2 per test; Gamma has two.
    assert weights[CLASSES[2]] == 8100 and weights[CLASSES[3]] == 4050
