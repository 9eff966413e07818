"""``droidwire fixer errors FILE|- [--json]`` (docs/design.md §9)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from droidwire.fixer import app

OUTPUT = (
    "> Task :app:compileDebugAndroidTestKotlin FAILED\n"
    "e: file:///ws/app/src/androidTest/java/x/T.kt:12:5 Unresolved reference 'bar'.\n"
    "w: file:///ws/app/src/androidTest/java/x/T.kt:3:1 Parameter 'p' is never used\n"
    "BUILD FAILED in 2s\n"
)

runner = CliRunner()


def test_json_from_file(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text(OUTPUT)
    result = runner.invoke(app, ["errors", str(log), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"errors", "build_failed", "failure"}
    assert data["build_failed"] is True and data["failure"] == "compile"
    err, warn = data["errors"]
    assert err == {
        "file": "/ws/app/src/androidTest/java/x/T.kt",
        "line": 12,
        "column": 5,
        "severity": "error",
        "message": "Unresolved reference 'bar'.",
        "kind": "unresolved_reference",
        "symbol": "bar",
        "location": None,
        "detail": [],
    }
    assert warn["severity"] == "warning" and warn["symbol"] is None
    assert data["failed_tasks"] == [":app:compileDebugAndroidTestKotlin"]


def test_stdin_and_human_output() -> None:
    result = runner.invoke(app, ["errors", "-"], input=OUTPUT)
    assert result.exit_code == 0
    assert "T.kt:12:5: error: Unresolved reference 'bar'." in result.stdout
    assert "failure: compile" in result.stdout


def test_nothing_found_still_exits_zero(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_bytes(b"BUILD SUCCESSFUL in 1s\n\xff\xfe binary junk\n")
    result = runner.invoke(app, ["errors", str(log), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "errors": [],
        "build_failed": False,
        "failure": "none",
        "failed_tasks": [],
        "what_went_wrong": [],
    }


def test_unreadable_input_and_usage_errors_exit_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["errors", str(tmp_path / "missing.log")]).exit_code == 2
    assert runner.invoke(app, ["errors", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["errors"]).exit_code == 2
    assert runner.invoke(app, ["errors", "a", "--no-such-flag"]).exit_code == 2
