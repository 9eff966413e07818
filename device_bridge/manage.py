"""Device management on the bridge: apps, file transfers through stages, health.

:class:`ManageToolkit` serves the methods of :mod:`protocol.manage_methods` through the
dispatcher (:meth:`ManageToolkit.install`, like the agent toolkit), which has already applied
the owner's exposure and pause checks; each handler applies the profile's check for its kind.

**Stages.** A transfer never travels as one frame, and is never whole in memory here: an
upload is written chunk by chunk into a host file under a private temporary folder (a
*stage*), then pushed to the device by adb's sync protocol from that file; a download is
pulled into a stage and read back in chunks. A stage belongs to one device; at most
:data:`MAX_STAGES` exist at once, each bounded by the size it was opened with and by
``max_stage_bytes``; one unused for ``stage_idle_s`` is deleted when the next opens.

**Apps.** ``apps.install`` learns the package from the device — what ``pm list packages -3``
shows after the install that it did not before — never from the APK's own manifest. A
*temporary* install (a borrower's) never replaces an app already on the device (``pm install -R``:
pm replaces by default), and is removed when the bridge stops, like a run's. Launch, stop, clear and
uninstall are allowed under every profile but ``full`` only for packages installed through
droidwire (the policy's package scope).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import re
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from device_bridge.policy import DROIDWIRE_DIR, CommandContext, Profile, Rule
from protocol.errors import ErrorCode, RpcError
from protocol.manage_methods import (
    APPS_CLEAR,
    APPS_INSTALL,
    APPS_LAUNCH,
    APPS_LIST,
    APPS_STOP,
    APPS_UNINSTALL,
    DEVICE_HEALTH,
    FILES_PULL,
    FILES_PUSH,
    FILES_REMOVE,
    STAGE_CLOSE,
    STAGE_OPEN,
    STAGE_READ,
    STAGE_WRITE,
    AppParams,
    AppsInstallParams,
    FilesPullParams,
    FilesPushParams,
    FilesRemoveParams,
    StageOpenParams,
    StageParams,
    StageReadParams,
    StageWriteParams,
)
from protocol.methods import DeviceParams

if TYPE_CHECKING:
    from device_bridge.rpc import Dispatcher

__all__ = ["MAX_STAGES", "ManageToolkit", "parse_health"]

MAX_STAGES = 16
DEFAULT_MAX_STAGE_BYTES = 2 * 1024**3
DEFAULT_STAGE_IDLE_S = 300.0
HEALTH_MAX_AGE_S = 5.0
DEFAULT_WRITE_AHEAD_BYTES = 16 * 1024 * 1024  # chunks a stage accepts ahead of its end

_PACKAGE_LINE = re.compile(r"^package:(\S+?)\r?$", re.M)


@dataclass(eq=False)
class _Stage:
    id: str
    serial: str
    path: Path
    limit: int
    size: int = 0
    used_at: float = 0.0
    dropped: bool = False
    # Writers wait here for their turn (chunks may arrive out of order).
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)
    # Guards ``size`` and ``dropped`` for a push that reads the stage while it fills.
    cond: threading.Condition = field(default_factory=threading.Condition)

    def grew(self, size: int) -> None:
        with self.cond:
            self.size = size
            self.cond.notify_all()

    def drop(self) -> None:
        with self.cond:
            self.dropped = True
            self.cond.notify_all()


class _Filling(io.RawIOBase):
    """The stage's file as it fills: ``read`` waits for bytes not written yet, ends at the
    stage's announced size, and fails if the stage is dropped or stays idle ``idle_s``."""

    def __init__(self, stage: _Stage, idle_s: float) -> None:
        super().__init__()
        self.stage = stage
        self.idle_s = idle_s
        self.pos = 0
        self.file = stage.path.open("rb")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        stage = self.stage
        if self.pos >= stage.limit:
            return b""
        with stage.cond:
            while stage.size <= self.pos and not stage.dropped:
                if not stage.cond.wait(self.idle_s):
                    raise OSError("the upload stalled")
            if stage.dropped:
                raise OSError("the upload was abandoned")
            available = stage.size - self.pos
        want = available if size is None or size < 0 else min(size, available)
        data = self.file.read(want)
        self.pos += len(data)
        return data

    def close(self) -> None:
        self.file.close()
        super().close()


