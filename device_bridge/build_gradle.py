"""Running Gradle for the build service: one process group, its output's tail, its APKs.

:func:`run_gradle` starts Gradle as an asyncio subprocess in its own process group, keeps the
last ``max_output_bytes`` of its output (compiler errors come near the end), holds the working
copy's slot until the process is really gone, and kills the whole group on timeout or
cancellation. :func:`read_apks` reads the APKs a successful build left in the working copy,
refusing any path that leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from protocol.errors import ErrorCode, RpcError

from .workspace import Lease
from .workspace.fsutil import is_within

__all__ = ["read_apks", "run_gradle"]

# After killing Gradle, how long to wait for a grandchild that still holds the pipe open.
_DRAIN_AFTER_KILL_S = 5.0


async def run_gradle(
    argv: Sequence[str], lease: Lease, env: Mapping[str, str], *, max_output_bytes: int
) -> tuple[int, str]:
    """Run ``argv`` in ``lease``'s working copy; its exit code and output (the tail)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=lease.project_dir,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout kills the whole tree
        )
    except OSError as exc:
        raise RpcError(
            ErrorCode.UNAVAILABLE,
            f"cannot start Gradle ({' '.join(argv[:2])}): {exc.strerror or exc}",
            {"reason": "gradle_start"},
        ) from exc
    assert proc.stdout is not None
    tail = _Tail(max_output_bytes)
    reader = asyncio.ensure_future(tail.read_from(proc.stdout))
    waiter = asyncio.ensure_future(proc.wait())
    lease.hold(waiter)  # the slot stays taken until Gradle is really gone
    try:
        rc = await asyncio.shield(waiter)
        # A grandchild that kept the pipe open must not hold the build hostage.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, _DRAIN_AFTER_KILL_S)
    except BaseException:
        _kill_group(proc)
        reader.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(waiter), _DRAIN_AFTER_KILL_S)
        raise
    return rc, tail.text()


class _Tail:
    """The last ``limit`` bytes of a stream, readable even if the reading is cut short."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.dropped = 0

    async def read_from(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(64 * 1024):
            self.buf += chunk
            if len(self.buf) > self.limit:
                self.dropped += len(self.buf) - self.limit
                del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        text = self.buf.decode("utf-8", "replace")
        if self.dropped:
            text = f"[droidwire: {self.dropped} earlier bytes of output dropped]\n{text}"
        return text


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _find_apk(directory: Path, root: Path) -> bytes | None:
    try:
        apks = [p for p in directory.glob("*.apk") if p.is_file()]
    except OSError:
        return None
    if not apks:
        return None
    newest = max(apks, key=lambda p: p.stat().st_mtime_ns)
    if not is_within(newest.resolve(), root):
        raise RpcError(ErrorCode.FORBIDDEN, "refused: an APK path leaves the working copy")
    return newest.read_bytes()


def read_apks(lease: Lease) -> tuple[bytes, bytes]:
    root = lease.project_dir.resolve()
    outputs = lease.project_dir / lease.project.module / "build" / "outputs" / "apk"
    try:
        app = _find_apk(outputs / "debug", root)
        test = _find_apk(outputs / "androidTest" / "debug", root)
    except OSError as exc:
        raise RpcError(ErrorCode.UNAVAILABLE, f"cannot read the built APKs: {exc}") from exc
    if app is None or test is None:
        raise RpcError(
            ErrorCode.INTERNAL,
            f"Gradle succeeded but left no {'app' if app is None else 'test'} APK under {outputs}",
        )
    return app, test
