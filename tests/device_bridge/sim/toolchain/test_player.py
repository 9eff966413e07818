"""Compile LLM-style tests with the simulated toolchain and check what the player plays back."""

from __future__ import annotations

import re

import pytest

from device_bridge.sim.apk import SimPackage, SimTest
from device_bridge.sim.behaviour import demo_app
from device_bridge.sim.player import SimInstrumentationPlayer, default_player

from .helpers import (
    IMPORTS,
    PID,
    PROJECT,
    SYSTEM_PID,
    RecordingDevice,
    compile_and_play,
    llm_test,
)

APP = demo_app()
MAIN_ACTIVITY = PROJECT / "app/src/main/java/com/droidwire/demo/MainActivity.kt"


def _line_of(method: str, token: str) -> int:
    """The 1-based line of ``token`` inside ``method`` in MainActivity.kt."""
    source = MAIN_ACTIVITY.read_text().splitlines()
    start = next(i for i, s in enumerate(source) if f"fun {method}(" in s)
    return next(i for i in range(start, len(source)) if token in source[i]) + 1


# --- one LLM-style test per demo method: the evidence each verdict rests on

@pytest.mark.parametrize(
    ("method", "violation", "low", "high"),
    [
        ("loadSettingsFromDisk", "android.os.strictmode.DiskReadViolation", 800, 900),
        ("saveDraftSync", "android.os.strictmode.DiskWriteViolation", 17, 300),
        ("fetchGreetingBlocking", "android.os.strictmode.NetworkViolation", 200, 300),
        ("computeLayoutHash", None, 400, 500),
        ("decodeThumbnail", None, 100, 140),
        ("formatTitle", None, 0, 16),
        ("loadAvatarAsync", None, 0, 16),
    ],
)
def test_each_demo_method_leaves_its_evidence(method, violation, low, high):
    played = compile_and_play(llm_test(method))
    device = played.device
    assert played.status_codes() == [1, 0]
    assert played.output[-1] == "INSTRUMENTATION_CODE: -1"
    assert "OK (1 test)" in played.output
    [elapsed] = device.elapsed()
    assert low <= elapsed <= high
    assert device.violations() == ([violation] if violation else [])
    if violation:
        block = [ln for ln in device.tagged("StrictMode")]
        assert re.fullmatch(
            r"StrictMode policy violation; ~duration=\d+ ms: " + re.escape(violation),
            block[0].message,
        )
        assert all(ln.pid == PID and ln.tid == PID for ln in block)  # the main thread
        assert all(ln.message.startswith("\tat ") for ln in block[1:])
        frame = APP.methods[method].app_frame
        assert f"\tat {frame}" in [ln.message for ln in block]
        assert any(".onActivity" in ln.message or "onActivity$" in ln.message for ln in block)


def test_app_frames_point_at_real_source_lines():
    played = compile_and_play(llm_test("loadSettingsFromDisk"))
    line = _line_of("loadSettingsFromDisk", "file.exists()")
    expected = f"\tat com.droidwire.demo.MainActivity.loadSettingsFromDisk(MainActivity.kt:{line})"
    assert expected in [ln.message for ln in played.device.tagged("StrictMode")]


def test_violation_duration_covers_the_blocking_call():
    played = compile_and_play(llm_test("loadSettingsFromDisk"))
    first = played.device.tagged("StrictMode")[0].message
    duration = int(re.search(r"~duration=(\d+) ms", first).group(1))
    [elapsed] = played.device.elapsed()
    assert elapsed - 5 <= duration <= elapsed + 5


def test_without_a_policy_there_is_timing_but_no_strictmode():
    played = compile_and_play(llm_test("loadSettingsFromDisk", policy=False))
    assert played.device.violations() == []
    assert played.device.elapsed()[0] >= 800


def test_policy_on_the_test_thread_does_not_cover_onactivity():
    # the common LLM mistake: the policy is per thread; onActivity runs on the main thread
    source = IMPORTS + """
@RunWith(AndroidJUnit4::class)
class PolicyOnWrongThreadTest {
    @Test
    fun diskRead() {
        StrictMode.setThreadPolicy(StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build())
        ActivityScenario.launch(MainActivity::class.java).use {
            it.onActivity { activity -> activity.loadSettingsFromDisk() }
        }
    }
}
"""
    played = compile_and_play(source)
    assert played.device.violations() == []
    assert played.status_codes() == [1, 0]


