"""The bridge's device layer: adb devices through the adb server, off the event loop.

Public surface::

    AdbDevices      list/state/info, shell, exec_out, screenshot, logcat clear/dump/follow,
                    push/pull, install/uninstall, instrument(_stream), connect/disconnect, watch
    DeviceWatcher   device state changes (adb track-devices) as an async iterator
    NetworkKeeper   keeps `adb connect`ed devices connected
    LineStream      a batched, bounded stream of output lines (logcat follow, instrumentation)

Every failure is a :class:`protocol.errors.RpcError`.
"""

from device_bridge.adb.client import (
    INSTALL_DIR,
    AdbDevices,
    DeviceFacts,
    DeviceState,
    ShellSocket,
    default_server_port,
)
from device_bridge.adb.errors import translate
from device_bridge.adb.streams import LineBuffer, LineStream
from device_bridge.adb.tracker import ABSENT, DeviceChange, DeviceWatcher, NetworkKeeper

__all__ = [
    "ABSENT",
    "INSTALL_DIR",
    "AdbDevices",
    "DeviceChange",
    "DeviceFacts",
    "DeviceState",
    "DeviceWatcher",
    "LineBuffer",
    "LineStream",
    "NetworkKeeper",
    "ShellSocket",
    "default_server_port",
    "translate",
]
