"""Crashes, ANRs, launch times, process deaths and timing (fixtures written for droidwire)."""

from __future__ import annotations

import pytest

from controller.analysis import analyze
from controller.analysis.displayed import parse_duration


def tt(*msgs: str, pid: int = 5000, tid: int = 5000, tag: str = "AndroidRuntime",
       level: str = "E") -> str:
    return "".join(f"03-03 08:00:00.000 {pid:5d} {tid:5d} {level} {tag}: {m}\n" for m in msgs)


# -- crashes ------------------------------------------------------------------------------------

def test_crash_with_process_and_cause():
    text = tt("Shutting down VM", level="D") + tt(
        "FATAL EXCEPTION: DefaultDispatcher-worker-1",
        "Process: org.demo.app:sync, PID: 5000",
        "java.lang.IllegalStateException: Continuation at org.demo.W.invokeSuspend(W.kt:48) "
        "failed",
        "\tat org.demo.Repo.save(Repo.kt:10)",
        "\tat kotlinx.coroutines.DispatchedTask.run(DispatchedTask.kt:1)",
        "\tSuppressed: kotlinx.coroutines.internal.DiagnosticCoroutineContextException",
        "Caused by: java.io.IOException: disk full",
        "\tat libcore.io.IoBridge.write(IoBridge.java:1)",
        "\t... 8 more",
    ) + tt("VM exiting with result code 0, cleanup skipped.", level="I")
    (c,) = analyze(text).crashes
    assert (c.process, c.pid, c.thread) == ("org.demo.app:sync", 5000, "DefaultDispatcher-worker-1")
    assert c.exception == "java.lang.IllegalStateException"
    assert c.message == "Continuation at org.demo.W.invokeSuspend(W.kt:48) failed"
    assert c.cause == "java.io.IOException: disk full"
    assert c.app_frame == "org.demo.Repo.save(Repo.kt:10)"


def test_crash_without_process_line_and_without_message():
    text = tt("FATAL EXCEPTION: AsyncTask #1", "java.lang.IllegalStateException",
              "\tat org.old.Task.doInBackground(Task.java:3)", pid=77, tid=90)
    (c,) = analyze(text).crashes
    assert (c.process, c.pid, c.tid, c.thread) == (None, 77, 90, "AsyncTask #1")
    assert c.exception == "java.lang.IllegalStateException" and c.message is None


def test_crash_nested_one_line_chain_and_odd_frames():
    text = ("FATAL EXCEPTION: main (Fix with AI)\n"
            "Process: org.demo.app, PID: 31\n"
            "java.lang.RuntimeException: Unable to start activity ComponentInfo{org.demo.app/"
            "org.demo.app.Main}: java.lang.NullPointerException: Attempt to invoke x\n"
            "at android.app.ActivityThread.-wrap11(ActivityThread.java)\n"
            "at j$.util.Optional.get(Optional.java:1)\n"
            "at androidx.compose.runtime.ComposerImpl.doCompose-aFTiNEg(ComposerImpl.kt:2647)\n"
            "at org.demo.app.ui.ListKt.Row--ZbOJvo$app(List.android.kt:7)\n"
            "at org.demo.app.X$$ExternalSyntheticLambda0.run(D8$$SyntheticClass:0)\n")
    (c,) = analyze(text).crashes
    assert c.thread == "main" and c.pid == 31
    assert c.cause == "java.lang.NullPointerException: Attempt to invoke x"
    assert c.app_frame == "org.demo.app.ui.ListKt.Row--ZbOJvo$app(List.android.kt:7)"


def test_interleaved_processes_do_not_break_a_trace():
    text = (tt("FATAL EXCEPTION: main", "java.lang.Error: boom")
            + tt("unrelated", pid=1, tid=1, tag="Other", level="I")
            + tt("\tat org.demo.A.a(A.kt:1)"))
    (c,) = analyze(text).crashes
    assert c.app_frame == "org.demo.A.a(A.kt:1)"


def test_system_process_crash_and_native_signal_death():
    text = (tt("*** FATAL EXCEPTION IN SYSTEM PROCESS: android.ui", "java.lang.NullPointerException",
               pid=1000, tid=1010)
            + tt("Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in tid 6001 "
                 "(RenderThread), pid 6000 (org.demo.app)", pid=6000, tid=6001, tag="libc",
                 level="F"))
    r = analyze(text)
    assert r.crashes[0].thread == "android.ui"
    assert [(d.pid, d.reason) for d in r.deaths] == [(6000, "signal 11 (SIGSEGV)")]