def test_a_call_on_the_test_thread_logs_without_duration_on_the_instrumentation_thread():
    source = IMPORTS + """
import androidx.test.platform.app.InstrumentationRegistry

@RunWith(AndroidJUnit4::class)
class TestThreadTest {
    private lateinit var activity: MainActivity

    @Test
    fun diskReadOnTestThread() {
        StrictMode.setThreadPolicy(StrictMode.ThreadPolicy.Builder().detectDiskReads().penaltyLog().build())
        ActivityScenario.launch(MainActivity::class.java).use { s -> s.onActivity { activity = it } }
        activity.loadSettingsFromDisk()
    }
}
"""
    played = compile_and_play(source)
    [line] = [ln for ln in played.device.tagged("StrictMode") if "policy violation" in ln.message]
    assert line.message == "StrictMode policy violation: android.os.strictmode.DiskReadViolation"
    assert line.tid != PID


def test_background_disk_work_is_not_a_violation():
    source = IMPORTS + """
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

@RunWith(AndroidJUnit4::class)
class BackgroundTest {
    @Test
    fun settingsOnIo() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                StrictMode.setThreadPolicy(StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build())
                val start = SystemClock.elapsedRealtime()
                Thread { activity.loadSettingsFromDisk() }.start()
                val elapsed = SystemClock.elapsedRealtime() - start
                Log.i("DroidUnblocker", "elapsed=${elapsed}ms")
            }
        }
    }

    @Test
    fun settingsWithCoroutines() = runBlocking {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            lateinit var a: MainActivity
            scenario.onActivity { a = it }
            withContext(Dispatchers.IO) { a.loadSettingsFromDisk() }
        }
    }
}
"""
    played = compile_and_play(source)
    assert played.device.violations() == []
    assert played.device.elapsed() == [0]
    assert played.status_codes() == [1, 0, 1, 0]


def test_network_on_main_without_a_custom_policy_crashes():
    played = compile_and_play(llm_test("fetchGreetingBlocking", policy=False))
    device = played.device
    fatal = [ln.message for ln in device.tagged("AndroidRuntime")]
    assert fatal[:4] == [
        "Shutting down VM",
        "FATAL EXCEPTION: main",
        f"Process: com.droidwire.demo, PID: {PID}",
        "android.os.NetworkOnMainThreadException",
    ]
    assert played.output[-2:] == ["INSTRUMENTATION_RESULT: shortMsg=Process crashed.",
                                  "INSTRUMENTATION_CODE: 0"]
    assert device.killed == [("com.droidwire.demo", "crash")]


def test_strictmode_rule_and_droidunblocker_helper():
    source = """
package com.droidwire.demo

import androidx.test.ext.junit.rules.ActivityScenarioRule
import org.junit.Rule
import org.junit.Test

class RuleTest {
    @get:Rule
    val strictMode = StrictModeRule()

    @get:Rule
    val scenarioRule = ActivityScenarioRule(MainActivity::class.java)

    @Test
    fun draft() {
        scenarioRule.scenario.onActivity { DroidUnblocker.measure { it.saveDraftSync("x") } }
    }
}
"""
    played = compile_and_play(source)
    assert played.device.violations() == ["android.os.strictmode.DiskWriteViolation"]
    assert 17 <= played.device.elapsed()[0] <= 300
    displayed = [ln for ln in played.device.tagged("ActivityTaskManager") if "Displayed" in ln.message]
    assert displayed and displayed[0].pid == SYSTEM_PID


