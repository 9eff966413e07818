"""Device management RPCs: apps, file transfers through a staging area, health.

Registered into :data:`protocol.methods.METHODS` when :mod:`protocol` is imported (additive:
a bridge that does not serve them does not list them in its capabilities).

Transfers never travel as one frame: the controller streams an upload into a *stage* on the
bridge host (``stage.open``, then ``stage.write`` chunks at increasing offsets), then asks for
what to do with it (``files.push`` to a device path, ``apps.install``); a download is pulled
into a stage (``files.pull``) and read back in chunks (``stage.read``). A stage belongs to one
device, is bounded by the size it was opened with (and the bridge's own cap), and ends with
``stage.close`` or after a while unused.

==================  =====================================  ===================================
method              params                                 result
==================  =====================================  ===================================
``stage.open``      :class:`StageOpenParams`               :class:`StageResult`
``stage.write``     :class:`StageWriteParams`              :class:`StageResult`
``stage.read``      :class:`StageReadParams`               :class:`StageReadResult`
``stage.close``     :class:`StageParams`                   ``{}``
``files.push``      :class:`FilesPushParams`               :class:`StageResult`
``files.pull``      :class:`FilesPullParams`               :class:`StageResult`
``files.remove``    :class:`FilesRemoveParams`             ``{}``
``apps.list``       :class:`~protocol.methods.DeviceParams`  :class:`AppsListResult`
``apps.install``    :class:`AppsInstallParams`             :class:`AppsInstallResult`
``apps.uninstall``  :class:`AppParams`                     ``{}``
``apps.launch``     :class:`AppParams`                     ``{}``
``apps.stop``       :class:`AppParams`                     ``{}``
``apps.clear``      :class:`AppParams`                     ``{}``
``device.health``   :class:`~protocol.methods.DeviceParams`  :class:`HealthResult`
==================  =====================================  ===================================
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from protocol.methods import (
    DeviceParams,
    DevicePath,
    Empty,
    Method,
    Package,
    Result,
    register,
)

__all__ = [
    "APPS_CLEAR",
    "APPS_INSTALL",
    "APPS_LAUNCH",
    "APPS_LIST",
    "APPS_STOP",
    "APPS_UNINSTALL",
    "DEVICE_HEALTH",
    "FILES_PULL",
    "FILES_PUSH",
    "FILES_REMOVE",
    "MANAGE_METHODS",
    "MAX_CHUNK_BYTES",
    "STAGE_CLOSE",
    "STAGE_OPEN",
    "STAGE_READ",
    "STAGE_WRITE",
    "AppInfo",
    "AppParams",
    "AppsInstallParams",
    "AppsInstallResult",
    "AppsListResult",
    "FilesPullParams",
    "FilesPushParams",
    "FilesRemoveParams",
    "HealthResult",
    "StageOpenParams",
    "StageParams",
    "StageReadParams",
    "StageReadResult",
    "StageResult",
    "StageWriteParams",
]

#: The largest chunk one ``stage.write`` / ``stage.read`` carries (well under the frame cap).
MAX_CHUNK_BYTES = 4 * 1024 * 1024

StageId = Annotated[str, StringConstraints(pattern=r"^st-[0-9a-f]{32}$")]


class StageOpenParams(DeviceParams):
    size: int = Field(ge=0, le=1 << 40)  # the exact size the upload will have


class StageParams(DeviceParams):
    stage: StageId


class StageWriteParams(StageParams):
    offset: int = Field(ge=0)
    data: bytes = Field(max_length=MAX_CHUNK_BYTES)


class StageReadParams(StageParams):
    offset: int = Field(ge=0)
    length: int = Field(ge=1, le=MAX_CHUNK_BYTES)


class StageResult(Result):
    stage: str
    size: int  # bytes written so far (upload), or the file's size (download)


class StageReadResult(Result):
    data: bytes
    eof: bool


class FilesPushParams(StageParams):
    path: DevicePath
    mode: int = Field(default=0o644, ge=0, le=0o777)


class FilesPullParams(DeviceParams):
    path: DevicePath
    max_bytes: int = Field(ge=1, le=1 << 40)


class FilesRemoveParams(DeviceParams):
    path: DevicePath
    recursive: bool = False


class AppInfo(Result):
    package: str
    managed: bool = False  # installed through droidwire


class AppsListResult(Result):
    apps: list[AppInfo] = Field(default_factory=list)


class AppsInstallParams(StageParams):
    # A temporary install (a borrower's) never replaces an app already on the device and is
    # removed when the bridge stops; the controller removes it at the loan's end.
    temporary: bool = False
    grant_permissions: bool = True


class AppsInstallResult(Result):
    package: str  # learned from the device (what appeared), not from the APK's manifest
    replaced: bool = False


class AppParams(DeviceParams):
    package: Package


class HealthResult(Result):
    battery_level: int | None = None  # percent
    battery_temperature_c: float | None = None
    charging: bool | None = None
    storage_free_bytes: int | None = None
    storage_total_bytes: int | None = None
    cpu_load: float | None = None  # 1-minute load average
    memory_used_ratio: float | None = None  # 0..1
    read_at: float | None = None  # the bridge's time.time() of the reading


STAGE_OPEN = Method("stage.open", StageOpenParams, StageResult, "devices")
STAGE_WRITE = Method("stage.write", StageWriteParams, StageResult, "devices", idempotent=True)
STAGE_READ = Method("stage.read", StageReadParams, StageReadResult, "devices", idempotent=True)
STAGE_CLOSE = Method("stage.close", StageParams, Empty, "devices", idempotent=True)
FILES_PUSH = Method("files.push", FilesPushParams, StageResult, "devices", long=True)
FILES_PULL = Method("files.pull", FilesPullParams, StageResult, "devices", long=True)
FILES_REMOVE = Method("files.remove", FilesRemoveParams, Empty, "devices", idempotent=True)
APPS_LIST = Method("apps.list", DeviceParams, AppsListResult, "devices", idempotent=True)
APPS_INSTALL = Method("apps.install", AppsInstallParams, AppsInstallResult, "devices", long=True)
APPS_UNINSTALL = Method("apps.uninstall", AppParams, Empty, "devices", idempotent=True)
APPS_LAUNCH = Method("apps.launch", AppParams, Empty, "devices")
APPS_STOP = Method("apps.stop", AppParams, Empty, "devices", idempotent=True)
APPS_CLEAR = Method("apps.clear", AppParams, Empty, "devices", idempotent=True)
DEVICE_HEALTH = Method("device.health", DeviceParams, HealthResult, "devices", idempotent=True)

MANAGE_METHODS: list[Method[Any, Any]] = [
    STAGE_OPEN, STAGE_WRITE, STAGE_READ, STAGE_CLOSE, FILES_PUSH, FILES_PULL, FILES_REMOVE,
    APPS_LIST, APPS_INSTALL, APPS_UNINSTALL, APPS_LAUNCH, APPS_STOP, APPS_CLEAR, DEVICE_HEALTH,
]


def _register() -> None:
    for spec in MANAGE_METHODS:
        register(spec, replace=True)


_register()
