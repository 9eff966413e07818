"""Arbitrary text never raises, and the results keep their JSON shape."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.analysis import analyze, parse_instrumentation

# Fragments real logs are made of, so that the generator reaches the interesting branches.
FRAGMENTS = [
    "11-02 09:15:01.250  4321  4321 D StrictMode: ", "StrictMode policy violation",
    "; ~duration=", " ms: ", "android.os.strictmode.DiskReadViolation", "android.os.StrictMode$",
    "StrictModeDiskReadViolation: policy=31 violation=2", "\tat ", "org.demo.A.b(A.kt:1)",
    "Caused by: ", "FATAL EXCEPTION: main", "Process: org.demo, PID: 12", "ANR in ", "PID: ",
    "Reason: ", "Displayed org.demo/.M: +", "1s5ms", "DroidUnblocker: elapsed=", "ms",
    "E/AndroidRuntime(  12): ", "2024-01-01 00:00:00.000 12-13/org.demo D/Tag: ", "\n", " ",
    "--------- beginning of main", "[ 01-01 00:00:00.000 12:13 D/T ]", "TestRunner: started: ",
    "t(org.demo.T)", "# via Binder call with stack:", "... 3 more", "Start proc 12:org.demo/u0",
    "INSTRUMENTATION_STATUS: ", "class=", "test=", "INSTRUMENTATION_STATUS_CODE: ", "-2",
    "INSTRUMENTATION_RESULT: shortMsg=", "INSTRUMENTATION_CODE: ", "stack=", "\t", "`", ",",
    "A resource was acquired at attached stack trace but never released", "am_anr: [0,1,x,2,",
]
texts = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=60).map(
        "".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.sampled_from([None, "org.demo"]))
def test_analyze_never_raises(text, package):
    r = analyze(text, package=package)
    data = json.loads(json.dumps(r.to_json()))
    assert data["verification_status"] in ("CONFIRMED", "PARTIAL", "REFUTED", "PENDING")
    assert data["blocking_time_ms"] >= -1
    assert data["has_violations"] == bool(data["violations"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_instrumentation_never_raises(text):
    r = parse_instrumentation(text).to_json()
    assert r["run_status"] in ("ok", "crashed", "failed", "incomplete")
    assert r["total"] == len(r["tests"])


def _slow_path(text: str, package: str | None) -> dict:
    """The analysis with every line built and fed (no fast path)."""
    from controller.analysis.analyzer import _State
    from controller.analysis.lines import ParsedLog, iter_lines
    from controller.analysis.models import Thresholds

    stats = ParsedLog([])
    state = _State(package)
    for ln in iter_lines(text, stats):
        state.feed(ln)
    state.close_all()
    return state.result(stats.entries, stats.total, stats.damaged, dict(stats.formats), None,
                        Thresholds(), None, None).to_json()


THREADTIME_LINES = st.lists(
    st.tuples(st.sampled_from([100, 200, 300]), st.sampled_from([100, 101, 200]),
              st.sampled_from(["StrictMode", "Chatty", "AndroidRuntime", "ActivityManager",
                               "DroidUnblocker", "TestRunner"]),
              st.sampled_from([*FRAGMENTS, "hello", "\tat org.demo.A.b(A.kt:1)",
                                           "StrictMode policy violation; ~duration=20 ms: "
                                           "android.os.strictmode.DiskReadViolation"]),
              st.booleans()),
    max_size=40,
).map(lambda rows: "".join(
    (f"11-02 09:15:01.250 {pid:5d} {tid:5d} D {tag}: {msg}\n" if prefixed else f"{msg}\n")
    for pid, tid, tag, msg, prefixed in rows))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(THREADTIME_LINES, st.sampled_from([None, "org.demo"]))
def test_fast_path_changes_nothing(text, package):
    assert analyze(text, package=package).to_json() == _slow_path(text, package)


N = 50_000
PATHOLOGICAL = [
    "I ActivityManager: Displayed " + "a/" * N,
    "11-02 09:15:01.250  1  1 I TestRunner: started: " + "a(" * N,
    "FATAL EXCEPTION: main\njava.lang.X: " + ": a.b.C" * (N // 7),
    "FATAL EXCEPTION: main\n" + "A" * N,
    "FATAL EXCEPTION: main\n" + "a." * N + "!",
    "Start proc x for " + "pid= " * N,
    "StrictMode policy violation: " + "a." * N,
    "Fatal signal 1 (X) " + "pid 1 (" * N,
    "INSTRUMENTATION_STATUS: stream=" + "a" * N + "\nTime: " + "1" * N,
    "11-02 09:15:01.250  1  1 I am_anr: [0," + "1," * N,
    "a" + " " * N + "b",
    "01-01 00:00:00.000 1 1 D x" + " " * N,
    "\n".join(["StrictMode policy violation: x"] + ["\tat " + "a(" * 50] * 2000),
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_input_stays_linear(text):
    # No timing assertion: a quadratic pattern would hang here until pytest-timeout fails it.
    analyze(text)
    parse_instrumentation(text)