def test_several_tests_with_helpers_and_measure_time_millis():
    source = IMPORTS + """
import kotlin.system.measureTimeMillis

@RunWith(AndroidJUnit4::class)
class MainActivityPerformanceTest {
    companion object {
        private const val TAG = "DroidUnblocker"
    }

    private fun timeOnMain(block: (MainActivity) -> Unit) {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val ms = measureTimeMillis { block(activity) }
                Log.i(TAG, "elapsed=${ms}ms")
            }
        }
    }

    private fun hash(activity: MainActivity) {
        activity.computeLayoutHash()
    }

    @Test
    fun layoutHash() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val t0 = System.nanoTime()
                hash(activity)
                val elapsedMs = (System.nanoTime() - t0) / 1_000_000
                Log.d(TAG, "elapsed=${elapsedMs}ms")
            }
        }
    }

    @Test
    fun title() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val ms = measureTimeMillis { activity.formatTitle("inbox", 2) }
                Log.i(TAG, "elapsed=" + ms + "ms")
            }
        }
    }
}
"""
    played = compile_and_play(source)
    title, layout = sorted(played.device.elapsed())
    assert 400 <= layout <= 500
    assert title <= 16
    assert played.status_codes() == [1, 0, 1, 0]
    assert "OK (2 tests)" in played.output


def test_anr_when_the_main_thread_blocks_past_five_seconds():
    body = "repeat(7) { activity.loadSettingsFromDisk() }"
    source = llm_test("loadSettingsFromDisk", body=body).replace(
        "class LoadSettingsFromDiskBlockingTest {",
        "class AnrTest {\n    @Test\n    fun notRun() { }\n",
    )
    played = compile_and_play(source)
    anr = [ln for ln in played.device.tagged("ActivityManager")]
    assert anr[0].message.startswith("ANR in com.droidwire.demo (com.droidwire.demo/.MainActivity)")
    assert f"PID: {PID}" in [ln.message for ln in anr]
    assert all(ln.pid == SYSTEM_PID and ln.priority == "E" for ln in anr)
    assert played.device.killed == [("com.droidwire.demo", "anr")]
    assert played.device.elapsed() == []  # the timing line never came
    # the ANR'd test started and never finished; nothing ran after it
    assert played.status_codes()[-1] == 1
    assert played.output[-3] == "INSTRUMENTATION_STATUS_CODE: 1"
    assert "test=loadSettingsFromDisk_doesNotBlockTheMainThread" in played.output[-4]
    assert played.output[-2:] == ["INSTRUMENTATION_RESULT: shortMsg=Process crashed.",
                                  "INSTRUMENTATION_CODE: 0"]
    assert 5_000 <= played.device.clock_ms <= 6_000


def test_a_throw_on_the_main_thread_crashes_and_stops_the_run():
    source = IMPORTS + """
@RunWith(AndroidJUnit4::class)
class CrashTest {
    @Test
    fun a_crashes() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                activity.formatTitle()
                throw IllegalStateException("boom")
            }
        }
    }

    @Test
    fun b_neverRuns() {
        assertTrue(true)
    }
}
"""
    played = compile_and_play(source)
    messages = [ln.message for ln in played.device.tagged("AndroidRuntime")]
    assert "FATAL EXCEPTION: main" in messages
    assert f"Process: com.droidwire.demo, PID: {PID}" in messages
    assert "java.lang.IllegalStateException: boom" in messages
    assert any(m.startswith("\tat com.droidwire.demo.CrashTest.a_crashes$lambda$") for m in messages)
    assert played.status_codes() == [1, -2]
    assert "Process crashed while executing a_crashes(com.droidwire.demo.CrashTest):" in played.text
    assert "b_neverRuns" not in played.text
    assert played.output[-2:] == ["INSTRUMENTATION_RESULT: shortMsg=Process crashed.",
                                  "INSTRUMENTATION_CODE: 0"]


def test_a_failure_on_the_test_thread_is_a_junit_failure_and_the_run_goes_on():
    source = IMPORTS + """
@RunWith(AndroidJUnit4::class)
class TimingAssertTest {
    @Test
    fun hashIsFast() {
        lateinit var activity: MainActivity
        ActivityScenario.launch(MainActivity::class.java).use { it.onActivity { a -> activity = a } }
        val start = SystemClock.elapsedRealtime()
        activity.computeLayoutHash()
        val elapsed = SystemClock.elapsedRealtime() - start
        assertTrue("took ${elapsed}ms", elapsed < 100)
    }

    @Test
    fun titleIsFast() {
        lateinit var activity: MainActivity
        ActivityScenario.launch(MainActivity::class.java).use { it.onActivity { a -> activity = a } }
        val start = SystemClock.elapsedRealtime()
        activity.formatTitle()
        assertTrue(SystemClock.elapsedRealtime() - start < 100)
    }
}
"""
    played = compile_and_play(source)
    assert played.codes_by_test() == {"hashIsFast": [1, -2], "titleIsFast": [1, 0]}
    stack = re.search(r"INSTRUMENTATION_STATUS: stack=(java.lang.AssertionError: took (\d+)ms)",
                      played.text)
    assert stack and 400 <= int(stack.group(2)) <= 500
    assert "FAILURES!!!" in played.output
    assert "Tests run: 2,  Failures: 1" in played.output
    assert played.output[-1] == "INSTRUMENTATION_CODE: -1"
    assert played.device.tagged("AndroidRuntime") == []


