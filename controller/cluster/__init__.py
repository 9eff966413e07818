"""Cluster mode (``droidwire controller --redis URL --db postgresql://…``), docs/cluster.md.

Replicas share PostgreSQL for state and Redis for routing: which replica holds each bridge's
one session (with TTL and heartbeat), the live device inventories, forwarded calls, and
relayed logcat streams, remote adb tunnels and live screens.

Modules: :mod:`~controller.cluster.cluster` (:class:`Cluster`: lifecycle, heartbeat, the
listener), :mod:`~controller.cluster.wire` (key layout, ``--redis`` URL, messages),
:mod:`~controller.cluster.scripts` (atomic ownership scripts), :mod:`~controller.cluster.core`
(the state the parts share), :mod:`~controller.cluster.ownership` (bridge sessions and the
registry), :mod:`~controller.cluster.waits` (held results), :mod:`~controller.cluster.forwarding`
(calls run on the replica holding the bridge), :mod:`~controller.cluster.streams` (relayed
logcat streams), :mod:`~controller.cluster.tunnels` (relayed remote adb tunnels),
:mod:`~controller.cluster.screens` (relayed live screens),
:mod:`~controller.cluster.turns` (device turns across replicas).
"""

from __future__ import annotations

from controller.cluster.cluster import Cluster
from controller.cluster.streams import RemoteLogStream
from controller.cluster.wire import DEFAULT_PREFIX, ClusterUrl, parse_redis_url
from controller.hub.hooks import RemoteBridge

__all__ = [
    "DEFAULT_PREFIX", "Cluster", "ClusterUrl", "RemoteBridge", "RemoteLogStream",
    "parse_redis_url",
]
