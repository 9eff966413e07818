"""Verdict and attribution per docs/design.md §5 (fixtures written for droidwire)."""

from __future__ import annotations

import pytest

from controller.analysis import Thresholds, analyze, decide, pending, summary_line


def line(pid: int, tag: str, msg: str, level: str = "D", tid: int | None = None) -> str:
    return f"04-01 10:00:00.000 {pid:5d} {tid or pid:5d} {level} {tag}: {msg}\n"


START = line(1000, "ActivityManager",
             "Start proc 2000:org.demo.app/u0a10 for activity {org.demo.app/org.demo.app.Main}",
             "I", 1010)
OTHER_START = line(1000, "ActivityManager", "Start proc 3000:com.other/u0a11 for service", "I",
                   1010)
VIOLATION_OTHER = (line(3000, "StrictMode", "StrictMode policy violation; ~duration=900 ms: "
                                            "android.os.strictmode.DiskReadViolation")
                   + line(3000, "StrictMode", "\tat com.other.Thing.run(Thing.kt:1)"))
VIOLATION_APP = (line(2000, "StrictMode", "StrictMode policy violation; ~duration=50 ms: "
                                          "android.os.strictmode.NetworkViolation")
                 + line(2000, "StrictMode", "\tat org.demo.app.Api.get(Api.kt:9)"))


def timing(ms: int, pid: int = 2000) -> str:
    return line(pid, "DroidUnblocker", f"elapsed={ms}ms", "I")


@pytest.mark.parametrize(
    ("ms", "status", "reason"),
    [
        (-1, "REFUTED", "no_evidence"),
        (0, "REFUTED", "no_evidence"),
        (16, "REFUTED", "no_evidence"),
        (17, "PARTIAL", "blocking_below_threshold"),
        (300, "PARTIAL", "blocking_below_threshold"),
        (301, "CONFIRMED", "main_thread_blocked"),
    ],
)
def test_thresholds(ms, status, reason):
    r = analyze(START + (timing(ms) if ms >= 0 else ""), package="org.demo.app")
    assert (r.verification_status, r.reason_code) == (status, reason)


def test_thresholds_are_configurable():
    r = analyze(START + timing(120), package="org.demo.app",
                thresholds=Thresholds(blocking_ms=100, noise_floor_ms=5))
    assert r.verification_status == "CONFIRMED"
    r = analyze(START + timing(20), thresholds=Thresholds(noise_floor_ms=50))
    assert r.verification_status == "REFUTED"


def test_violation_confirms_even_with_no_blocking():
    r = analyze(START + VIOLATION_APP + timing(3), package="org.demo.app")
    assert (r.verification_status, r.reason_code) == ("CONFIRMED", "strict_mode_violation")
    assert r.summary == "StrictMode violations: Network | Blocking time: 3ms"


def test_other_apps_never_move_the_verdict():
    text = START + OTHER_START + VIOLATION_OTHER + timing(4) + line(
        1000, "ActivityManager", "ANR in com.other (com.other/.Main)", "E", 1010) + line(
        1000, "ActivityManager", "PID: 3000", "E", 1010) + timing(999, pid=3000)
    r = analyze(text, package="org.demo.app")
    assert r.violations == [] and r.anrs == []
    assert len(r.other_violations) == 1 and len(r.other_anrs) == 1
    assert r.blocking_time_ms == 4
    assert (r.verification_status, r.summary) == (
        "REFUTED", "StrictMode violations: none | Blocking time: 4ms")
    assert any(i.kind == "other_processes" for i in r.issues)
    # Without a package every process counts.
    assert analyze(text).verification_status == "CONFIRMED"


def test_pid_map_from_the_caller():
    text = VIOLATION_OTHER
    assert analyze(text, package="org.demo.app").violations == []
    assert len(analyze(text, package="org.demo.app", pids={3000: "org.demo.app"}).violations) == 1
    assert len(analyze(text, package="org.demo.app", pids=[3000]).violations) == 1


def test_anr_of_the_app_confirms():
    text = START + line(1000, "ActivityManager", "ANR in org.demo.app (org.demo.app/.Main)", "E",
                        1010) + line(1000, "ActivityManager", "PID: 2000", "E", 1010)
    r = analyze(text, package="org.demo.app")
    assert (r.verification_status, r.reason_code) == ("CONFIRMED", "anr")


def test_crash_before_timing_is_pending():
    crash = (line(2000, "AndroidRuntime", "FATAL EXCEPTION: main", "E")
             + line(2000, "AndroidRuntime", "Process: org.demo.app, PID: 2000", "E")
             + line(2000, "AndroidRuntime", "java.lang.IllegalStateException: no db", "E")
             + line(2000, "AndroidRuntime", "\tat org.demo.app.Db.open(Db.kt:1)", "E"))
    r = analyze(START + crash, package="org.demo.app")
    assert (r.verification_status, r.reason_code) == ("PENDING", "test_crashed")
    assert r.summary.startswith("Inconclusive: java.lang.IllegalStateException: no db")
    # A crash after a clean timing does not hide the reading.
    r = analyze(START + timing(5) + crash, package="org.demo.app")
    assert r.verification_status == "REFUTED"
    # Another app's crash is not ours.
    other = (crash.replace(" 2000 ", " 3000 ").replace("PID: 2000", "PID: 3000")
             .replace("org.demo.app", "com.other"))
    assert analyze(START + OTHER_START + other, package="org.demo.app").verification_status == "REFUTED"


