"""Packages on a device: install (staged under :data:`INSTALL_DIR`, then ``pm install``), uninstall,
the installed packages' code paths, and instrumentation (``am instrument``) streamed or run to
its end."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any

from device_bridge.adb.models import Installed
from device_bridge.adb.shell import ShellCalls
from device_bridge.adb.streams import LineStream
from device_bridge.adb.sync import SyncCalls
from protocol.errors import ErrorCode, RpcError
from protocol.methods import InstrumentResult

__all__ = ["INSTALL_DIR", "PackageCalls"]

log = logging.getLogger("droidwire.bridge.adb")

#: Where the bridge stages APKs it installs (inside the borrower's folder, docs/design.md §6).
INSTALL_DIR = "/data/local/tmp/droidwire/.install"


class PackageCalls(ShellCalls, SyncCalls):
    """``pm`` and ``am instrument`` on a device, with the sync push an install needs."""

    async def install(
        self,
        serial: str,
        apk: bytes,
        *,
        replace: bool = True,
        allow_test: bool = True,
        grant_permissions: bool = False,
        timeout_s: float | None = None,
    ) -> Installed:
        """Install APK bytes (push to :data:`INSTALL_DIR`, ``pm install``, remove the copy).

        What was installed is learned from the device, never from the APK's own claims: the
        package whose entry in ``pm list packages -f`` appeared or changed (a new install, or
        an update, gets a new code path) across the install, with whether it was on the device
        before (:class:`Installed`). Installs on one device are serialised, so two of ours
        never blur each other's difference. ``-g`` (grant every runtime permission) only when
        asked: the controller asks only for the device's owner (docs/security.md).
        """
        self._check_serial(serial)
        limit = self.long_timeout_s if timeout_s is None else timeout_s
        lock = self._install_locks.setdefault(serial, asyncio.Lock())
        async with lock:
            before = await self._package_paths(serial)
            remote = f"{INSTALL_DIR}/{hashlib.sha256(apk).hexdigest()[:16]}.apk"
            await self.push(serial, remote, apk, timeout_s=limit)
            # pm replaces by default since Android 7 (-r is for older ones): -R keeps what is
            # there when the caller asks for no replacement.
            flags = (["-r"] if replace else ["-R"]) + (["-t"] if allow_test else [])
            flags += ["-g"] if grant_permissions else []
            try:
                result = await self.shell(
                    serial, ["pm", "install", *flags, remote], timeout_s=limit
                )
            finally:
                with contextlib.suppress(RpcError):
                    await self.shell(serial, ["rm", "-f", remote])
            text = (result.stdout + result.stderr).strip()
            if "Success" not in text:
                match = re.search(r"Failure \[([A-Z_]+)", text)
                reason = match[1] if match else "UNKNOWN"
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"install on {serial} failed: {text[:300]}",
                    {"serial": serial, "reason": reason},
                )
            after = await self._package_paths(serial)
        changed = sorted(name for name, path in after.items() if before.get(name) != path)
        if len(changed) != 1:
            log.warning("install on %s: cannot tell which package it installed (%d changed)",
                        serial, len(changed))
            return Installed("", existed=True)
        return Installed(changed[0], existed=changed[0] in before)

    async def uninstall(self, serial: str, package: str) -> bool:
        """``pm uninstall``; ``True`` if it was installed."""
        result = await self.shell(serial, ["pm", "uninstall", package])
        return "Success" in result.stdout

    async def package_paths(self, serial: str) -> dict[str, str]:
        """``pm list packages -f``: package → code path (what an install changes)."""
        return await self._package_paths(serial)

    async def _package_paths(self, serial: str) -> dict[str, str]:
        """``pm list packages -f``: package → code path (``package:PATH=NAME`` lines)."""
        result = await self.shell(serial, ["pm", "list", "packages", "-f"])
        out: dict[str, str] = {}
        for line in result.stdout.splitlines():
            line = line.strip()
            if line.startswith("package:") and "=" in line:
                path, _, name = line[len("package:"):].rpartition("=")
                if name:
                    out[name] = path
        return out

    async def instrument_stream(
        self,
        serial: str,
        package: str,
        runner: str = "androidx.test.runner.AndroidJUnitRunner",
        *,
        args: dict[str, str] | None = None,
    ) -> LineStream:
        """``am instrument -w -r [-e K V]… PKG/RUNNER``, its raw output lines as they come."""
        argv = ["am", "instrument", "-w", "-r"]
        for key, value in (args or {}).items():
            argv += ["-e", key, value]
        argv.append(f"{package}/{runner}")
        # Never drop instrumentation output: it is the run's evidence.
        return await self.stream(serial, argv, v2=True, lossless=True, name=f"instrument {serial}")

    async def instrument(
        self,
        serial: str,
        package: str,
        runner: str = "androidx.test.runner.AndroidJUnitRunner",
        *,
        args: dict[str, str] | None = None,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        on_lines: Callable[[list[str]], Any] | None = None,
    ) -> InstrumentResult:
        """Run an instrumentation to its end; raw output (the controller parses it).

        ``on_lines`` (plain or async) sees each batch as it arrives. Past ``timeout_s`` the
        instrumentation is stopped and ``timeout`` raised, with the output so far in its data.
        """
        cap = self.max_output_bytes if max_output_bytes is None else max_output_bytes
        limit = self.long_timeout_s if timeout_s is None else timeout_s
        lines: list[str] = []
        size = 0
        truncated = False
        stream = await self.instrument_stream(serial, package, runner, args=args)
        try:
            async with asyncio.timeout(limit):
                async for batch in stream:
                    if on_lines is not None and batch.lines:
                        pending = on_lines(batch.lines)
                        if inspect.isawaitable(pending):
                            await pending
                    for line in batch.lines:
                        size += len(line) + 1
                        if size > cap:
                            truncated = True
                            continue
                        lines.append(line)
                    if batch.eof and batch.reason not in ("closed", "exited"):
                        raise RpcError(
                            ErrorCode.DEVICE_OFFLINE,
                            f"instrumentation on {serial} lost: {batch.reason}",
                            {"serial": serial, "output": "\n".join(lines)[-65536:]},
                        )
        except TimeoutError as exc:
            raise RpcError(
                ErrorCode.TIMEOUT,
                f"instrumentation on {serial} took longer than {limit:g} s",
                {"serial": serial, "output": "\n".join(lines)[-65536:]},
            ) from exc
        finally:
            await stream.aclose()
        exit_code = stream.exit_code if stream.exit_code is not None else 0
        output = "\n".join(lines) + ("\n" if lines else "")
        return InstrumentResult(output=output, exit_code=exit_code, truncated=truncated)
