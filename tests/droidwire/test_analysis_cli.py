"""The two offline commands: JSON keys of docs/design.md §9 and exit codes."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from droidwire import app

runner = CliRunner()

LOG = ("11-02 09:15:01.250  4321  4321 D StrictMode: StrictMode policy violation; ~duration=512 ms:"
       " android.os.strictmode.DiskReadViolation\n"
       "11-02 09:15:01.250  4321  4321 D StrictMode: \tat org.demo.Store.load(Store.kt:4)\n"
       "11-02 09:15:01.300  4321  4321 I DroidUnblocker: elapsed=512ms\n")

ANALYZE_KEYS = {"entries", "violations", "strict_mode_violations", "has_violations",
                "blocking_time_ms", "anrs", "crashes", "displayed", "issues", "summary",
                "verification_status"}


def test_logcat_analyze_json(tmp_path):
    f = tmp_path / "log.txt"
    f.write_text(LOG)
    res = runner.invoke(app, ["logcat", "analyze", str(f), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert ANALYZE_KEYS <= data.keys()
    assert data["entries"] == 3 and data["has_violations"] is True
    (v,) = data["violations"]
    assert {"kind", "duration_ms", "pid", "tid", "app_frame", "line"} <= v.keys()
    assert v["kind"] == "DiskRead" and v["app_frame"] == "org.demo.Store.load(Store.kt:4)"
    assert data["summary"] == "StrictMode violations: DiskRead | Blocking time: 512ms"
    assert data["verification_status"] == "CONFIRMED"
    for issue in data["issues"]:
        assert {"level", "title", "suggestion"} <= issue.keys()


def test_logcat_analyze_stdin_package_and_human_report():
    violation_only = "".join(LOG.splitlines(keepends=True)[:2])
    res = runner.invoke(app, ["logcat", "analyze", "-", "--package", "com.elsewhere"],
                        input=violation_only)
    assert res.exit_code == 0
    assert "REFUTED" in res.output and "other processes" in res.output
    res = runner.invoke(app, ["logcat", "analyze", "-"], input=LOG)
    assert res.exit_code == 0 and "DiskRead" in res.output and "CONFIRMED" in res.output


def test_empty_and_binary_input_exit_zero(tmp_path):
    f = tmp_path / "bin"
    f.write_bytes(b"\x00\xff\xfe[bad]\n\x1b[31m")
    assert runner.invoke(app, ["logcat", "analyze", str(f), "--json"]).exit_code == 0
    res = runner.invoke(app, ["logcat", "analyze", "-", "--json"], input="")
    assert res.exit_code == 0 and json.loads(res.output)["entries"] == 0


def test_unreadable_and_usage_errors_exit_two(tmp_path):
    assert runner.invoke(app, ["logcat", "analyze", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["logcat", "analyze", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["logcat", "analyze"]).exit_code == 2
    assert runner.invoke(app, ["instrumentation", "parse", str(tmp_path / "x")]).exit_code == 2


def test_instrumentation_parse_json():
    text = ("INSTRUMENTATION_STATUS: class=org.demo.T\nINSTRUMENTATION_STATUS: test=a\n"
            "INSTRUMENTATION_STATUS_CODE: 1\n"
            "INSTRUMENTATION_STATUS: class=org.demo.T\nINSTRUMENTATION_STATUS: test=a\n"
            "INSTRUMENTATION_STATUS_CODE: 0\n"
            "INSTRUMENTATION_STATUS: class=org.demo.T\nINSTRUMENTATION_STATUS: test=b\n"
            "INSTRUMENTATION_STATUS_CODE: 1\n"
            "INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n")
    res = runner.invoke(app, ["instrumentation", "parse", "-", "--json"], input=text)
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert {"tests", "total", "passed", "failed", "errors", "ignored", "run_status",
            "message"} <= data.keys()
    assert [(t["class"], t["name"], t["status"], t["stack"]) for t in data["tests"]] == [
        ("org.demo.T", "a", "passed", None), ("org.demo.T", "b", "error", None)]
    assert (data["total"], data["passed"], data["errors"], data["run_status"]) == (
        2, 1, 1, "crashed")
    human = runner.invoke(app, ["instrumentation", "parse", "-"], input=text)
    assert human.exit_code == 0 and "crashed" in human.output


def test_thresholds_options_and_long_reports():
    timing = "11-02 09:15:01.300  4321  4321 I DroidUnblocker: elapsed=120ms\n"
    res = runner.invoke(app, ["logcat", "analyze", "-", "--json", "--blocking-ms", "100"],
                        input=timing)
    assert json.loads(res.output)["verification_status"] == "CONFIRMED"
    res = runner.invoke(app, ["logcat", "analyze", "-", "--json", "--noise-floor-ms", "200"],
                        input=timing)
    assert json.loads(res.output)["verification_status"] == "REFUTED"
    assert runner.invoke(app, ["logcat", "analyze", "-", "--blocking-ms", "-1"],
                         input=timing).exit_code == 2
    many = "".join(LOG.splitlines(keepends=True)[:2]) * 80
    res = runner.invoke(app, ["logcat", "analyze", "-"], input=many)
    assert res.exit_code == 0 and "and 30 more" in res.output
