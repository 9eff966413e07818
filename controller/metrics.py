"""Prometheus metrics: one registry per app, names prefixed ``droidwire_``.

Labels never carry serials, names or secrets (DESIGN.md §6): the HTTP route label is the
route's template (``/v1/tokens/{token_id}``), never the concrete path. Other components
(the hub, the executor) register their own metrics on ``Metrics.registry``.
"""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "Metrics", "MetricsMiddleware"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED_ROUTE = "<unmatched>"


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

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Count and time HTTP requests (not WebSockets: those are the hub's to measure)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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
