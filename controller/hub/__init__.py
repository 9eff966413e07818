"""The bridge hub: bridges' WebSockets, the registry of bridges and devices, ``call()``.

Modules: :mod:`controller.hub.hub` (:class:`Hub`: the registry, sessions, calls, grace,
liveness), :mod:`controller.hub.connection` (one bridge WebSocket: its writer and acks),
:mod:`controller.hub.link` (frames in and out: hello, decoding, the reader, the fast result
path), :mod:`controller.hub.entry` (what is kept per bridge and per call),
:mod:`controller.hub.hooks` (:class:`ClusterHooks`, what the hub asks of the other replicas,
and :class:`LocalHooks`, a lone controller's answers), :mod:`controller.hub.logcat` (logcat
subscriptions and their quotas), :mod:`controller.hub.streams` (logcat streams, bounded),
:mod:`controller.hub.screen` (live screens), :mod:`controller.hub.metrics`,
:mod:`controller.hub.devices` (device listing and ``{device}`` resolution),
:mod:`controller.hub.inventory`, :mod:`controller.hub.retire` (forgetting bridges and devices),
:mod:`controller.hub.endpoint` and :mod:`controller.hub.wsserver` (``/v1/bridge``).
"""

from __future__ import annotations

from controller.hub.devices import DeviceRecord, device_id, list_devices, resolve_device
from controller.hub.entry import BridgeEntry, BridgeState
from controller.hub.hooks import ClusterHooks, LocalHooks
from controller.hub.hub import Hub
from controller.hub.streams import LogChunk, LogStream

__all__ = [
    "BridgeEntry",
    "BridgeState",
    "ClusterHooks",
    "DeviceRecord",
    "Hub",
    "LocalHooks",
    "LogChunk",
    "LogStream",
    "device_id",
    "list_devices",
    "resolve_device",
]
