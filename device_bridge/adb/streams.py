"""Long-running adb streams (logcat follow, instrumentation) as async iterators of line batches.

A reader *thread* owns the blocking adb socket (the adb client is synchronous, docs/design.md
§4.8) and appends decoded lines to a bounded :class:`LineBuffer`; the event loop takes them out as
:class:`~protocol.methods.LogBatch` values. Batching and backpressure:

* a batch holds at most ``batch_lines`` lines; a partial batch is handed out ``flush_s`` after
  its first line arrived (the timing lives on the loop side, so the thread only reads);
* the buffer holds at most ``max_lines``. When it is full the reader thread *waits* (the adb
  stream, then the device, stall: backpressure, no loss). Only if the consumer stays away for
  ``stall_s`` does the reader drop lines, and it says so: the next batch carries
  ``dropped=N`` for the gap just before its first line. ``stall_s=None`` never drops.

Nothing here grows without bound; a line longer than ``max_line_bytes`` is cut into pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from protocol.methods import LogBatch

__all__ = ["LineBuffer", "LineStream", "RawDecoder", "ShellV2Decoder"]

log = logging.getLogger("droidwire.bridge.adb")

DEFAULT_STALL_S = 1.0
DEFAULT_MAX_LINE_BYTES = 64 * 1024


class LineBuffer:
    """Thread → loop hand-off of lines with drop markers. Thread-safe; no I/O.

    ``put``/``close`` run in the reader thread, ``take`` in the event loop. ``on_ready`` is
    called (from the reader thread) when a consumer waiting for data should wake up.
    """

    def __init__(
        self,
        *,
        max_lines: int,
        batch_lines: int,
        stall_s: float | None = DEFAULT_STALL_S,
        on_ready: Callable[[], None] = lambda: None,
    ) -> None:
        if max_lines < 1 or batch_lines < 1:
            raise ValueError("max_lines and batch_lines must be positive")
        self.max_lines = max_lines
        self.batch_lines = batch_lines
        self.stall_s = stall_s
        self._on_ready = on_ready
        self._cond = threading.Condition()
        self._items: deque[str | int] = deque()  # an int: that many lines lost right here
        self._lines = 0
        self._pending_drop = 0  # lost since the last stored item
        self._first_at: float | None = None  # monotonic time the oldest pending line arrived
        self._closed = False  # reader side finished
        self._cancelled = False  # consumer side gone
        self._eof_sent = False
        self._dropping = False  # a stall expired: drop at once until the consumer takes again
        self.reason: str | None = None
        self.total_dropped = 0
        self.stalls = 0  # times the reader waited the full stall_s and began dropping

    # -- reader thread ------------------------------------------------------------------------

    def put(self, line: str) -> bool:
        """Store one line, waiting while full; ``False`` once the consumer has gone."""
        with self._cond:
            if self._lines >= self.max_lines and not self._cancelled and not self._dropping:
                deadline = None if self.stall_s is None else time.monotonic() + self.stall_s
                while self._lines >= self.max_lines and not self._cancelled:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        self._dropping = True
                        self.stalls += 1
                        break
                    self._cond.wait(remaining)
            if self._cancelled:
                return False
            if self._lines >= self.max_lines:
                self._pending_drop += 1
                self.total_dropped += 1
                return True
            wake = self._lines == 0 and not self._items
            if self._pending_drop:
                self._items.append(self._pending_drop)
                self._pending_drop = 0
                wake = True
            self._items.append(line)
            self._lines += 1
            if self._first_at is None:
                self._first_at = time.monotonic()
            wake = wake or self._lines == self.batch_lines
        if wake:
            self._on_ready()
        return True

    def close(self, reason: str | None = None) -> None:
        """The reader is done (stream ended, device lost, or aborted)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self.reason is None:
                self.reason = reason
            if self._pending_drop:
                self._items.append(self._pending_drop)
                self._pending_drop = 0
            self._cond.notify_all()
        self._on_ready()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    # -- event loop ---------------------------------------------------------------------------

    def cancel(self) -> None:
        """The consumer is gone: release a reader waiting for room."""
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()

    def state(self) -> tuple[int, bool, float | None, bool]:
        """(lines buffered, a drop marker is first, when the oldest line arrived, closed)."""
        with self._cond:
            marker_first = bool(self._items) and isinstance(self._items[0], int)
            return self._lines, marker_first, self._first_at, self._closed

    def take(self) -> LogBatch | None:
        """Up to ``batch_lines`` lines in order, with the gap before them; ``None`` if empty.

        Once closed and drained, returns the final ``eof`` batch (once), then ``None``.
        """
        with self._cond:
            dropped = 0
            if self._items and isinstance(self._items[0], int):
                dropped = int(self._items.popleft())
            lines: list[str] = []
            while self._items and len(lines) < self.batch_lines:
                item = self._items[0]
                if isinstance(item, int):
                    break
                self._items.popleft()
                lines.append(item)
            self._lines -= len(lines)
            if lines:
                self._dropping = False
            self._first_at = time.monotonic() if self._lines else None
            self._cond.notify_all()
            eof = self._closed and not self._items
            if not lines and not dropped and not eof:
                return None
            if eof:
                if self._eof_sent:
                    return None
                self._eof_sent = True  # the eof batch is handed out exactly once
            return LogBatch(
                lines=lines, dropped=dropped, eof=eof, reason=self.reason if eof else None
            )


