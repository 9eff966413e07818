"""Prometheus metrics: one registry per app, names prefixed ``droidwire_``.

Labels never carry serials, names or secrets (docs/design.md §6): the HTTP route label is the
route's template (``/v1/tokens/{token_id}``), never the concrete path. Other components
register their own metrics on ``Metrics.registry``: the hub (``droidwire_bridges_connected``,
``droidwire_bridge_connections_total``, ``droidwire_rpc_calls_total`` and
``droidwire_rpc_duration_seconds`` by method), the sandbox API (``droidwire_sandbox_runs_total``
by verdict and reason, ``droidwire_sandbox_run_seconds``).

What is a *state* rather than an event is read when Prometheus scrapes, not kept up to date
on every change (:class:`StateCollector`): just before ``GET /metrics`` is answered, the
middleware asks :meth:`Metrics.refresh` to read the hub's registry and the store, then the
scrape renders those numbers:

- ``droidwire_bridges{state}``: bridges known to this controller by ``connected``,
  ``reconnecting`` (inside the grace period) and ``disconnected``;
- ``droidwire_devices{state}``: devices by adb state, ``disconnected`` for devices seen before
  whose bridge is not connected; a state outside adb's vocabulary counts as ``other``, so a
  bridge cannot put arbitrary text into a label;
- ``droidwire_bridge_reconnects_total``: connections of a bridge after its first one, since
  this controller started;
- ``droidwire_rpc_pending``: calls sent or queued to bridges and not yet answered;
- ``droidwire_logcat_streams{kind}``: live logcat streams: ``local`` on this controller's
  bridges (whoever reads them), ``served`` of those relayed to another replica, ``relayed``
  read here from a bridge another replica holds (cluster mode, docs/cluster.md);
- ``droidwire_runs{status}``: runs in the store by status (every replica's);
- ``droidwire_run_queue_depth``: runs waiting to start: queued, or waiting for a device busy
  with another run.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "METRICS_PATH", "Metrics", "MetricsMiddleware", "StateCollector"]

log = logging.getLogger("droidwire.controller.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METRICS_PATH = "/metrics"
UNMATCHED_ROUTE = "<unmatched>"
# adb's device states (adb's transport.cpp ``to_string(ConnectionState)``) and ours.
DEVICE_STATES = frozenset({
    "device", "offline", "unauthorized", "authorizing", "connecting", "bootloader",
    "recovery", "rescue", "sideload", "host", "no permissions", "detached", "disconnected",
})
BRIDGE_STATES = ("connected", "reconnecting", "disconnected")
RUN_STATUSES = ("queued", "running", "finished", "cancelled")
STREAM_KINDS = ("local", "served", "relayed")
OTHER = "other"


@dataclass(slots=True)
class Snapshot:
    """The state-type numbers of one scrape (see the module docstring)."""

    bridges: Mapping[str, int] = field(default_factory=dict)
    devices: Mapping[str, int] = field(default_factory=dict)
    reconnects: int = 0
    rpc_pending: int = 0
    logcat_streams: Mapping[str, int] = field(default_factory=dict)
    runs: Mapping[str, int] = field(default_factory=dict)
    run_queue: int = 0


class StateCollector(Collector):
    """Renders the last :class:`Snapshot` (taken by :meth:`Metrics.refresh`)."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        bridges = GaugeMetricFamily(
            "droidwire_bridges", "Bridges known to this controller, by state", labels=["state"]
        )
        for state in BRIDGE_STATES:
            bridges.add_metric([state], snap.bridges.get(state, 0))
        yield bridges
        devices = GaugeMetricFamily(
            "droidwire_devices", "Devices by adb state ('disconnected': bridge away)",
            labels=["state"],
        )
        for state, count in sorted({"device": 0, "disconnected": 0, **snap.devices}.items()):
            devices.add_metric([state], count)
        yield devices
        yield CounterMetricFamily(
            "droidwire_bridge_reconnects",
            "Connections of a bridge after its first, since this controller started",
            value=snap.reconnects,
        )
        yield GaugeMetricFamily(
            "droidwire_rpc_pending", "Calls to bridges not yet answered (sent or queued)",
            value=snap.rpc_pending,
        )
        streams = GaugeMetricFamily(
            "droidwire_logcat_streams",
            "Live logcat streams: on this controller's bridges (local), of those read by another "
            "replica (served), read here from another replica's bridge (relayed)",
            labels=["kind"],
        )
        for kind in STREAM_KINDS:
            streams.add_metric([kind], snap.logcat_streams.get(kind, 0))
        yield streams
        runs = GaugeMetricFamily("droidwire_runs", "Runs in the store, by status", labels=["status"])
        for status in RUN_STATUSES:
            runs.add_metric([status], snap.runs.get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "droidwire_run_queue_depth",
            "Runs waiting to start: queued, or waiting for a device busy with another run",
            value=snap.run_queue,
        )


