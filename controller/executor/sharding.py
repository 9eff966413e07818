"""Sharding (docs/sandbox.md, "Sharding"): one instrumented suite split over several devices.

``shard: N`` (``droidwire run --shard N``) splits the test file's test classes — or, when it has
fewer classes than devices, its test methods (``Cls#method``) — over N devices matching the
selectors, each shard run with ``-e class A,B``. Shards are balanced by the units' durations in
earlier sharded runs of the same units when known (a unit's share of its shard's ``run_ms``,
by test count), else by their test counts: longest first onto the least-loaded shard. A failed
or erring test is run again, alone, on another shard's device; the shards' results are merged
into one: the tests of every shard (each naming its ``device``, a retried one ``retried_on``),
the verdict from all the evidence, and ``shards`` with each device's detail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from controller.analysis.verdict import Status, summary_line
from controller.executor.request import MAX_SHARDS
from controller.executor.results import RunResult
from fixer.prompt import package_of

__all__ = [
    "MAX_SHARDS",
    "Units",
    "discover_units",
    "merge_results",
    "merge_retry",
    "split",
    "unit_durations",
]

_CLASS = re.compile(r"^(?:@[\w.]+(?:\([^)]*\))?\s+|(?:public|internal|open|abstract|final)\s+)*"
                    r"class\s+([A-Za-z_]\w*)", re.M)
_TEST = re.compile(r"@(?:org\.junit\.)?Test\b(?:\([^)]*\))?\s+(?:@[\w.]+(?:\([^)]*\))?\s+)*"
                   r"(?:(?:public|open|override|suspend)\s+)*fun\s+`?([A-Za-z_][\w ]*?)`?\s*\(")
_ORDER = {Status.CONFIRMED.value: 0, Status.PARTIAL.value: 1, Status.REFUTED.value: 2,
          Status.PENDING.value: 3}


class Units:
    """A file's test classes (fully qualified) and each one's test methods."""

    def __init__(self, classes: Mapping[str, list[str]]) -> None:
        self.classes = dict(classes)

    def for_devices(self, devices: int) -> list[str]:
        """What to split over ``devices``: the classes, or the methods when there are fewer
        classes than devices (and more methods than classes)."""
        methods = [f"{c}#{m}" for c, ms in self.classes.items() for m in ms]
        if len(self.classes) < devices and len(methods) > len(self.classes):
            return methods
        return list(self.classes)

    def tests_in(self, unit: str) -> int:
        cls, _, method = unit.partition("#")
        return 1 if method else max(len(self.classes.get(cls, [])), 1)


def discover_units(code: str) -> Units:
    """The top-level classes of ``code`` that declare ``@Test`` methods, in order."""
    package = package_of(code)
    starts = [(m.start(), m.group(1)) for m in _CLASS.finditer(code)]
    classes: dict[str, list[str]] = {}
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
        methods = [m.group(1).strip() for m in _TEST.finditer(code, start, end)]
        if methods:
            classes[f"{package}.{name}" if package else name] = methods
    return Units(classes)


def split(units: Sequence[str], weights: Mapping[str, float], shards: int) -> list[list[str]]:
    """``units`` over at most ``shards`` non-empty shards, heaviest first onto the lightest
    shard (longest processing time first); each shard keeps the units' own order."""
    count = max(1, min(shards, len(units)))
    loads = [0.0] * count
    assigned: list[list[str]] = [[] for _ in range(count)]
    order = {u: i for i, u in enumerate(units)}
    for unit in sorted(units, key=lambda u: (-weights.get(u, 1.0), order[u])):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        assigned[lightest].append(unit)
        loads[lightest] += weights.get(unit, 1.0)
    return [sorted(shard, key=order.__getitem__) for shard in assigned]


def unit_durations(history: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each unit's latest known duration (ms) from earlier merged results' ``unit_ms``
    (newest first)."""
    out: dict[str, float] = {}
    for result in history:
        for unit, ms in dict(result.get("unit_ms") or {}).items():
            if isinstance(ms, (int, float)) and unit not in out:
                out[str(unit)] = float(ms)
    return out


def merge_retry(result: RunResult, retry: RunResult, device_id: str) -> None:
    """Fold a retry on another device into a shard's result: each retried test takes its
    latest status, counts the attempt, names the device (``retried_on``); a test that passed
    there is ``flaky``, its first failure kept as ``first_stack``."""
    by_key = {(t["class"], t["name"]): t for t in result.tests}
    for record in retry.tests:
        test = by_key.get((record["class"], record["name"]))
        if test is None:
            continue
        first = test.get("first_stack", test.get("stack"))
        test.update(status=record["status"], stack=record.get("stack"),
                    attempts=int(test.get("attempts") or 1) + 1, retried_on=device_id)
        if record["status"] == "passed":
            test["flaky"] = True
            test["first_stack"] = first


def merge_results(
    lead_id: str, shards: Sequence[Sequence[str]], results: Sequence[RunResult],
    units: Units, retries: Sequence[RunResult] = (),
) -> RunResult:
    """One result for the sharded run ``lead_id`` from its shards' results (in shard order)
    and the retries' (their evidence counts too)."""
    evidence = [*results, *retries]
    best = min(evidence, key=lambda r: _ORDER.get(r.verification_status, 3))
    status = best.verification_status
    if status == Status.REFUTED.value and any(
        r.verification_status != Status.REFUTED.value for r in results
    ):
        # A shard that could not vouch for its tests: the suite is not refuted as a whole.
        best = next(r for r in results if r.verification_status != Status.REFUTED.value)
        status = best.verification_status
    lines = sorted({k for r in evidence for k in r.strict_mode_violations})
    kinds = list(dict.fromkeys(k for r in evidence for k in r.violation_kinds))
    blocking = max((r.blocking_time_ms for r in evidence), default=-1)
    tests: list[dict[str, Any]] = []
    shard_out: list[dict[str, Any]] = []
    unit_ms: dict[str, float] = {}
    for classes, result in zip(shards, results, strict=True):
        for test in result.tests:
            tests.append({**test, "device": result.device_id})
        run_ms = result.timings.get("run_ms")
        if isinstance(run_ms, int) and result.tests:
            weight = sum(units.tests_in(u) for u in classes) or 1
            for unit in classes:
                unit_ms[unit] = run_ms * units.tests_in(unit) / weight
        shard_out.append({
            "run_id": result.run_id, "device": result.device,
            "classes": list(classes), "verification_status": result.verification_status,
            "reason_code": result.reason_code, "summary": result.summary,
            "blocking_time_ms": result.blocking_time_ms,
            "tests": len(result.tests), "timings": result.timings,
        })
    merged = best.model_copy(deep=True, update={
        "run_id": lead_id,
        "device": None,
        "strict_mode_violations": lines,
        "violation_kinds": kinds,
        "has_violations": bool(lines),
        "blocking_time_ms": blocking,
        "tests": tests,
        "shards": shard_out,
        "unit_ms": unit_ms,
        "violations": [v for r in evidence for v in r.violations or []],
        "anrs": [a for r in evidence for a in r.anrs],
        "crashes": [c for r in evidence for c in r.crashes],
        "timings": {"total_ms": max((r.timings.get("total_ms") or 0 for r in results),
                                    default=0)},
    })
    if status != Status.PENDING.value:
        merged.summary = summary_line(kinds, blocking)
    return merged