# -- ANRs ---------------------------------------------------------------------------------------

def ams(*msgs: str, tag: str = "ActivityManager") -> str:
    return tt(*msgs, pid=1300, tid=1320, tag=tag)


@pytest.mark.parametrize(
    ("header", "package", "component"),
    [
        ("ANR in org.demo.app (org.demo.app/.MainActivity)", "org.demo.app",
         "org.demo.app/.MainActivity"),
        ("ANR in org.demo.app (org.demo.app/org.other.Screen)", "org.demo.app",
         "org.demo.app/org.other.Screen"),
        ("ANR in org.demo.app", "org.demo.app", None),
        ("ANR in org.demo.app, time=676573627", "org.demo.app", None),
        ("ANR in  ***.***.***", "***.***.***", None),
    ],
)
def test_anr_headers(header, package, component):
    (a,) = analyze(ams(header, "PID: 4242", "Reason: executing service org.demo.app/.Svc")).anrs
    assert (a.package, a.component, a.pid) == (package, component, 4242)
    assert a.reason == "executing service org.demo.app/.Svc"


def test_anr_android13_fields_and_vendor_tag():
    text = ams("ANR in org.demo.app (org.demo.app/.Main)", "PID: 88",
               "Reason: Input dispatching timed out (61a981d org.demo.app/org.demo.app.Main "
               "(server) is not responding. Waited 5001ms for FocusEvent(hasFocus=false)).",
               "Parent: org.demo.app/.Main", "ErrorId: 5b7c1e0a-0000", "Frozen: false",
               "Load: 1.0 / 1.0 / 1.0", "----- Output from /proc/pressure/memory -----",
               tag="ActivityManagerService")
    (a,) = analyze(text).anrs
    assert a.reason.startswith("Input dispatching timed out (61a981d")
    assert (a.parent, a.error_id, a.frozen, a.source) == (
        "org.demo.app/.Main", "5b7c1e0a-0000", False, "ActivityManagerService")


def test_anr_bare_and_legacy_indented_blocks():
    bare = ("ANR in org.demo.app\n    PID: 15\n    Reason: Broadcast of Intent { act=x.Y "
            "flg=0x10 hwFlg=0x300 (has extras) }\n    Load: 4 / 4 / 4\n")
    (a,) = analyze(bare).anrs
    assert a.pid == 15 and a.reason.startswith("Broadcast of Intent { act=x.Y")
    legacy = ("02-02 15:08:30.600 369-392/? E/ActivityManager: ANR in org.demo.app "
              "(org.demo.app/.Main)\n  PID: 16\n  Reason: Input dispatching timed out\n")
    (b,) = analyze(legacy).anrs
    assert (b.pid, b.reason) == (16, "Input dispatching timed out")


def test_am_anr_event_line():
    text = tt("[0,4242,org.demo.app,952745541,Input dispatching timed out]", pid=1300, tid=1320,
              tag="am_anr", level="I")
    (a,) = analyze(text).anrs
    assert (a.pid, a.package, a.reason, a.source) == (4242, "org.demo.app",
                                                       "Input dispatching timed out", "am_anr")


# -- Displayed ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "ms"), [("+136ms", 136), ("+1s255ms", 1255), ("+5s98ms", 5098),
                                          ("+2m2s134ms", 122134), ("+3s", 3000), ("+", None)])
def test_durations(text, ms):
    assert parse_duration(text) == ms


def test_displayed_forms():
    text = (tt("Displayed org.demo/.Main: +389ms (total +430ms)", pid=1, tid=2,
               tag="ActivityManager", level="I")
            + tt("Displayed Demo.App_X/demo.app.x.MainActivity for user 0: +1s435ms", pid=1,
                 tid=2, tag="ActivityTaskManager", level="I")
            + "I/ActivityManager(  824): Displayed org.demo/.Slow: +892ms (total +2m2s134ms)\n"
            + tt("Displayed org.cut/.Trunc", pid=1, tid=2, tag="ActivityManager", level="I"))
    r = analyze(text)
    assert [(d.component, d.ms, d.total_ms) for d in r.displayed] == [
        ("org.demo/.Main", 389, 430),
        ("Demo.App_X/demo.app.x.MainActivity", 1435, None),
        ("org.demo/.Slow", 892, 122134),
    ]


# -- timing -------------------------------------------------------------------------------------

