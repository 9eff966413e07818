"""Helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
from typing import TypedDict


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
