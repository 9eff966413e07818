"""Each benchmark module runs at a tiny size and returns well-formed figures.

No assertion on any value or on time (benchmarks measure, tests check behaviour): only that
each module gives the figures it promises (docs/design.md §9 names), as JSON-ready numbers with
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
    bench_bridge,
    bench_fleet,
    bench_idle,
    bench_kotlinc,
    bench_link,
    bench_push,
    bench_sandbox,
    bench_screen,
    bench_shell,
    bench_storm,
    bench_tunnel,
)
from tests.conftest import require_service

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


@pytest.mark.slow
def test_kotlinc(kotlinc_checker: object) -> None:  # the fixture: skip/fail without kotlinc
    figures = check(bench_kotlinc.run(quick=True, rounds=1, colds=1),
                    {"fix_round_s", "kotlinc_check_rss_mb"})
    assert all(f["value"] > 0 and f["baseline"] > 0 for f in figures)


def test_link() -> None:
    check(bench_link.run(quick=True), {"rpc_rtt_p50", "rpc_rtt_p99", "logcat_lines_per_s"})


@pytest.mark.adb
@pytest.mark.slow
def test_push() -> None:
    [fig] = check(bench_push.run(quick=True, size_mib=1, reps=1), {"push_mb_per_s"})
    assert fig["value"] > 0 and fig["baseline"] > 0


@pytest.mark.adb
def test_tunnel() -> None:
    figures = check(bench_tunnel.run(quick=True, size_mib=1, reps=1, shells=2),
                    {"tunnel_push_mb_per_s", "tunnel_shell_rtt_ms"})
    assert all(f["value"] > 0 and f["baseline"] > 0 for f in figures)
    shell = next(f for f in figures if f["name"] == "tunnel_shell_rtt_ms")
    # The bound is measured in the same run: twice the direct figure plus the link's round
    # trip, which is the tunnel's WebSocket's and the bridge's link's pings added.
    assert shell["link_rtt_ms"] > 0
    assert shell["bound"] == pytest.approx(2 * shell["baseline"] + shell["link_rtt_ms"],
                                           abs=1e-3)
    # The floor: the same streams through three bare relay processes, measured too.
    assert shell["relay_floor_ms"] > 0


@pytest.mark.adb
@pytest.mark.slow
def test_shell() -> None:
    [fig] = check(bench_shell.run(quick=True, batch=2, reps=1), {"remote_shell_p50"})
    assert fig["value"] > 0 and fig["baseline"] > 0


@pytest.mark.adb
@pytest.mark.slow
def test_sandbox() -> None:
    figs = check(bench_sandbox.run(quick=True, devices=2, reps=1),
                 {"sandbox_overhead_ms", "fanout_cost", "fanout_cost_instant"})
    fanouts = [f for f in figs if f["name"].startswith("fanout_cost")]
    assert [f["n"] for f in fanouts] == [2, 2]
    paced = next(f for f in fanouts if f["name"] == "fanout_cost")
    assert "paced 'phone'" in paced["notes"]


@pytest.mark.adb
@pytest.mark.slow
def test_fleet() -> None:
    require_service("DATABASE_URL")
    require_service("REDIS_URL")
    [fig] = check(bench_fleet.run(quick=True, devices=2, per_device=1, paces=("phone",)),
                  {"fleet_throughput"})
    assert fig["n"] == 2 and fig["unit"] == "runs/min" and "paced 'phone'" in fig["notes"]


def test_fleet_is_skipped_without_its_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert bench_fleet.run(quick=True) == []


@pytest.mark.adb
@pytest.mark.slow
def test_bridge() -> None:
    install, rss, start = sorted(
        check(bench_bridge.run(quick=True, starts=1),
              {"bridge_install_mb", "bridge_idle_rss_mb", "bridge_start_to_welcome_s"}),
        key=lambda f: ["bridge_install_mb", "bridge_idle_rss_mb",
                       "bridge_start_to_welcome_s"].index(f["name"]))
    # The bridge-only install is a part of the full one, and both were measured.
    assert 0 < install["value"] < install["baseline"]
    assert rss["value"] > 0 and start["value"] > 0


@pytest.mark.slow
def test_idle() -> None:
    [fig] = check(bench_idle.run(quick=True, steps=(10,), settle_s=0.0), {"idle_bridge_kb"})
    # Every bridge that was not refused is counted, and refusals are reported, not hidden.
    assert fig["n"] + fig["refused"] + fig["late"] == 10
    assert "notes" in fig


@pytest.mark.adb
@pytest.mark.slow
def test_screen() -> None:
    import os

    names = {"stream_cost"}
    if os.path.exists(bench_screen.CHROMIUM):
        names |= {"screen_fps", "screen_latency_p50", "screen_latency_p95", "tap_to_frame_ms"}
    figures = check(bench_screen.run(quick=True, window_s=1.0, taps=1, viewers=2), names)
    fps = [f for f in figures if f["name"] == "screen_fps"]
    assert all(f["baseline"] > 0 for f in fps)  # the phone produced frames in the window


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


@pytest.mark.parametrize(
    ("name", "value", "ratio", "met"),
    [
        ("rpc_rtt_p50", 0.1, 1.3, True),
        ("rpc_rtt_p50", 0.1, 1.31, False),
        ("logcat_lines_per_s", 1e6, 0.65, True),
        ("logcat_lines_per_s", 1e6, 0.5, False),
        ("loop_delay_p99_ms", 9.9, 5.0, True),  # a bound on the value, not the ratio
        ("loop_delay_p99_ms", 10.0, 0.5, False),
        ("remote_shell_p50", 30.0, 1.2, None),  # no target
        ("bridge_install_mb", 60.0, 0.2, True),
        ("bridge_install_mb", 61.0, 0.2, False),
        ("bridge_idle_rss_mb", 46.0, 1.0, False),
    ],
)
def test_each_figure_is_judged_against_its_target(
    name: str, value: float, ratio: float, met: bool | None
) -> None:
    from bench.common import judged

    fig = judged({"name": name, "value": value, "unit": "x", "baseline": 1.0, "ratio": ratio})
    assert fig.get("met") is met
    assert ("target" in fig) is (met is not None)


@pytest.mark.parametrize(("value", "bound", "met"), [
    (4.0, 4.0, True), (4.1, 4.0, False), (1.0, None, False), (1.0, float("nan"), False)])
def test_a_bound_measured_in_the_run_is_read_from_the_figure(
        value: float, bound: float | None, met: bool) -> None:
    from bench.common import judged

    fig = judged({"name": "tunnel_shell_rtt_ms", "value": value, "unit": "ms", "baseline": 1.0,
                  "ratio": value, "bound": bound})
    assert fig["met"] is met
    measured = bound is not None and bound == bound
    assert fig["target"] == (f"value ≤ {bound:g}" if measured else "value ≤ bound")


def test_the_table_shows_targets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake(quick: bool) -> list[dict[str, Any]]:
        return [{"name": "rpc_rtt_p50", "value": 0.2, "unit": "ms", "baseline": 0.1,
                 "ratio": 2.0, "n": 300}]

    module = types.ModuleType("bench.bench_fake")
    module.run = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.bench_fake", module)
    monkeypatch.setattr(runner, "_modules", lambda names: ["bench_fake"])
    monkeypatch.setenv("COLUMNS", "200")
    assert runner.main(["--quick"]) == 0
    out = capsys.readouterr()
    [line] = [json.loads(x) for x in out.out.splitlines()]
    assert line["target"] == "ratio ≤ 1.3" and line["met"] is False
    assert "ratio ≤ 1.3" in out.err and "missed" in out.err
