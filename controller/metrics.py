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
scrape renders those numbers.

Cluster mode (docs/cluster.md, "Metrics"): every series is either **owned** by one replica —
so ``sum`` over the replicas is the cluster's figure — or **cluster-wide**, emitted by one
replica only (the *reporter*: the live replica with the smallest id; one process on its own is
always the reporter). ``droidwire_cluster_reporter`` is 1 on that replica, 0 on the others.

Owned by each replica:

- ``droidwire_bridges{state}``: ``connected`` and ``reconnecting`` (inside the grace period)
  bridges whose session this replica holds;
- ``droidwire_devices{state}``: devices of the bridges this replica holds, by adb state; a
  state outside adb's vocabulary counts as ``other``, so a bridge cannot put arbitrary text
  into a label;
- ``droidwire_bridge_reconnects_total``: connections of a bridge after its first one, since
  this controller started;
- ``droidwire_rpc_pending``: calls sent or queued to bridges and not yet answered;
- ``droidwire_logcat_streams{kind}``: live logcat streams: ``local`` on this controller's
  bridges (whoever reads them), ``served`` of those relayed to another replica, ``relayed``
  read here from a bridge another replica holds (cluster mode, docs/cluster.md);
- ``droidwire_tunnels{kind}``: live remote adb tunnels (docs/tunnel.md), counted the same
  way: ``local`` running on this controller's bridges, ``served`` of those for a client of
  another replica, ``relayed`` whose client is here and whose bridge another replica holds;
- ``droidwire_screen_viewers{kind}``: live screen viewers (docs/screen.md), counted the same
  way: ``local`` of feeds on this controller's bridges (one per relayed viewer too),
  ``served`` of those for a viewer of another replica, ``relayed`` whose WebSocket is here and
  whose bridge another replica holds;
- ``droidwire_device_busy_seconds_total{device}``: seconds this replica's runs held the
  device (its turn), since the replica started;
- ``droidwire_device_runs_total{device,verdict}``: runs this replica finished on the device.

Cluster-wide, on the reporter only:

- ``droidwire_bridges{state="disconnected"}`` and ``droidwire_devices{state="disconnected"}``:
  bridges (and their devices) known to the store that no replica holds;
- ``droidwire_runs{status}``: runs in the store by status;
- ``droidwire_run_queue_depth``: runs waiting to start: queued, or waiting for a device busy
  with another run;
- ``droidwire_device_queue_length{device}``: runs placed on the device and not finished
  (queued, waiting or running) — the depth placement compares.

``device`` is the device's opaque store id (``uid`` in ``GET /v1/devices``), never its serial
or its bridge's name (docs/design.md §6).
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

from controller.executor.results import RunResult

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
VERDICTS = frozenset({"CONFIRMED", "PARTIAL", "REFUTED", "PENDING"})
OTHER = "other"


@dataclass(slots=True)
class Snapshot:
    """The state-type numbers of one scrape (see the module docstring)."""

    reporter: bool = True
    bridges: Mapping[str, int] = field(default_factory=dict)
    devices: Mapping[str, int] = field(default_factory=dict)
    reconnects: int = 0
    rpc_pending: int = 0
    logcat_streams: Mapping[str, int] = field(default_factory=dict)
    tunnels: Mapping[str, int] = field(default_factory=dict)
    screen_viewers: Mapping[str, int] = field(default_factory=dict)
    runs: Mapping[str, int] = field(default_factory=dict)
    run_queue: int = 0
    device_busy_s: Mapping[str, float] = field(default_factory=dict)  # by device uid
    device_runs: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (uid, verdict)
    device_queue: Mapping[str, int] = field(default_factory=dict)  # by device uid