def test_unfinished_test_is_incomplete():
    text = START + line(2000, "TestRunner", "started: t(org.demo.T)", "I")
    r = analyze(text, package="org.demo.app")
    assert (r.verification_status, r.reason_code) == ("PENDING", "incomplete")
    assert r.tests[0].status == "error"


def test_decide_and_pending_helpers():
    assert summary_line(["DiskRead", "Network", "DiskRead"], 847) == \
        "StrictMode violations: DiskRead, Network | Blocking time: 847ms"
    assert summary_line([], -1) == "StrictMode violations: none | Blocking time: n/a"
    assert decide(kinds=[], blocking_time_ms=12, anrs=0).summary == \
        "StrictMode violations: none | Blocking time: 12ms"
    assert pending("skipped", "Could not generate test body").summary == \
        "Skipped: Could not generate test body"
    v = pending("no_device")
    assert (v.status, v.reason_code, v.summary) == ("PENDING", "no_device",
                                                    "Sandbox unavailable: no_device")


def test_issues():
    crash = (line(2000, "AndroidRuntime", "FATAL EXCEPTION: main", "E")
             + line(2000, "AndroidRuntime", "java.lang.Error: x", "E"))
    anr = (line(1000, "ActivityManager", "ANR in org.demo.app (org.demo.app/.Main)", "E", 1010)
           + line(1000, "ActivityManager", "PID: 2000", "E", 1010))
    r = analyze(START + crash + crash + anr + anr + timing(500), package="org.demo.app")
    titles = [i.title for i in r.issues]
    assert "Main thread blocked 500 ms" in titles
    assert "Repeated ANR in org.demo.app/.Main (2 times)" in titles
    assert any(t.startswith("Crash loop: org.demo.app crashed 2 times") for t in titles)
    assert all(i.level in ("error", "warning", "info") and i.suggestion for i in r.issues)


def test_instrumentation_result_informs_the_verdict():
    from controller.analysis import parse_instrumentation

    crashed = parse_instrumentation("INSTRUMENTATION_RESULT: shortMsg=Process crashed.\n"
                                    "INSTRUMENTATION_CODE: 0\n")
    r = analyze(START, package="org.demo.app", instrumentation=crashed)
    assert (r.verification_status, r.reason_code) == ("PENDING", "test_crashed")
    assert r.summary.startswith("Inconclusive: Process crashed.")
    # Evidence still wins over a crash.
    r = analyze(START + VIOLATION_APP, package="org.demo.app", instrumentation=crashed)
    assert r.verification_status == "CONFIRMED"
    stopped = parse_instrumentation("INSTRUMENTATION_STATUS: class=a.B\nINSTRUMENTATION_STATUS: "
                                    "test=t\nINSTRUMENTATION_STATUS_CODE: 1\n")
    r = analyze(START + timing(3), package="org.demo.app", instrumentation=stopped)
    assert (r.verification_status, r.reason_code) == ("PENDING", "incomplete")
    ok = parse_instrumentation("INSTRUMENTATION_RESULT: stream=OK (0 tests)\n"
                               "INSTRUMENTATION_CODE: -1\n")
    assert analyze(START, package="org.demo.app", instrumentation=ok).verification_status == \
        "REFUTED"


def test_slow_launch_and_process_death_issues():
    text = (START + line(1000, "ActivityTaskManager",
                         "Displayed org.demo.app/.Main: +6s12ms", "I", 1010)
            + line(1000, "ActivityManager", "Displayed com.other/.Main: +9s1ms", "I", 1010)
            + line(1000, "ActivityManager", "Process org.demo.app (pid 2000) has died: fg TOP",
                   "I", 1010))
    titles = [i.title for i in analyze(text, package="org.demo.app").issues]
    assert "Slow launch: org.demo.app/.Main took 6012 ms" in titles
    assert not any("com.other" in t for t in titles)
    assert "Process org.demo.app died 1 time(s): died: fg TOP" in titles


def test_attribution_by_the_started_component_and_known_other_pids():
    start = line(1000, "ActivityManager", "Start proc 2500:a3e.process/u0a10 for activity "
                 "{org.demo.app/org.demo.app.Vibra}", "I", 1010)
    violation = (line(2500, "StrictMode", "StrictMode policy violation; ~duration=50 ms: "
                                          "android.os.strictmode.DiskReadViolation")
                 + line(2500, "StrictMode", "\tat libcore.io.BlockGuardOs.open(B.java:1)"))
    r = analyze(start + violation, package="org.demo.app")
    assert r.app_pids == [2500] and len(r.violations) == 1
    # A pid known to be another app's does not count even if its stack runs our classes.
    other = OTHER_START + VIOLATION_OTHER.replace("com.other.Thing", "org.demo.app.Thing")
    assert analyze(other, package="org.demo.app").violations == []
    # An unknown pid whose stack runs the package's code counts.
    assert len(analyze(VIOLATION_APP, package="org.demo.app").violations) == 1


def test_no_log_is_pending_not_refuted():
    for text in ("", "e: file:///a.kt:1:2 Unresolved reference: x\nBUILD FAILED in 3s\n"):
        r = analyze(text, package="org.demo.app")
        assert (r.verification_status, r.reason_code) == ("PENDING", "no_log")
        assert r.summary.startswith("Inconclusive: no log entries")
