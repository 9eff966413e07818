"""``deploy/grafana/droidwire-fleet.json``: a Grafana dashboard whose queries name only series
the controller exports, with the labels it puts on them (so the dashboard cannot drift from
``controller/metrics.py``)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from controller.api.sandbox import _observer
from controller.executor import RunResult
from controller.metrics import Metrics, Snapshot
from tests.deploy.support import DEPLOY

DASHBOARD = DEPLOY / "grafana" / "droidwire-fleet.json"
_SERIES = re.compile(r"\b(droidwire_[a-z_]+)(?:\{([^}]*)\})?")
_BY = re.compile(r"\bby \(([^)]*)\)")


def exported() -> dict[str, set[str]]:
    """Every sample name a controller renders (state, per device, sandbox), with its labels."""
    metrics = Metrics()
    metrics.state.snapshot = Snapshot(
        reporter=True, device_busy_s={"u1": 1.0}, device_runs={("u1", "CONFIRMED"): 1},
        device_queue={"u1": 1},
    )
    observe = _observer(SimpleNamespace(metrics=metrics))
    assert observe is not None
    observe(RunResult(run_id="r1", verification_status="CONFIRMED", reason_code="anr",
                      timings={"total_ms": 5}))
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_the_dashboard_queries_only_exported_series_and_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    names = exported()
    used = set()
    for expr in queries(dashboard):
        for name, matchers in _SERIES.findall(expr):
            assert name in names, f"{name} is not exported ({expr})"
            used.add(name)
            for matcher in filter(None, (m.strip() for m in matchers.split(","))):
                label = re.split(r"[=!~]", matcher, maxsplit=1)[0].strip()
                assert label in names[name], f"{name} has no label {label!r}"
        series = [name for name, _ in _SERIES.findall(expr)]
        for grouping in _BY.findall(expr):
            for label in (x.strip() for x in grouping.split(",")):
                assert any(label in names[n] for n in series), f"no {label!r} in {expr}"
    # What a lab alerts on is on the board.
    for wanted in ("droidwire_devices", "droidwire_device_busy_seconds_total",
                   "droidwire_device_queue_length", "droidwire_device_runs_total",
                   "droidwire_run_queue_depth"):
        assert wanted in used, wanted
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
