"""Arbitrary text never raises, and the results keep their JSON shape."""

from __future__ import annotations

import json

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