def test_runner_log_lines_and_status_bundle_shape():
    played = compile_and_play(llm_test("formatTitle"))
    runner = [ln.message for ln in played.device.tagged("TestRunner")]
    cls = "com.droidwire.demo.FormatTitleBlockingTest"
    assert runner == [
        "run started: 1 test",
        f"started: formatTitle_doesNotBlockTheMainThread({cls})",
        f"finished: formatTitle_doesNotBlockTheMainThread({cls})",
        "run finished: 1 tests, 0 failed, 0 ignored",
    ]
    assert played.output[:8] == [
        f"INSTRUMENTATION_STATUS: class={cls}",
        "INSTRUMENTATION_STATUS: current=1",
        "INSTRUMENTATION_STATUS: id=AndroidJUnitRunner",
        "INSTRUMENTATION_STATUS: numtests=1",
        "INSTRUMENTATION_STATUS: stream=",
        f"{cls}:",
        "INSTRUMENTATION_STATUS: test=formatTitle_doesNotBlockTheMainThread",
        "INSTRUMENTATION_STATUS_CODE: 1",
    ]
    end = played.output[played.output.index("INSTRUMENTATION_RESULT: stream="):]
    assert end[1] == "" and re.fullmatch(r"Time: \d+\.\d{3}", end[2])
    assert end[3:] == ["", "OK (1 test)", "", "", "INSTRUMENTATION_CODE: -1"]
    assert played.device.started == ["com.droidwire.demo"]
    assert played.device.killed == [("com.droidwire.demo", "finished inst")]


def test_jitter_is_deterministic_per_test_and_varies_between_tests():
    first = compile_and_play(llm_test("loadSettingsFromDisk")).device.elapsed()
    again = compile_and_play(llm_test("loadSettingsFromDisk")).device.elapsed()
    assert first == again
    readings = {
        compile_and_play(llm_test("loadSettingsFromDisk").replace(
            "_doesNotBlockTheMainThread", f"_variant{i}")).device.elapsed()[0]
        for i in range(6)
    }
    assert len(readings) > 1
    assert all(830 <= r <= 870 for r in readings)


def test_the_clock_advances_by_the_simulated_durations():
    played = compile_and_play(llm_test("computeLayoutHash"))
    assert played.device.clock_ms >= played.device.elapsed()[0] >= 440


def test_class_filter_selects_tests():
    source = IMPORTS + """
@RunWith(AndroidJUnit4::class)
class TwoTests {
    @Test fun one() { assertTrue(true) }
    @Test fun two() { assertTrue(true) }
}
"""
    played = compile_and_play(source, class_filter="com.droidwire.demo.TwoTests#two")
    assert "INSTRUMENTATION_STATUS: test=two" in played.output
    assert "INSTRUMENTATION_STATUS: test=one" not in played.output
    assert "OK (1 test)" in played.output


def test_missing_target_app_fails_like_am_instrument():
    test_pkg = SimPackage(package="com.droidwire.demo.test", kind="test",
                          target_package="com.droidwire.demo",
                          tests=[SimTest("com.droidwire.demo.X", "t")])
    device = RecordingDevice()
    out = list(default_player().play(test_pkg, None, class_filter=None, device=device))
    assert out[0] == ("INSTRUMENTATION_STATUS: Error=Unable to find instrumentation target "
                      "package: com.droidwire.demo")
    assert "INSTRUMENTATION_STATUS_CODE: -1" in out
    assert any("INSTRUMENTATION_FAILED: com.droidwire.demo.test/" in line for line in out)
    assert device.lines == [] and device.started == []


