"""Each benchmark module runs at a tiny size and returns well-formed figures.

No assertion on any value or on time (benchmarks measure, tests check behaviour): only that
each module gives the figures it promises (DESIGN.md §9 names), as JSON-ready numbers with
the ratio of value to baseline, and that ``python -m bench`` prints one JSON line per figure.
"""

from __future__ import annotations

import json
import math
import sys
import types
from typing import Any

import pytest

import bench.__main__ as runner
from bench import (
    bench_analysis,
    bench_idle,
    bench_link,
    bench_push,
    bench_sandbox,
    bench_shell,
    bench_storm,
)

KEYS = ("name", "value", "unit", "baseline", "ratio")


def check(figures: list[Any], names: set[str]) -> list[dict[str, Any]]:
    assert {f["name"] for f in figures} == names
    for fig in figures:
        assert set(KEYS) <= set(fig)
        assert isinstance(fig["unit"], str) and fig["unit"]
        for key in ("value", "baseline", "ratio"):
            assert isinstance(fig[key], int | float) and not isinstance(fig[key], bool)
            assert math.isfinite(fig[key]), (fig["name"], key, fig[key])
        if fig["baseline"]:
            assert fig["ratio"] == pytest.approx(fig["value"] / fig["baseline"], rel=1e-2,
                                                 abs=1e-3)
        json.dumps(fig)  # one JSON line each
    return list(figures)


def test_analysis() -> None:
    check(bench_analysis.run(quick=True), {"analysis_lines_per_s"})


def test_link() -> None:
    check(bench_link.run(quick=True), {"rpc_rtt_p50", "rpc_rtt_p99", "logcat_lines_per_s"})


@pytest.mark.adb
@pytest.mark.slow
def test_push() -> None:
    [fig] = check(bench_push.run(quick=True, size_mib=1, reps=1), {"push_mb_per_s"})
    assert fig["value"] > 0 and fig["baseline"] > 0


@pytest.mark.adb
@pytest.mark.slow
def test_shell() -> None:
    [fig] = check(bench_shell.run(quick=True, batch=2, reps=1), {"remote_shell_p50"})
    assert fig["value"] > 0 and fig["baseline"] > 0


@pytest.mark.adb
@pytest.mark.slow
def test_sandbox() -> None:
    figs = check(bench_sandbox.run(quick=True, devices=2, reps=1),
                 {"sandbox_overhead_ms", "fanout_cost"})
    fanout = next(f for f in figs if f["name"] == "fanout_cost")
    assert fanout["n"] == 2


@pytest.mark.slow
def test_idle() -> None:
    [fig] = check(bench_idle.run(quick=True, steps=(10,), settle_s=0.0), {"idle_bridge_kb"})
    # Every bridge that was not refused is counted, and refusals are reported, not hidden.
    assert fig["n"] + fig["refused"] + fig["late"] == 10
    assert "notes" in fig


@pytest.mark.slow
def test_storm() -> None:
    storm, loop = sorted(check(bench_storm.run(quick=True, n=10, reps=1),
                               {"reconnect_storm_s", "loop_delay_p99_ms"}),
                         key=lambda f: f["name"] != "reconnect_storm_s")
    assert storm["n"] == 10 and storm["all_back"] is True
    assert loop["unit"] == "ms"


def test_runner_prints_one_json_line_per_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake(quick: bool) -> list[dict[str, Any]]:
        return [{"name": "x", "value": 2.0, "unit": "s", "baseline": 1.0, "ratio": 2.0,
                 "notes": "quick" if quick else "full"}]

    module = types.ModuleType("bench.bench_fake")
    module.run = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.bench_fake", module)
    monkeypatch.setattr(runner, "_modules", lambda names: ["bench_fake"])
    assert runner.main(["--quick"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [fake(True)[0]]