def test_droid_unblocker_largest_reading_and_per_test():
    text = (tt("Start proc 5000:org.demo.app/u0a10 for added application org.demo.app",
               pid=1300, tid=1320, tag="ActivityManager", level="I")
            + tt("started: testA(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("elapsed=120ms", tag="DroidUnblocker", level="I")
            + tt("finished: testA(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("started: testB(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("elapsed=847 ms", tag="DroidUnblocker", level="I")
            + tt("failed: testB(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("finished: testB(org.demo.FooTest)", tag="TestRunner", level="I"))
    r = analyze(text, package="org.demo.app")
    assert r.blocking_time_ms == 847
    assert [(t.name, t.status, t.blocking_time_ms) for t in r.tests] == [
        ("testA", "passed", 120), ("testB", "failed", 847)]
    assert [t.test for t in r.timings] == ["org.demo.FooTest#testA", "org.demo.FooTest#testB"]
    assert r.summary == "StrictMode violations: none | Blocking time: 847ms"
    assert r.app_pids == [5000]


def test_no_timing_is_minus_one():
    assert analyze("nothing here\n").blocking_time_ms == -1
    assert analyze(tt("elapsed=3.6ms", tag="DroidUnblocker")).blocking_time_ms == 4


def test_process_map_sources():
    text = (tt("Start proc org.old.app for activity org.old.app/.Main: pid=700 uid=10060",
               pid=1, tid=1, tag="ActivityManager", level="I")
            + "---------------------------- PROCESS STARTED (8123) for package org.new.app "
              "----------------------------\n"
            + tt("Killing 700:org.old.app/u0a60 (adj 900): remove task", pid=1, tid=1,
                 tag="ActivityManager", level="I")
            + tt("Process org.new.app (pid 8123) has died: fg TOP", pid=1, tid=1,
                 tag="ActivityManager", level="I"))
    r = analyze(text, package="org.new.app")
    assert r.app_pids == [8123]
    assert [(d.pid, d.process) for d in r.deaths] == [(700, "org.old.app"), (8123, "org.new.app")]


def test_native_crash_of_the_app_is_pending():
    text = (tt("Start proc 6000:org.demo.app/u0a1 for activity", pid=1, tid=1,
               tag="ActivityManager", level="I")
            + tt("Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in tid 6001 "
                 "(RenderThread), pid 6000 (org.demo.app)", pid=6000, tid=6001, tag="libc",
                 level="F")
            + tt("pid: 6000, tid: 6001, name: RenderThread  >>> org.demo.app <<<", pid=7000,
                 tid=7000, tag="DEBUG", level="F"))
    r = analyze(text, package="org.demo.app")
    assert [d.reason for d in r.deaths] == ["signal 11 (SIGSEGV)", "native crash (tombstone)"]
    assert (r.verification_status, r.reason_code) == ("PENDING", "test_crashed")
    assert r.summary.startswith("Inconclusive: signal 11 (SIGSEGV)")
    assert analyze(text, package="org.other").verification_status == "REFUTED"


def test_droid_unblocker_naming_its_test():
    text = (tt("started: testA(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("elapsed=42ms test=org.demo.FooTest#testA", tag="DroidUnblocker", level="I")
            + tt("finished: testA(org.demo.FooTest)", tag="TestRunner", level="I")
            + tt("DroidUnblocker: elapsed=7ms test=org.demo.BarTest#b", tag="System.out",
                 level="I"))
    r = analyze(text)
    assert [(t.elapsed_ms, t.test) for t in r.timings] == [
        (42, "org.demo.FooTest#testA"), (7, "org.demo.BarTest#b")]
    assert r.tests[0].blocking_time_ms == 42 and r.blocking_time_ms == 42


def test_app_chatter_is_not_evidence():
    text = (tt("Watchdog: possible ANR in main thread (org.demo/.Main)", tag="MyApp", level="W")
            + tt("reporting FATAL EXCEPTION: main to the server", tag="MyApp", level="I")
            + tt("list Displayed a/b: +3ms items", tag="MyApp", level="I")
            + tt("handleApplicationStrictModeViolation; res=0", tag="ActivityManager", level="W"))
    r = analyze(text)
    assert (r.anrs, r.crashes, r.displayed, r.violations) == ([], [], [], [])
    assert r.verification_status == "REFUTED"


def test_xposed_dagger_on_the_thread_name():
    text = tt("FATAL EXCEPTION: main †", "java.lang.Error: x") + tt("Application terminated.")
    assert analyze(text).crashes[0].thread == "main"


def test_am_proc_start_event():
    text = tt("[0,8123,10123,org.demo.app,activity,{org.demo.app/org.demo.app.Main}]", pid=612,
              tid=640, tag="am_proc_start", level="I")
    assert analyze(text, package="org.demo.app").app_pids == [8123]