class StateCollector(Collector):
    """Renders the last :class:`Snapshot` (taken by :meth:`Metrics.refresh`)."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        yield GaugeMetricFamily(
            "droidwire_cluster_reporter",
            "1 on the replica that reports the cluster-wide series, 0 on the others",
            value=1 if snap.reporter else 0,
        )
        bridges = GaugeMetricFamily(
            "droidwire_bridges",
            "Bridges this replica holds, by state; 'disconnected' (held by no replica) on the "
            "reporter only",
            labels=["state"],
        )
        for state in BRIDGE_STATES:
            if state != "disconnected" or snap.reporter:
                bridges.add_metric([state], snap.bridges.get(state, 0))
        yield bridges
        devices = GaugeMetricFamily(
            "droidwire_devices",
            "Devices of the bridges this replica holds, by adb state; 'disconnected' (their "
            "bridge held by no replica) on the reporter only",
            labels=["state"],
        )
        base = {"device": 0, **({"disconnected": 0} if snap.reporter else {})}
        for state, count in sorted({**base, **snap.devices}.items()):
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
        yield _by_kind(
            "droidwire_logcat_streams",
            "Live logcat streams: on this controller's bridges (local), of those read by another "
            "replica (served), read here from another replica's bridge (relayed)",
            snap.logcat_streams)
        yield _by_kind(
            "droidwire_tunnels",
            "Live remote adb tunnels: on this controller's bridges (local), of those for a "
            "client of another replica (served), relayed here from another replica (relayed)",
            snap.tunnels)
        yield _by_kind(
            "droidwire_screen_viewers",
            "Live screen viewers: of feeds on this controller's bridges (local), of those for a "
            "viewer of another replica (served), relayed here from another replica (relayed)",
            snap.screen_viewers)
        busy = CounterMetricFamily(
            "droidwire_device_busy_seconds",
            "Seconds this replica's runs held the device, by device uid", labels=["device"],
        )
        for uid, seconds in sorted(snap.device_busy_s.items()):
            busy.add_metric([uid], seconds)
        yield busy
        outcomes = CounterMetricFamily(
            "droidwire_device_runs",
            "Runs this replica finished on the device, by device uid and verdict",
            labels=["device", "verdict"],
        )
        for (uid, verdict), count in sorted(snap.device_runs.items()):
            outcomes.add_metric([uid, verdict], count)
        yield outcomes
        if not snap.reporter:
            return
        runs = GaugeMetricFamily("droidwire_runs", "Runs in the store, by status", labels=["status"])
        for status in RUN_STATUSES:
            runs.add_metric([status], snap.runs.get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "droidwire_run_queue_depth",
            "Runs waiting to start: queued, or waiting for a device busy with another run",
            value=snap.run_queue,
        )
        queue = GaugeMetricFamily(
            "droidwire_device_queue_length",
            "Runs placed on the device and not finished (queued, waiting or running)",
            labels=["device"],
        )
        for uid, count in sorted(snap.device_queue.items()):
            queue.add_metric([uid], count)
        yield queue


def _by_kind(name: str, documentation: str, counts: Mapping[str, int]) -> GaugeMetricFamily:
    """A gauge of live things by :data:`STREAM_KINDS` (every kind, 0 when none)."""
    gauge = GaugeMetricFamily(name, documentation, labels=["kind"])
    for kind in STREAM_KINDS:
        gauge.add_metric([kind], counts.get(kind, 0))
    return gauge


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
        # (device id BRIDGE~SERIAL, verdict) → runs this process finished there; rendered by
        # device uid (controller.api.sandbox counts them, through the executor's observer).
        self.device_runs: Tally[tuple[str, str]] = Tally()

    def run_finished(self, result: RunResult) -> None:
        """Count a finished run for its device (a run without a device is not counted)."""
        device_id, verdict = result.device_id, result.verification_status
        if device_id is not None and verdict in VERDICTS:
            self.device_runs[(device_id, verdict)] += 1

    async def refresh(self, app_state: Any) -> None:
        """Take the state numbers from the app's services, its hub and store (never fails the scrape: a
        store that does not answer leaves the last numbers in place, and says so in the log)."""
        try:
            self.state.snapshot = await _snapshot(app_state, self.device_runs)
        except Exception:
            log.exception("metrics: could not read the current state")

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def _snapshot(app_state: Any, device_runs: Mapping[tuple[str, str], int]) -> Snapshot:
    from controller.store import Bridge, Device, Run, RunStatus, RunStep

    # The app's services (controller.services.Services), while the controller runs.
    services = getattr(app_state, "services", None)
    hub = getattr(services, "hub", None)
    store = getattr(services, "store", None)
    cluster = getattr(hub, "cluster", None) if hub is not None else None
    snap = Snapshot()
    if cluster is not None:
        snap.reporter = await cluster.reports_cluster()
    held: set[str] = set()  # bridges some replica holds (here, or in the cluster's registry)
    if hub is not None:
        entries = hub.entries()
        snap.bridges = Tally(str(e.state) for e in entries if str(e.state) != "disconnected")
        devices: Tally[str] = Tally()
        for entry in entries:
            if str(entry.state) == "connected":
                held.add(entry.id)
            for _serial, info in entry.live_devices().items():
                devices[info.state if info.state in DEVICE_STATES else OTHER] += 1
        snap.devices = devices
        snap.reconnects = sum(max(e.connections - 1, 0) for e in entries)
        snap.rpc_pending = sum(e.session.pending_count for e in entries)
        snap.logcat_streams = {
            "local": sum(len(e.subscriptions) for e in entries),
            "served": getattr(cluster, "streams_served", 0),
            "relayed": getattr(cluster, "streams_relayed", 0),
        }
        snap.tunnels = {
            "local": len(tunnels.live()) if (tunnels := getattr(hub, "tunnels", None)) else 0,
            "served": getattr(cluster, "tunnels_served", 0),
            "relayed": getattr(cluster, "tunnels_relayed", 0),
        }
        screens = getattr(hub, "screens", None)
        snap.screen_viewers = {
            "local": sum(len(f.viewers) for f in screens.feeds()) if screens else 0,
            "served": getattr(cluster, "screens_served", 0),
            "relayed": getattr(cluster, "screens_relayed", 0),
        }
        remote = getattr(cluster, "remote_bridges", None)
        if snap.reporter and callable(remote):
            held.update(await remote())
    executor = getattr(services, "executor", None)
    busy: Mapping[str, float] = getattr(getattr(executor, "scheduler", None), "busy_seconds", {})
    if store is None:
        return snap
    reconnecting = {e.id for e in hub.entries() if str(e.state) == "reconnecting"} if hub else set()
    async with store.session() as session:
        known = (await session.execute(
            select(Device.id, Device.bridge_id, Bridge.name, Device.serial).join(Bridge)
        )).all()
        uid = {f"{name}~{serial}": str(i) for i, _b, name, serial in known}
        snap.device_busy_s = {uid[d]: s for d, s in busy.items() if d in uid}
        snap.device_runs = {(uid[d], v): n for (d, v), n in device_runs.items() if d in uid}
        if not snap.reporter:
            return snap
        bridge_ids = (await session.execute(select(Bridge.id))).scalars().all()
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
        placed = Run.request["device_id"].as_string()
        active = (await session.execute(
            select(placed, func.count())
            .where(Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]),
                   placed.is_not(None))
            .group_by(placed)
        )).all()
    away = sum(1 for _i, bridge_id, _n, _s in known
               if bridge_id not in held and bridge_id not in reconnecting)
    if away:
        snap.devices = Tally(snap.devices) + Tally({"disconnected": away})
    snap.bridges = {
        **snap.bridges,
        "disconnected": sum(1 for b in bridge_ids if b not in held and b not in reconnecting),
    }
    snap.runs = {str(status): int(n) for status, n in by_status}
    snap.run_queue = snap.runs.get(RunStatus.QUEUED.value, 0) + int(waiting)
    snap.device_queue = {uid[str(d)]: int(n) for d, n in active if str(d) in uid}
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
