"""Helpers shared by the benchmarks."""

from __future__ import annotations

import contextlib
import signal
import statistics
from typing import Any, TypedDict


class Figure(TypedDict):
    name: str
    value: float
    unit: str
    baseline: float
    ratio: float


def figure(name: str, value: float, unit: str, baseline: float) -> Figure:
    ratio = value / baseline if baseline else float("nan")
    return {"name": name, "value": round(value, 4), "unit": unit,
            "baseline": round(baseline, 4), "ratio": round(ratio, 4)}


def percentile(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    data = sorted(samples)
    k = max(0, min(len(data) - 1, round(p / 100 * (len(data) - 1))))
    return data[k]


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


# The targets (docs/benchmarks.md): figure → (what is bounded, ≤ or ≥, bound). A bound given
# by name is a field of the figure, measured in the same run.
TARGETS: dict[str, tuple[str, str, float | str]] = {
    "rpc_rtt_p50": ("ratio", "≤", 1.3),
    "logcat_lines_per_s": ("ratio", "≥", 0.65),
    "analysis_lines_per_s": ("ratio", "≥", 0.2),
    "fanout_cost": ("ratio", "≤", 1.2),
    "idle_bridge_kb": ("ratio", "≤", 1.6),
    "reconnect_storm_s": ("ratio", "≤", 1.2),
    "loop_delay_p99_ms": ("value", "<", 10.0),
    "fix_round_s": ("ratio", "≤", 0.2),
    "fleet_throughput": ("ratio", "≥", 0.9),
    "tunnel_push_mb_per_s": ("ratio", "≥", 0.5),
    "tunnel_shell_rtt_ms": ("value", "≤", "bound"),  # 2 × baseline + the link's round trip
    "bridge_install_mb": ("value", "≤", 60.0),  # the bridge-only install
    "bridge_idle_rss_mb": ("value", "≤", 45.0),
}


def judged(fig: dict[str, Any]) -> dict[str, Any]:
    """``fig`` with ``target`` (e.g. ``"ratio ≤ 1.3"``) and ``met`` when it has a target."""
    target = TARGETS.get(str(fig.get("name")))
    if target is None:
        return fig
    what, op, given = target
    x = fig.get(what)
    bound = fig.get(given) if isinstance(given, str) else given
    if not _number(x) or not _number(bound):
        return {**fig, "target": f"{what} {op} {given}", "met": False}
    assert isinstance(x, int | float) and isinstance(bound, int | float)
    met = x <= bound if op == "≤" else x >= bound if op == "≥" else x < bound
    return {**fig, "target": f"{what} {op} {bound:g}", "met": bool(met)}


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x == x


def die_with_parent() -> None:
    """Linux: SIGTERM this server when the benchmark that started it dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