class ManageToolkit:
    """The management RPCs over a dispatcher's adb layer and policy."""

    def __init__(
        self,
        rpc: Dispatcher,
        *,
        max_stage_bytes: int = DEFAULT_MAX_STAGE_BYTES,
        stage_idle_s: float = DEFAULT_STAGE_IDLE_S,
        health_max_age_s: float = HEALTH_MAX_AGE_S,
        write_ahead_bytes: int = DEFAULT_WRITE_AHEAD_BYTES,
    ) -> None:
        self.rpc = rpc
        self.max_stage_bytes = max_stage_bytes
        self.stage_idle_s = stage_idle_s
        self.health_max_age_s = health_max_age_s
        self.write_ahead_bytes = write_ahead_bytes
        self.managed: dict[str, set[str]] = {}  # serial -> kept installs through droidwire
        self._stages: dict[str, _Stage] = {}
        self._dir: Path | None = None
        self._health: dict[str, tuple[float, dict[str, Any]]] = {}

    @classmethod
    def install(cls, rpc: Dispatcher, **options: Any) -> ManageToolkit:
        toolkit = cls(rpc, **options)
        toolkit.serve_on(rpc)
        return toolkit

    def serve_on(self, rpc: Dispatcher) -> None:
        """``rpc`` serves the management methods with these handlers."""
        rpc.serve(STAGE_OPEN, self._stage_open)
        rpc.serve(STAGE_WRITE, self._stage_write)
        rpc.serve(STAGE_READ, self._stage_read)
        rpc.serve(STAGE_CLOSE, self._stage_close)
        rpc.serve(FILES_PUSH, self._files_push)
        rpc.serve(FILES_PULL, self._files_pull)
        rpc.serve(FILES_REMOVE, self._files_remove)
        rpc.serve(APPS_LIST, self._apps_list)
        rpc.serve(APPS_INSTALL, self._apps_install)
        rpc.serve(APPS_UNINSTALL, self._apps_uninstall)
        rpc.serve(APPS_LAUNCH, self._apps_launch)
        rpc.serve(APPS_STOP, self._apps_stop)
        rpc.serve(APPS_CLEAR, self._apps_clear)
        rpc.serve(DEVICE_HEALTH, self._health_read)

    def close(self) -> None:
        """Delete every stage (the bridge is stopping)."""
        self._stages.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- stages --------------------------------------------------------------------------------

    def _new_stage(self, serial: str, limit: int) -> _Stage:
        now = time.monotonic()
        for old in [s for s in self._stages.values() if now - s.used_at > self.stage_idle_s]:
            self._drop(old)
        if len(self._stages) >= MAX_STAGES:
            raise RpcError(ErrorCode.BUSY, f"at most {MAX_STAGES} transfers at once")
        if limit > self.max_stage_bytes:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"a transfer is at most {self.max_stage_bytes} bytes on this bridge",
                {"reason": "too_large", "limit": self.max_stage_bytes},
            )
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="droidwire-stages-"))
        stage_id = f"st-{uuid.uuid4().hex}"
        path = self._dir / stage_id
        path.touch(mode=0o600)
        stage = _Stage(stage_id, serial, path, limit, used_at=now)
        self._stages[stage_id] = stage
        return stage

    def _get(self, p: StageParams) -> _Stage:
        stage = self._stages.get(p.stage)
        if stage is None or stage.serial != p.serial:
            raise RpcError(ErrorCode.NOT_FOUND, "no such transfer (finished, or unused too long)")
        stage.used_at = time.monotonic()
        return stage

    def _drop(self, stage: _Stage) -> None:
        self._stages.pop(stage.id, None)
        stage.drop()
        with contextlib.suppress(OSError):
            stage.path.unlink()

    async def _stage_open(self, p: StageOpenParams) -> dict[str, Any]:
        self.rpc.policy.check_exposed(p.serial)
        stage = self._new_stage(p.serial, p.size)
        return {"stage": stage.id, "size": 0}

    async def _stage_write(self, p: StageWriteParams) -> dict[str, Any]:
        """Append a chunk. The controller keeps a few writes in flight: one that arrives ahead
        of its turn (at most ``write_ahead_bytes`` past the stage's end) waits for the chunks
        before it; a re-sent chunk already here is accepted once."""
        stage = self._get(p)
        end = p.offset + len(p.data)
        if end > stage.limit:
            self._drop(stage)
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"more data than the {stage.limit} bytes announced",
                {"reason": "too_large"},
            )
        if p.offset > stage.size + self.write_ahead_bytes:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"chunk at offset {p.offset}, expected {stage.size}",
                {"reason": "offset"},
            )
        async with stage.turn:  # its lock also makes the appends one at a time
            try:
                async with asyncio.timeout(self.stage_idle_s):
                    await stage.turn.wait_for(lambda: p.offset <= stage.size or stage.dropped)
            except TimeoutError:
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"chunk at offset {p.offset}: the chunks before it never came",
                    {"reason": "offset"},
                ) from None
            if stage.dropped:
                raise RpcError(ErrorCode.NOT_FOUND, "no such transfer (abandoned)")
            if p.offset < stage.size:
                if end <= stage.size:
                    return {"stage": stage.id, "size": stage.size}  # re-sent: already here
                raise RpcError(ErrorCode.BAD_REQUEST, "overlapping chunks", {"reason": "offset"})
            await asyncio.to_thread(_append, stage.path, p.data)
            stage.grew(end)
            stage.turn.notify_all()
        return {"stage": stage.id, "size": end}

    async def _stage_read(self, p: StageReadParams) -> dict[str, Any]:
        stage = self._get(p)
        data = await asyncio.to_thread(_read, stage.path, p.offset, p.length)
        return {"data": data, "eof": p.offset + len(data) >= stage.size}

    async def _stage_close(self, p: StageParams) -> dict[str, Any]:
        stage = self._stages.get(p.stage)
        if stage is not None and stage.serial == p.serial:
            self._drop(stage)
        return {}

    def _complete(self, p: StageParams) -> _Stage:
        stage = self._get(p)
        if stage.size != stage.limit:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"the transfer has {stage.size} of {stage.limit} bytes",
                {"reason": "incomplete"},
            )
        return stage

    # -- files ---------------------------------------------------------------------------------

    async def _files_push(self, p: FilesPushParams) -> dict[str, Any]:
        path = self.rpc.policy.check_push(p.serial, p.path)
        # The stage may still be filling: the push reads it as chunks arrive, so the upload
        # to the bridge and the push to the device overlap.
        stage = self._get(p)
        reader = _Filling(stage, self.stage_idle_s)
        try:
            size = await self.rpc.adb().push_file(p.serial, cast(BinaryIO, reader), path, mode=p.mode)
        except RpcError as exc:
            if stage.dropped:
                raise RpcError(ErrorCode.CANCELLED, "the upload was abandoned") from exc
            raise
        finally:
            reader.close()
            self._drop(stage)
        if size != stage.limit:
            raise RpcError(ErrorCode.BAD_REQUEST, f"pushed {size} of {stage.limit} bytes")
        return {"stage": stage.id, "size": size}

    async def _files_pull(self, p: FilesPullParams) -> dict[str, Any]:
        path = self.rpc.policy.check_pull(p.serial, p.path)
        stage = self._new_stage(p.serial, min(p.max_bytes, self.max_stage_bytes))
        try:
            size = await self.rpc.adb().pull_file(p.serial, path, str(stage.path), max_bytes=stage.limit)
        except BaseException:
            self._drop(stage)
            raise
        stage.grew(size)
        return {"stage": stage.id, "size": size}

    async def _files_remove(self, p: FilesRemoveParams) -> dict[str, Any]:
        # Whatever the profile: only inside the droidwire folder (a loan's leftovers).
        self.rpc.policy.check_push(p.serial, p.path)
        path = posixpath.normpath("/" + p.path.lstrip("/"))
        if not path.startswith(DROIDWIRE_DIR + "/"):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"only paths inside {DROIDWIRE_DIR}/ are removed",
                {"rule": Rule.PATH_OUTSIDE_WORKSPACE.value},
            )
        argv = ["rm", "-rf" if p.recursive else "-f", path]  # absolute: never an option
        result = await self.rpc.adb().shell(p.serial, argv)
        if result.exit_code != 0:
            raise RpcError(
                ErrorCode.BAD_REQUEST, f"rm {path}: {(result.stderr or result.stdout)[:300]}"
            )
        return {}

    # -- apps ----------------------------------------------------------------------------------

    def _context(self, serial: str) -> CommandContext:
        base = self.rpc.context(serial)
        kept = frozenset(self.managed.get(serial, ()))
        return CommandContext(installed_packages=base.installed_packages | kept)

    async def _third_party(self, serial: str) -> set[str]:
        result = await self.rpc.adb().shell(serial, ["pm", "list", "packages", "-3"])
        return set(_PACKAGE_LINE.findall(result.stdout))

    async def _apps_list(self, p: DeviceParams) -> dict[str, Any]:
        profile = self.rpc.policy.check_exposed(p.serial)
        mine = self._context(p.serial).installed_packages
        packages = await self._third_party(p.serial)
        if profile is Profile.INSTRUMENT_ONLY:
            packages &= mine  # this profile reveals nothing of the owner's own apps
        return {"apps": [{"package": n, "managed": n in mine} for n in sorted(packages)]}

    async def _apps_install(self, p: AppsInstallParams) -> dict[str, Any]:
        self.rpc.policy.check_install(p.serial)
        stage = self._complete(p)
        try:
            before = await self._third_party(p.serial)
            remote = f"/data/local/tmp/droidwire-{stage.id}.apk"
            await self.rpc.adb().push_file(p.serial, str(stage.path), remote)
            # pm replaces an installed package by default (Android 7+; ``-r`` is kept for
            # older ones): a temporary (borrower's) install says ``-R`` so it never does.
            flags = (["-R"] if p.temporary else ["-r"]) + ["-t"]
            flags += ["-g"] if p.grant_permissions else []
            try:
                result = await self.rpc.adb().shell(p.serial, ["pm", "install", *flags, remote])
            finally:
                with contextlib.suppress(RpcError):
                    await self.rpc.adb().shell(p.serial, ["rm", "-f", remote])
        finally:
            self._drop(stage)
        text = (result.stdout + result.stderr).strip()
        if "Success" not in text:
            match = re.search(r"Failure \[([A-Z_]+)", text)
            reason = match[1] if match else "UNKNOWN"
            code = ErrorCode.CONFLICT if reason == "INSTALL_FAILED_ALREADY_EXISTS" else (
                ErrorCode.BAD_REQUEST
            )
            raise RpcError(code, f"install failed: {text[:300]}", {"reason": reason})
        added = await self._third_party(p.serial) - before
        if len(added) != 1:
            # Replaced in place (the owner's install with -r): nothing new appeared, so the
            # device cannot say which package it was. Say so rather than guess.
            return {"package": "", "replaced": True}
        package = added.pop()
        target = self.rpc.installed if p.temporary else self.managed
        target.setdefault(p.serial, set()).add(package)
        return {"package": package, "replaced": False}

    def _own(self, p: AppParams) -> None:
        profile = self.rpc.policy.check_exposed(p.serial)
        if profile is not Profile.FULL:
            self.rpc.policy.check_uninstall(p.serial, p.package, self._context(p.serial))

    async def _apps_uninstall(self, p: AppParams) -> dict[str, Any]:
        self._own(p)
        await self.rpc.adb().uninstall(p.serial, p.package)
        self.rpc.installed.get(p.serial, set()).discard(p.package)
        self.managed.get(p.serial, set()).discard(p.package)
        return {}

    async def _apps_launch(self, p: AppParams) -> dict[str, Any]:
        self._own(p)
        resolved = await self.rpc.adb().shell(
            p.serial,
            ["cmd", "package", "resolve-activity", "--brief", "-c",
             "android.intent.category.LAUNCHER", p.package],
        )
        lines = [ln.strip() for ln in resolved.stdout.splitlines() if ln.strip()]
        component = lines[-1] if lines else ""
        if not component.startswith(p.package + "/"):
            raise RpcError(ErrorCode.NOT_FOUND, f"{p.package} has no launcher activity")
        result = await self.rpc.adb().shell(p.serial, ["am", "start", "-n", component])
        if result.exit_code != 0 or "Error" in result.stderr:
            raise RpcError(ErrorCode.BAD_REQUEST, f"am start: {result.stderr.strip()[:300]}")
        return {}

    async def _apps_stop(self, p: AppParams) -> dict[str, Any]:
        self._own(p)
        await self.rpc.adb().shell(p.serial, ["am", "force-stop", p.package])
        return {}

    async def _apps_clear(self, p: AppParams) -> dict[str, Any]:
        self._own(p)
        result = await self.rpc.adb().shell(p.serial, ["pm", "clear", p.package])
        if "Success" not in result.stdout:
            raise RpcError(ErrorCode.BAD_REQUEST, f"pm clear {p.package}: {result.stdout[:200]}")
        return {}

    # -- health --------------------------------------------------------------------------------

    async def _health_read(self, p: DeviceParams) -> dict[str, Any]:
        """Battery, storage, load: cached for ``health_max_age_s``, so callers on several
        replicas cost the device one reading."""
        self.rpc.policy.check_exposed(p.serial)
        cached = self._health.get(p.serial)
        if cached is not None and time.monotonic() - cached[0] < self.health_max_age_s:
            return cached[1]
        adb = self.rpc.adb()
        battery, df, proc = await asyncio.gather(
            adb.shell(p.serial, ["dumpsys", "battery"]),
            adb.shell(p.serial, ["df", "-k", "/data"]),
            adb.shell(p.serial, ["cat", "/proc/loadavg", "/proc/meminfo"]),
        )
        out = parse_health(battery.stdout, df.stdout, proc.stdout)
        out["read_at"] = time.time()
        if len(self._health) > 4096:
            self._health.clear()
        self._health[p.serial] = (time.monotonic(), out)
        return out


