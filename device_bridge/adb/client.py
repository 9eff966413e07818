"""The bridge's device layer: async access to adb devices through the adb server (our client,
:mod:`.wire`, and the real ``adb``).

The adb client is synchronous, so every call here runs off the event loop (docs/design.md
§4.8): short exchanges in a bounded thread pool, long streams (logcat follow, instrumentation output, the
device tracker) each in a reader thread of their own, bounded by ``max_streams``. A blocking
exchange that overruns its deadline, or whose caller is cancelled, has its socket shut down so
its thread ends too.

Errors leave this module as :class:`~protocol.errors.RpcError` (``device_offline``,
``not_found``, ``timeout``, ``unavailable`` …), translated by :func:`.errors.translate`.

This layer does not apply the command policy: the RPC handlers check
:class:`device_bridge.policy.Policy` first and hand over what it returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from device_bridge.adb.connection import default_server_port
from device_bridge.adb.models import DeviceFacts, DeviceState, Installed, ShellSocket
from device_bridge.adb.packages import INSTALL_DIR, PackageCalls

if TYPE_CHECKING:
    from device_bridge.adb.tracker import DeviceWatcher

__all__ = [
    "INSTALL_DIR",
    "AdbDevices",
    "DeviceFacts",
    "DeviceState",
    "Installed",
    "ShellSocket",
    "default_server_port",
]


class AdbDevices(PackageCalls):
    """Async access to every device of one adb server.

    Its calls come in layers, one module each: the plumbing (:mod:`.connection`), the adb
    server and its devices (:mod:`.host`), commands (:mod:`.shell`), files (:mod:`.sync`),
    packages and instrumentation (:mod:`.packages`). Options are keyword-only; defaults come
    from :data:`protocol.settings.DEFAULTS` where a setting exists.
    """

    # -- tracking ------------------------------------------------------------------------------

    def watch(self, *, retry_s: float = 0.5) -> DeviceWatcher:
        """A new tracker of device states (``adb track-devices``); use with ``async with``."""
        from device_bridge.adb.tracker import DeviceWatcher

        return DeviceWatcher(self, retry_s=retry_s)
