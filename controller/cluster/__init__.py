"""Cluster mode (``droidwire controller --redis URL --db postgresql://…``), docs/cluster.md.

Replicas share PostgreSQL for state and Redis for routing: which replica holds each bridge's
one session (with TTL and heartbeat), the live device inventories, forwarded calls, and
relayed logcat streams.
"""

from __future__ import annotations

from controller.cluster.cluster import (
    DEFAULT_PREFIX,
    Cluster,
    ClusterUrl,
    RemoteLogStream,
    parse_redis_url,
)

__all__ = ["DEFAULT_PREFIX", "Cluster", "ClusterUrl", "RemoteLogStream", "parse_redis_url"]