def parse_health(battery: str, df: str, proc: str) -> dict[str, Any]:
    """``dumpsys battery``, ``df -k /data`` and ``/proc/loadavg`` + ``/proc/meminfo`` text →
    :class:`protocol.manage_methods.HealthResult` fields (None where a value is missing)."""
    out: dict[str, Any] = {}
    fields = dict(
        (k.strip().lower(), v.strip())
        for k, _, v in (ln.partition(":") for ln in battery.splitlines())
        if v
    )
    with contextlib.suppress(ValueError, KeyError):
        out["battery_level"] = int(fields["level"])
    with contextlib.suppress(ValueError, KeyError):
        out["battery_temperature_c"] = int(fields["temperature"]) / 10  # tenths of a degree
    powered = [fields.get(f"{k} powered") for k in ("ac", "usb", "wireless", "dock")]
    if "status" in fields or any(powered):
        out["charging"] = fields.get("status") in ("2", "5") or "true" in powered
    rows = [ln.split() for ln in df.splitlines()[1:] if ln.split()]
    if rows and len(rows[-1]) >= 4:
        with contextlib.suppress(ValueError):
            out["storage_total_bytes"] = int(rows[-1][1]) * 1024
            out["storage_free_bytes"] = int(rows[-1][3]) * 1024
    lines = proc.splitlines()
    if lines:
        with contextlib.suppress(ValueError, IndexError):
            out["cpu_load"] = float(lines[0].split()[0])
    mem = {k: v for k, _, v in (ln.partition(":") for ln in lines[1:])}
    with contextlib.suppress(ValueError, KeyError, ZeroDivisionError):
        total = int(mem["MemTotal"].split()[0])
        available = int(mem["MemAvailable"].split()[0])
        out["memory_used_ratio"] = round(1 - available / total, 4)
    return out


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _read(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)



