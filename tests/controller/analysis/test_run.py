"""A whole sandbox run as the executor sees it: logcat -d -v threadtime plus am instrument -r."""

from __future__ import annotations

from controller.analysis import analyze, parse_instrumentation


def L(pid: int, tid: int, level: str, tag: str, msg: str, t: str = "10:00:00.000") -> str:
    return f"11-30 {t} {pid:5d} {tid:5d} {level} {tag:<8}: {msg}\n"


LOGCAT = (
    "--------- beginning of main\n"
    + L(612, 640, "I", "ActivityManager", "Force stopping org.demo.notes appid=10123 user=0")
    + L(612, 640, "I", "ActivityManager",
        "Start proc 8123:org.demo.notes/u0a123 for added application org.demo.notes")
    + L(2001, 2001, "D", "StrictMode", "StrictMode policy violation; ~duration=700 ms: "
                                       "android.os.strictmode.DiskReadViolation")
    + L(2001, 2001, "D", "StrictMode", "\tat com.vendor.launcher.Cache.load(Cache.java:5)")
    + L(8123, 8150, "I", "TestRunner", "run started: 2 tests")
    + L(8123, 8150, "I", "TestRunner", "started: readsNotes(org.demo.notes.NotesTest)")
    + L(8123, 8123, "D", "StrictMode", "StrictMode policy violation; ~duration=45 ms: "
                                       "android.os.strictmode.DiskReadViolation")
    + L(8123, 8123, "D", "StrictMode",
        "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1)")
    + L(8123, 8123, "D", "StrictMode", "\tat libcore.io.BlockGuardOs.open(BlockGuardOs.java:2)")
    + L(8123, 8123, "D", "StrictMode", "\tat org.demo.notes.NoteStore.load(NoteStore.kt:41)")
    + L(2001, 2001, "W", "Looper", "Slow dispatch took 120ms")
    + L(8123, 8150, "I", "DroidUnblocker", "elapsed=52ms")
    + L(8123, 8150, "I", "TestRunner", "finished: readsNotes(org.demo.notes.NotesTest)")
    + L(8123, 8150, "I", "TestRunner", "started: idle(org.demo.notes.NotesTest)")
    + L(8123, 8150, "I", "DroidUnblocker", "elapsed=3ms")
    + L(8123, 8150, "I", "TestRunner", "finished: idle(org.demo.notes.NotesTest)")
    + L(8123, 8150, "I", "TestRunner", "run finished: 2 tests, 0 failed, 0 ignored")
    + L(612, 640, "E", "ActivityManager", "ANR in com.vendor.launcher (com.vendor.launcher/.Home)")
    + L(612, 640, "E", "ActivityManager", "PID: 2001")
    + L(612, 640, "E", "ActivityManager", "Reason: Input dispatching timed out")
)

INSTRUMENT = "".join(
    f"INSTRUMENTATION_STATUS: class=org.demo.notes.NotesTest\n"
    f"INSTRUMENTATION_STATUS: test={name}\nINSTRUMENTATION_STATUS_CODE: {code}\n"
    for name in ("readsNotes", "idle") for code in (1, 0)
) + "INSTRUMENTATION_RESULT: stream=\n\nTime: 1.2\n\nOK (2 tests)\n\n\nINSTRUMENTATION_CODE: -1\n"


def test_sandbox_run():
    inst = parse_instrumentation(INSTRUMENT)
    assert [t.status for t in inst.tests] == ["passed", "passed"] and inst.run_status == "ok"
    r = analyze(LOGCAT, package="org.demo.notes", instrumentation=inst)
    j = r.to_json()
    assert j["verification_status"] == "CONFIRMED" and j["reason_code"] == "strict_mode_violation"
    assert j["summary"] == "StrictMode violations: DiskRead | Blocking time: 52ms"
    (v,) = j["violations"]
    assert (v["pid"], v["duration_ms"], v["app_frame"], v["test"]) == (
        8123, 45, "org.demo.notes.NoteStore.load(NoteStore.kt:41)",
        "org.demo.notes.NotesTest#readsNotes")
    assert j["strict_mode_violations"] == [v["line"]]
    assert [(t["name"], t["status"], t["blocking_time_ms"], t["violations"]) for t in j["tests"]] \
        == [("readsNotes", "passed", 52, ["DiskRead"]), ("idle", "passed", 3, [])]
    assert j["anrs"] == [] and len(j["other_anrs"]) == 1 and len(j["other_violations"]) == 1
    assert j["app_pids"] == [8123]
    levels = {i["kind"]: i["level"] for i in j["issues"]}
    assert levels["strict_mode"] == "error" and levels["other_processes"] == "info"
    assert "main_thread_blocked" in levels    # 52 ms is above the 16 ms floor: a warning
    assert levels["main_thread_blocked"] == "warning"