class _Decoder(Protocol):
    def feed(self, data: bytes) -> list[str]: ...
    def finish(self) -> list[str]: ...
    @property
    def done(self) -> bool: ...


class RawDecoder:
    """Bytes of a raw stream (``shell:`` v1, ``exec:``) → lines (``\\r\\n`` or ``\\n``)."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._pending = bytearray()
        self._max = max_line_bytes
        self.exit_code: int | None = None

    @property
    def done(self) -> bool:
        return False

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        out: list[str] = []
        while True:
            nl = self._pending.find(b"\n")
            if nl < 0:
                break
            out.append(_decode(self._pending[:nl]))
            del self._pending[: nl + 1]
        while len(self._pending) > self._max:
            out.append(_decode(self._pending[: self._max]))
            del self._pending[: self._max]
        return out

    def finish(self) -> list[str]:
        if not self._pending:
            return []
        line = _decode(self._pending)
        self._pending.clear()
        return [line]


class ShellV2Decoder:
    """The shell protocol (``shell,v2:``): 5-byte headers (id, u32 LE length) then data.

    Ids: 1 stdout, 2 stderr, 3 exit (one byte). Lines of stdout and stderr are split separately
    and handed out in the order they complete (AOSP ``adb/shell_protocol.h``).
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._out = RawDecoder(max_line_bytes=max_line_bytes)
        self._err = RawDecoder(max_line_bytes=max_line_bytes)
        self.exit_code: int | None = None

    @property
    def done(self) -> bool:
        return self.exit_code is not None

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        out: list[str] = []
        while len(self._buf) >= 5 and self.exit_code is None:
            kind = self._buf[0]
            length = int.from_bytes(self._buf[1:5], "little")
            if len(self._buf) < 5 + length:
                break
            payload = bytes(self._buf[5 : 5 + length])
            del self._buf[: 5 + length]
            if kind == 1:
                out += self._out.feed(payload)
            elif kind == 2:
                out += self._err.feed(payload)
            elif kind == 3:
                self.exit_code = payload[0] if payload else 255
                out += self.finish()
        return out

    def finish(self) -> list[str]:
        return self._out.finish() + self._err.finish()


def _decode(raw: bytes | bytearray) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw.decode("utf-8", errors="replace")


