"""The bridge's own Prometheus metrics, on an optional local port.

Off by default. ``droidwire bridge --metrics-port PORT`` serves ``/metrics`` on
``127.0.0.1:PORT`` (loopback only: the host's own Prometheus or agent scrapes it, and
nothing is exposed to the network). Everything is read
from the running :class:`~device_bridge.bridge.Bridge` when scraped, so the bridge's code
carries no metrics calls:

- ``droidwire_bridge_link_open``: 1 while the link to a controller is open;
- ``droidwire_bridge_dial_attempts_total``, ``droidwire_bridge_link_connections_total``,
  ``droidwire_bridge_reconnects_total`` (connections after the first);
- ``droidwire_bridge_devices{state}``: exposed devices by adb state (a state outside adb's
  vocabulary counts as ``other``);
- ``droidwire_bridge_sharing_paused``: 1 while the owner's kill switch is on.

As on the controller, no label carries a serial, a name or a secret.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DEFAULT_METRICS_HOST", "BridgeCollector", "MetricsServer", "serve_metrics"]

DEFAULT_METRICS_HOST = "127.0.0.1"
# adb's device states (adb's transport.cpp ``to_string(ConnectionState)``).
DEVICE_STATES = frozenset({
    "device", "offline", "unauthorized", "authorizing", "connecting", "bootloader",
    "recovery", "rescue", "sideload", "host", "no permissions", "detached",
})


class BridgeCollector(Collector):
    """Reads a bridge's link and inventory at scrape time (from the scrape's thread: plain
    attribute reads of ints, bools and a list copy, never a call into the event loop)."""

    def __init__(self, bridge: Any) -> None:
        self.bridge = bridge

    def describe(self) -> list[Metric]:
        return []  # families depend on nothing registered elsewhere: no collision to check

    def collect(self) -> Iterator[Metric]:
        link = getattr(self.bridge, "link", None)
        attempts = int(getattr(link, "attempts", 0) or 0)
        connections = int(getattr(link, "connections", 0) or 0)
        yield GaugeMetricFamily(
            "droidwire_bridge_link_open", "1 while the link to a controller is open",
            value=1 if link is not None and link.is_open else 0,
        )
        yield CounterMetricFamily(
            "droidwire_bridge_dial_attempts", "Attempts to dial a controller", value=attempts
        )
        yield CounterMetricFamily(
            "droidwire_bridge_link_connections", "Links opened to a controller",
            value=connections,
        )
        yield CounterMetricFamily(
            "droidwire_bridge_reconnects", "Links opened after the first", value=max(connections - 1, 0)
        )
        try:
            inventory = list(self.bridge.inventory())
        except RuntimeError:  # the loop changed the inventory mid-read: report it next time
            inventory = []
        states = Tally(d.state if d.state in DEVICE_STATES else "other" for d in inventory)
        devices = GaugeMetricFamily(
            "droidwire_bridge_devices", "Exposed devices by adb state", labels=["state"]
        )
        for state, count in sorted({"device": 0, **states}.items()):
            devices.add_metric([state], count)
        yield devices
        yield GaugeMetricFamily(
            "droidwire_bridge_sharing_paused", "1 while the owner has paused sharing",
            value=1 if self.bridge.policy.paused else 0,
        )


class MetricsServer:
    """A running metrics endpoint; :meth:`close` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def serve_metrics(bridge: Any, port: int, *, host: str = DEFAULT_METRICS_HOST) -> MetricsServer:
    """Serve ``bridge``'s metrics at ``http://HOST:PORT/metrics`` (port 0: any free port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BridgeCollector(bridge))
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread)