def test_ignored_test_reports_status_minus_three():
    source = IMPORTS + """
import org.junit.Ignore

@RunWith(AndroidJUnit4::class)
class IgnoredTest {
    @Ignore("flaky") @Test fun skipped() { throw IllegalStateException("never") }
    @Test fun runs() { assertTrue(true) }
}
"""
    played = compile_and_play(source)
    assert played.codes_by_test() == {"skipped": [1, -3], "runs": [1, 0]}
    assert played.device.tagged("AndroidRuntime") == []


def test_player_is_usable_without_compiling_unknown_methods_default_fast():
    pkg = SimPackage(package="com.droidwire.demo.test", kind="test",
                     target_package="com.droidwire.demo",
                     tests=[SimTest("com.droidwire.demo.X", "t", steps=[
                         {"mark": "a", "thread": "main", "dispatch": 1},
                         {"call": "someNewMethod", "thread": "main", "dispatch": 1},
                         {"mark": "b", "thread": "main", "dispatch": 1},
                         {"log": {"priority": "I", "tag": "DroidUnblocker", "parts": [
                             "elapsed=", {"elapsed": ["a", "b"], "unit": "ms"}, "ms"]},
                          "thread": "main", "dispatch": 1},
                     ])])
    app = SimPackage(package="com.droidwire.demo", kind="app")
    device = RecordingDevice()
    out = list(SimInstrumentationPlayer(APP).play(pkg, app, class_filter=None, device=device))
    assert device.elapsed() == [0]
    assert out[-1] == "INSTRUMENTATION_CODE: -1"


def test_code_the_grammar_stumbles_on_is_still_understood():
    # tree-sitter-kotlin returns ERROR nodes for this valid class (a one-line companion object
    # followed by an annotation with arguments); the per-member parse recovers the test
    source = IMPORTS + """
@RunWith(AndroidJUnit4::class)
class GrammarEdgeTest {
  companion object { private const val TAG = "DroidUnblocker" }
  @Test(timeout = 10_000) fun thumbnail() {
    ActivityScenario.launch(MainActivity::class.java).use { scenario ->
      scenario.onActivity { activity ->
        val start = System.nanoTime()
        activity.decodeThumbnail()
        Log.i(TAG, "elapsed=${(System.nanoTime() - start) / 1_000_000}ms")
      }
    }
  }
}
"""
    from device_bridge.sim.toolchain_kotlin import parse_file

    from .helpers import kotlin

    assert parse_file(kotlin(source)).tree.root_node.has_error  # the premise of this test
    played = compile_and_play(source)
    assert 100 <= played.device.elapsed()[0] <= 140
    assert played.codes_by_test() == {"thumbnail": [1, 0]}


def test_sleep_on_the_main_thread_blocks_and_can_anr():
    played = compile_and_play(llm_test("formatTitle", body="Thread.sleep(6_000)"))
    assert any(ln.message.startswith("ANR in com.droidwire.demo")
               for ln in played.device.tagged("ActivityManager"))
    short = compile_and_play(llm_test("formatTitle", body="SystemClock.sleep(200)"))
    assert 195 <= short.device.elapsed()[0] <= 210


def test_branch_on_a_timing_value_and_measure_on_main_thread():
    source = IMPORTS + """
import org.junit.Assert.fail

@RunWith(AndroidJUnit4::class)
class BranchTest {
    @Test
    fun hashBudget() {
        lateinit var activity: MainActivity
        ActivityScenario.launch(MainActivity::class.java).use { it.onActivity { a -> activity = a } }
        val ms = DroidUnblocker.measureOnMainThread { activity.computeLayoutHash() }
        val start = SystemClock.elapsedRealtime()
        DroidUnblocker.measureOnMainThread { activity.computeLayoutHash() }
        val elapsed = SystemClock.elapsedRealtime() - start
        if (elapsed > 300) {
            fail("main thread blocked for ${elapsed}ms")
        } else {
            Log.i("Budget", "fine")
        }
    }
}
"""
    played = compile_and_play(source)
    readings = played.device.elapsed()
    assert len(readings) == 2 and all(430 <= r <= 470 for r in readings)
    assert all(ln.tid == PID for ln in played.device.tagged("DroidUnblocker"))  # main thread
    assert played.codes_by_test() == {"hashBudget": [1, -2]}
    assert re.search(r"stack=java.lang.AssertionError: main thread blocked for \d+ms",
                     played.text)
    assert played.device.tagged("Budget") == []


