"""The hub's Prometheus metrics (labels: methods and outcomes, never serials or names)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["HubMetrics"]


class HubMetrics:
    """The hub's Prometheus metrics (labels: methods and outcomes, never serials or names)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.bridges = Gauge(
            "droidwire_bridges_connected", "Bridges with a live connection", registry=registry
        )
        self.calls = Counter(
            "droidwire_rpc_calls", "RPCs to bridges, by method and outcome",
            ["method", "outcome"], registry=registry,
        )
        self.duration = Histogram(
            "droidwire_rpc_duration_seconds", "RPC time from call to result, by method",
            ["method"], registry=registry,
        )
        self.reconnects = Counter(
            "droidwire_bridge_connections", "Bridge connections accepted", registry=registry
        )
        # Labelled children by label values: ``labels()`` takes a lock and builds a key on
        # every call, which showed on the RPC hot path (the label sets are small and fixed).
        self._calls: dict[tuple[str, str], Any] = {}
        self._durations: dict[str, Any] = {}

    def call_done(self, method: str, outcome: str, seconds: float) -> None:
        """Count one finished call (``method`` a registered name or ``<unknown>``)."""
        counter = self._calls.get((method, outcome))
        if counter is None:
            counter = self._calls[(method, outcome)] = self.calls.labels(method, outcome)
        counter.inc()
        histogram = self._durations.get(method)
        if histogram is None:
            histogram = self._durations[method] = self.duration.labels(method)
        histogram.observe(seconds)
