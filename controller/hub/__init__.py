"""The bridge hub: bridges' WebSockets, the registry of bridges and devices, ``call()``.

Modules: :mod:`controller.hub.hub` (:class:`Hub`: connections, sessions, calls, grace,
liveness), :mod:`controller.hub.streams` (logcat streams, bounded), :mod:`controller.hub.devices`
(device listing and ``{device}`` resolution), :mod:`controller.hub.endpoint` (``/v1/bridge``).
"""

from __future__ import annotations

from controller.hub.devices import DeviceRecord, device_id, list_devices, resolve_device
from controller.hub.hub import BridgeEntry, BridgeState, Hub
from controller.hub.streams import LogChunk, LogStream

__all__ = [
    "BridgeEntry",
    "BridgeState",
    "DeviceRecord",
    "Hub",
    "LogChunk",
    "LogStream",
    "device_id",
    "list_devices",
    "resolve_device",
]