def test_extension_functions_on_the_activity():
    source = IMPORTS + """
private fun MainActivity.timedSettings(): Long {
    val start = SystemClock.elapsedRealtime()
    loadSettingsFromDisk()
    return SystemClock.elapsedRealtime() - start
}

@RunWith(AndroidJUnit4::class)
class ExtensionTest {
    @Test
    fun settings() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val elapsed = activity.timedSettings()
                Log.i("DroidUnblocker", "elapsed=${elapsed}ms")
            }
        }
    }
}
"""
    played = compile_and_play(source)
    assert played.compiled.ok
    assert 800 <= played.device.elapsed()[0] <= 900


def test_main_thread_waiting_for_background_work_is_blocked_without_violation():
    body = ("runBlocking { withContext(Dispatchers.IO) { activity.loadSettingsFromDisk() } }")
    source = llm_test("loadSettingsFromDisk", body=body).replace(
        "import org.junit.Test\n",
        "import org.junit.Test\nimport kotlinx.coroutines.Dispatchers\n"
        "import kotlinx.coroutines.runBlocking\nimport kotlinx.coroutines.withContext\n")
    played = compile_and_play(source)
    assert played.device.violations() == []  # the IO thread has no StrictMode policy
    assert 800 <= played.device.elapsed()[0] <= 900  # but the main thread waited for it
    many = compile_and_play(source.replace("withContext(Dispatchers.IO) {",
                                           "repeat(7) { withContext(Dispatchers.IO) {")
                            .replace("loadSettingsFromDisk() } }", "loadSettingsFromDisk() } } }"))
    assert any(ln.message.startswith("ANR in ") for ln in many.device.tagged("ActivityManager"))


def test_player_without_the_app_model_still_plays(monkeypatch):
    import device_bridge.sim.player as player_module
    from device_bridge.sim.behaviour import DemoAppError

    def missing(*_args, **_kwargs):
        raise DemoAppError("no sources")

    monkeypatch.setattr(player_module, "demo_app", missing)
    pkg = SimPackage(package="com.droidwire.demo.test", kind="test",
                     target_package="com.droidwire.demo",
                     tests=[SimTest("com.droidwire.demo.X", "t", steps=[
                         {"call": "loadSettingsFromDisk", "thread": "main", "dispatch": 1}])])
    app = SimPackage(package="com.droidwire.demo", kind="app")
    out = list(default_player().play(pkg, app, class_filter=None, device=RecordingDevice()))
    assert out[-1] == "INSTRUMENTATION_CODE: -1"


def test_the_shipped_examples_show_the_documented_evidence():
    source = (PROJECT / "app/src/androidTestExamples/java/com/droidwire/demo/examples/"
              "MainActivityExamplesTest.kt").read_text()
    cls = "com.droidwire.demo.examples.MainActivityExamplesTest"
    expected = {  # method → (violation, lowest ms, highest ms), as the README's table says
        "loadSettingsFromDisk_readsOnMainThread": ("DiskReadViolation", 301, 5_000),
        "saveDraftSync_writesOnMainThread": ("DiskWriteViolation", 0, 300),
        "fetchGreetingBlocking_usesNetworkOnMainThread": ("NetworkViolation", 0, 300),
        "computeLayoutHash_blocksWithCpuWork": (None, 301, 5_000),
        "decodeThumbnail_takesMoreThanAFrame": (None, 17, 300),
        "formatTitle_isFast": (None, 0, 16),
        "loadAvatarAsync_leavesTheMainThreadFree": (None, 0, 16),
    }
    for method, (violation, low, high) in expected.items():
        played = compile_and_play(source, class_filter=f"{cls}#{method}")
        assert played.codes_by_test() == {method: [1, 0]}
        [elapsed] = played.device.elapsed()
        assert low <= elapsed <= high, method
        found = [v.rsplit(".", 1)[-1] for v in played.device.violations()]
        assert found == ([violation] if violation else []), method
