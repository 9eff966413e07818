"""The warm compiler: one long-lived JVM that runs ``K2JVMCompiler`` in-process per request.

A cold ``kotlinc`` spends seconds starting a JVM and loading the compiler before it reads a
line; calling the compiler again inside the same JVM takes a fraction of that. The JVM runs
``DroidwireKotlinc`` (compiled with ``javac`` at set-up, :mod:`.install`), which reads one
request at a time on stdin and answers on stdout (protocol in the Java file).

Bounds: the heap (``-Xmx``, default 768 MB), one compile at a time with at most
``max_waiting`` callers queued behind it (more are refused with :class:`CompilerBusy`), a
timeout per compile (the JVM is killed and a fresh one started for the next request), and a
restart every ``restart_after`` compiles so a slow leak in the compiler cannot grow without
end. A JVM that died is started again on the next request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .install import Layout

__all__ = ["CompileRun", "CompilerBusy", "CompilerError", "WarmCompiler"]

log = logging.getLogger("droidwire.kotlinc.service")

DEFAULT_HEAP_MB = 768
DEFAULT_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0
MAX_OUTPUT_BYTES = 1 << 20


class CompilerError(Exception):
    """The compiler JVM could not be started, died, or answered nonsense."""


class CompilerBusy(CompilerError):
    """Too many compiles are already waiting for the one warm compiler."""


class _JvmGone(CompilerError):
    """The JVM's pipe closed: it is not running (any more)."""

    def __init__(self) -> None:
        super().__init__("the compiler JVM exited")


@dataclass(frozen=True)
class CompileRun:
    exit_code: int  # kotlinc's: 0 ok, 1 compilation error, 2 internal error, 3 driver error
    output: str
    duration_s: float
    warm: bool  # this JVM had compiled before (False: the first compile of a fresh JVM)