class LineStream:
    """An async iterator of :class:`LogBatch` fed by a reader thread on one adb socket.

    Start it with :meth:`start` (from the event loop), iterate it, and :meth:`aclose` it (or
    use ``async with``). The last batch has ``eof=True`` and a ``reason`` (``"closed"`` when
    the device ended the stream, ``"cancelled"`` after :meth:`aclose`, or the error text).
    ``exit_code`` is set when the stream carried one (shell protocol v2).
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        decoder: RawDecoder | ShellV2Decoder,
        batch_lines: int,
        flush_s: float,
        max_lines: int,
        stall_s: float | None = DEFAULT_STALL_S,
        name: str = "adb-stream",
        on_done: Callable[[], None] = lambda: None,
        initial: bytes = b"",
    ) -> None:
        self._sock = sock
        self._decoder = decoder
        self._flush_s = flush_s
        self._name = name
        self._on_done = on_done
        self._initial = initial
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self.buffer = LineBuffer(
            max_lines=max_lines, batch_lines=batch_lines, stall_s=stall_s, on_ready=self._ready
        )
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()

    @property
    def exit_code(self) -> int | None:
        return self._decoder.exit_code

    @property
    def dropped(self) -> int:
        return self.buffer.total_dropped

    def start(self) -> LineStream:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        return self

    # -- reader thread ------------------------------------------------------------------------

    def _ready(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed between the check and the call
                pass

    def _run(self) -> None:
        reason = "closed"
        try:
            if self._initial and not self._push(self._decoder.feed(self._initial)):
                reason = "cancelled"
                return
            while not self._decoder.done:
                try:
                    data = self._sock.recv(65536)
                except OSError as exc:
                    if self.buffer.cancelled:
                        reason = "cancelled"
                    else:
                        reason = f"connection lost: {exc}"
                    break
                if not data:
                    break
                if not self._push(self._decoder.feed(data)):
                    reason = "cancelled"
                    break
            else:
                reason = "exited"
            if reason in ("closed", "exited"):
                self._push(self._decoder.finish())
        except Exception as exc:  # a bug must end the stream, not hang the consumer
            log.exception("%s: reader failed", self._name)
            reason = f"internal: {exc}"
        finally:
            if self.buffer.cancelled and reason != "exited":
                reason = "cancelled"
            _close_quietly(self._sock)
            self.buffer.close(reason)
            self._finished.set()
            self._on_done()

    def _push(self, lines: list[str]) -> bool:
        for line in lines:
            if not self.buffer.put(line):
                return False
        return True

    # -- event loop ---------------------------------------------------------------------------

    def __aiter__(self) -> LineStream:
        return self

    async def __anext__(self) -> LogBatch:
        while True:
            self._wake.clear()
            lines, marker_first, first_at, closed = self.buffer.state()
            full = lines >= self.buffer.batch_lines
            if full or marker_first or closed:
                batch = self.buffer.take()
                if batch is None:
                    raise StopAsyncIteration
                return batch
            if lines:
                assert first_at is not None
                # time.monotonic is the loop's clock too (BaseEventLoop.time), so these compare.
                remaining = first_at + self._flush_s - time.monotonic()
                if remaining <= 0:
                    batch = self.buffer.take()
                    if batch is not None:
                        return batch
                    continue
                with contextlib.suppress(TimeoutError):  # not wait_for: it can eat a cancel
                    async with asyncio.timeout(remaining):
                        await self._wake.wait()
            else:
                await self._wake.wait()

    def stop(self) -> None:
        """Stop reading without waiting (any thread): the reader sees its socket shut."""
        self.buffer.cancel()
        _shutdown(self._sock)

    async def aclose(self) -> None:
        """Stop reading: shut the socket (the device sees the stream close) and wait briefly."""
        self.stop()
        if self._thread is not None and self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._finished.wait, 5.0)

    async def __aenter__(self) -> LineStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close_quietly(sock: socket.socket) -> None:
    _shutdown(sock)
    try:
        sock.close()
    except OSError:
        pass