def _version() -> str:
    try:
        return version("droidwire")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


class Metrics:
    """The app's registry and the HTTP-level metrics every controller has."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        Info("droidwire_build", "droidwire version", registry=self.registry).info(
            {"version": _version()}
        )
        self.http_requests = Counter(
            "droidwire_http_requests",
            "HTTP requests handled, by route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "droidwire_http_request_duration_seconds",
            "HTTP request handling time, by route template",
            ["method", "route"],
            registry=self.registry,
        )

        self.state = StateCollector()
        self.registry.register(self.state)

    async def refresh(self, app_state: Any) -> None:
        """Take the state numbers from the app's hub and store (never fails the scrape: a
        store that does not answer leaves the last numbers in place, and says so in the log)."""
        try:
            self.state.snapshot = await _snapshot(app_state)
        except Exception:
            log.exception("metrics: could not read the current state")

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def _snapshot(app_state: Any) -> Snapshot:
    from controller.store import Bridge, Device, Run, RunStatus, RunStep

    hub = getattr(app_state, "hub", None)
    store = getattr(app_state, "store", None)
    snap = Snapshot()
    live: set[tuple[str, str]] = set()
    if hub is not None:
        entries = hub.entries()
        snap.bridges = Tally(str(e.state) for e in entries)
        devices: Tally[str] = Tally()
        for entry in entries:
            for serial, info in entry.live_devices().items():
                live.add((entry.id, serial))
                devices[info.state if info.state in DEVICE_STATES else OTHER] += 1
        snap.devices = devices
        snap.reconnects = sum(max(e.connections - 1, 0) for e in entries)
        snap.rpc_pending = sum(e.session.pending_count for e in entries)
        cluster = getattr(hub, "cluster", None)
        snap.logcat_streams = {
            "local": sum(len(e.subscriptions) for e in entries),
            "served": getattr(cluster, "streams_served", 0),
            "relayed": getattr(cluster, "streams_relayed", 0),
        }
    if store is not None:
        async with store.session() as session:
            known = (await session.execute(select(Device.bridge_id, Device.serial).join(Bridge))).all()
            by_status = (
                await session.execute(select(Run.status, func.count()).group_by(Run.status))
            ).all()
            waiting = (
                await session.execute(
                    select(func.count())
                    .select_from(RunStep)
                    .join(Run, Run.id == RunStep.run_id)
                    .where(
                        RunStep.kind == "device_busy",
                        RunStep.status == "running",
                        Run.status == RunStatus.RUNNING.value,
                    )
                )
            ).scalar_one()
        away = sum(1 for key in known if tuple(key) not in live)
        if away:
            snap.devices = Tally(snap.devices) + Tally({"disconnected": away})
        snap.runs = {str(status): int(n) for status, n in by_status}
        snap.run_queue = snap.runs.get(RunStatus.QUEUED.value, 0) + int(waiting)
    return snap


class MetricsMiddleware:
    """Count and time HTTP requests (not WebSockets: those are the hub's to measure)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") == METRICS_PATH and scope.get("method") == "GET":
            app = scope.get("app")
            if app is not None:
                await self.metrics.refresh(app.state)
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            method = scope.get("method", "")
            self.metrics.http_requests.labels(method, template, str(status)).inc()
            self.metrics.http_duration.labels(method, template).observe(
                time.perf_counter() - started
            )
