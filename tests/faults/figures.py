"""Figures of the fault suite, and the profile that sizes it.

``FAULTS_PROFILE`` picks the size: ``ci`` (the default, what ``make test`` runs: a few
thousand fuzz inputs, ~10 cuts) or ``full`` (what ``make faults`` runs: ≥ 100,000 decoder
inputs, 200 cuts, 10,000 reconnect races). Tests call :func:`record` with what they measured;
when ``DROIDWIRE_FAULTS_FIGURES`` names a file (``tests.faults.report`` sets it), each figure
is appended there as one JSON line, and the report prints them as a table.

A figure marked ``must_be_zero`` is also asserted by the test that records it, so the CI
profile inside ``make test`` fails on it too; the report exits non-zero on any of them.
Times are reported, never asserted (they come from the test-scaled settings).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FULL", "PROFILE", "percentile", "record", "record_times", "size"]

PROFILE = os.environ.get("FAULTS_PROFILE", "ci").strip().lower() or "ci"
FULL = PROFILE == "full"
FIGURES_ENV = "DROIDWIRE_FAULTS_FIGURES"


def size(full: int, ci: int) -> int:
    """How many of something this profile runs."""
    return full if FULL else ci


def record(
    area: str, name: str, value: float | int | str, *, unit: str = "", must_be_zero: bool = False
) -> None:
    """Report one figure (a no-op unless the report collects them)."""
    target = os.environ.get(FIGURES_ENV)
    if not target:
        return
    line = {
        "area": area,
        "name": name,
        "value": value,
        "unit": unit,
        "must_be_zero": must_be_zero,
        "profile": PROFILE,
    }
    with Path(target).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[rank]


def record_times(area: str, name: str, seconds: Sequence[float]) -> None:
    """Median and p99 of a list of durations, in milliseconds."""
    if not seconds:
        record(area, f"{name} (no samples)", "-")
        return
    record(area, f"{name} median", round(statistics.median(seconds) * 1000, 1), unit="ms")
    record(area, f"{name} p99", round(percentile(seconds, 0.99) * 1000, 1), unit="ms")