class WarmCompiler:
    """A thread-safe handle on the compiler JVM (blocking calls: use a thread from asyncio)."""

    def __init__(
        self,
        layout: Layout,
        *,
        max_heap_mb: int = DEFAULT_HEAP_MB,
        max_waiting: int = 8,
        restart_after: int = 200,
    ) -> None:
        self.layout = layout
        self.max_heap_mb = max_heap_mb
        self.max_waiting = max_waiting
        self.restart_after = restart_after
        self._lock = threading.Lock()
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._compiles = 0
        self.version: str | None = None
        self.starts = 0  # how many JVMs were started (restarts included)
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------
    def _argv(self) -> list[str]:
        return [
            str(self.layout.java),
            f"-Xmx{self.max_heap_mb}m",
            "-Xss4m",
            "-XX:+UseSerialGC",
            "-XX:ReservedCodeCacheSize=128m",
            "-Djava.awt.headless=true",
            "-Dorg.jetbrains.kotlin.cliMessageRenderer=GradleStyle",
            "-Dkotlin.environment.keepalive=true",
            "-Didea.io.use.nio2=true",
            "-cp",
            os.pathsep.join(map(str, self.layout.compiler_classpath)),
            "DroidwireKotlinc",
        ]

    def _start(self, deadline: float) -> subprocess.Popen[bytes]:
        try:
            proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise CompilerError(f"cannot start the compiler JVM: {exc}") from exc
        self.starts += 1
        self._compiles = 0
        weakref.finalize(self, _kill, proc)  # a handle dropped without close() ends its JVM
        try:
            line = _read_line(proc, deadline)
        except CompilerError:
            _kill(proc)
            raise
        if not line.startswith("READY"):
            _kill(proc)
            raise CompilerError(f"the compiler JVM did not start: {line[:200]!r}")
        self.version = line.split(" ", 1)[1].strip() if " " in line else None
        log.info("warm kotlinc %s started (pid %d)", self.version, proc.pid)
        return proc

    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def close(self) -> None:
        self._closed = True
        with self._lock:
            if self._proc is not None:
                _kill(self._proc)
                self._proc = None

    # -- compiling ---------------------------------------------------------------------
    def compile(self, args: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CompileRun:
        """Run kotlinc with ``args`` (no newlines in any); blocks until done or timed out."""
        if any("\n" in a or "\r" in a for a in args):
            raise ValueError("a kotlinc argument must not contain a line break")
        with self._waiting_lock:
            if self._waiting >= self.max_waiting + 1:
                raise CompilerBusy(
                    f"{self._waiting} compiles are already waiting for the warm compiler"
                )
            self._waiting += 1
        try:
            deadline = time.monotonic() + timeout_s
            if not self._lock.acquire(timeout=max(0.0, timeout_s)):
                raise CompilerBusy("the warm compiler stayed busy past the timeout")
            try:
                return self._compile_locked(args, deadline)
            finally:
                self._lock.release()
        finally:
            with self._waiting_lock:
                self._waiting -= 1

    def _compile_locked(self, args: list[str], deadline: float) -> CompileRun:
        if self._closed:
            raise CompilerError("the warm compiler is closed")
        reused = self._proc is not None
        try:
            return self._request(args, deadline)
        except _JvmGone:
            if not reused:
                raise CompilerError("the compiler JVM exited") from None
            # It died while idle (killed, out of memory): one retry on a fresh JVM.
            log.warning("warm kotlinc was gone when a request came; starting a new one")
            return self._request(args, deadline)

    def _request(self, args: list[str], deadline: float) -> CompileRun:
        proc = self._proc
        if proc is not None and (proc.poll() is not None or self._compiles >= self.restart_after):
            if proc.poll() is not None:
                log.warning("warm kotlinc exited (%s); starting a new one", proc.returncode)
            _kill(proc)
            proc = self._proc = None
        if proc is None:
            proc = self._proc = self._start(min(deadline, time.monotonic() + START_TIMEOUT_S))
        warm = self._compiles > 0
        started = time.monotonic()
        request = f"{len(args)}\n" + "".join(f"{a}\n" for a in args)
        answered = False
        try:
            assert proc.stdin is not None
            proc.stdin.write(request.encode("utf-8"))
            proc.stdin.flush()
            header = _read_line(proc, deadline)
            answered = True
            parts = header.split()
            if len(parts) != 3 or parts[0] != "RESULT":
                raise CompilerError(f"unexpected answer from the compiler: {header[:200]!r}")
            code, size = int(parts[1]), int(parts[2])
            body = _read_exact(proc, size, deadline)
        except (CompilerError, OSError, ValueError) as exc:
            _kill(proc)
            self._proc = None
            if isinstance(exc, _JvmGone | BrokenPipeError) and not answered:
                raise _JvmGone() from exc
            if isinstance(exc, CompilerError):
                raise
            raise CompilerError(f"the compiler JVM failed: {exc}") from exc
        self._compiles += 1
        text = body[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
        return CompileRun(code, text, time.monotonic() - started, warm)


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> str:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        buf += _read_some(proc, deadline, 1, exact=True)
        if len(buf) > 4096:
            raise CompilerError("the compiler's header line is too long")
    return buf.decode("utf-8", "replace").rstrip("\n")


def _read_exact(proc: subprocess.Popen[bytes], size: int, deadline: float) -> bytes:
    if size < 0 or size > 64 * MAX_OUTPUT_BYTES:
        raise CompilerError(f"the compiler announced {size} bytes of output")
    buf = bytearray()
    while len(buf) < size:
        buf += _read_some(proc, deadline, size - len(buf))
    return bytes(buf)


def _read_some(
    proc: subprocess.Popen[bytes], deadline: float, want: int, *, exact: bool = False
) -> bytes:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CompilerError("the compile timed out")
    ready, _, _ = select.select([fd], [], [], remaining)
    if not ready:
        raise CompilerError("the compile timed out")
    chunk = os.read(fd, 1 if exact else min(want, 1 << 16))
    if not chunk:
        raise _JvmGone()
    return chunk


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with contextlib.suppress(OSError):
        if proc.stdout is not None:
            proc.stdout.close()
