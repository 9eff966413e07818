"""The simulated device's logcat: ring buffers per log buffer, and the output formats.

Android's logd keeps one ring per buffer (main, system, crash, events, radio), 256 KiB each by
default, and prunes the oldest entries when a ring is full. We do the same, counting an entry's
size as its tag + message + a fixed header (logd counts its own struct, close enough).

Formats follow ``logcat -v`` (docs/simulated-device.md)::

    threadtime  MM-DD HH:MM:SS.mmm  PID   TID L TAG     : message
    time        MM-DD HH:MM:SS.mmm L/TAG     ( PID): message
    brief       L/TAG     ( PID): message

A message containing newlines becomes several entries with the same prefix, which is how stack
traces look in a real log. Timestamps are the device clock, printed in UTC (the simulated
device's ``persist.sys.timezone`` is ``Etc/UTC``).
"""

from __future__ import annotations

import bisect
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

from device_bridge.sim.waiters import Waiters

__all__ = [
    "BUFFERS",
    "DEFAULT_BUFFERS",
    "FORMATS",
    "LogBuffer",
    "LogEntry",
    "binary_entry",
    "format_entry",
    "parse_time_spec",
]

BUFFERS = ("main", "system", "crash", "events", "radio")
DEFAULT_BUFFERS = ("main", "system", "crash")  # what `logcat` reads without -b
FORMATS = ("threadtime", "time", "brief", "tag", "process", "raw")
PRIORITIES = "VDIWEF"
_ENTRY_OVERHEAD = 32


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    ts: float  # device clock, Unix seconds
    pid: int
    tid: int
    priority: str  # one of V D I W E F
    tag: str
    message: str  # a single line
    buffer: str

    @property
    def size(self) -> int:
        return len(self.tag) + len(self.message) + _ENTRY_OVERHEAD


def _stamp(ts: float) -> str:
    t = time.gmtime(ts)
    millis = int((ts - int(ts)) * 1000)
    return f"{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{millis:03d}"


LOG_IDS = {"main": 0, "radio": 1, "events": 2, "system": 3, "crash": 4}
_PRIORITY_CODES = {"V": 2, "D": 3, "I": 4, "W": 5, "E": 6, "F": 7}
_ENTRY_HEADER = struct.Struct("<HHiIIIII")  # struct logger_entry (v4): 28 bytes
MAX_PAYLOAD = 4068  # LOGGER_ENTRY_MAX_PAYLOAD


def binary_entry(entry: LogEntry, *, uid: int = 0) -> bytes:
    """One record of ``logcat -B``: liblog's ``struct logger_entry`` (v4) and its payload.

    The header is ``u16 len, u16 hdr_size (28), i32 pid, u32 tid, u32 sec, u32 nsec, u32 lid,
    u32 uid``. A text buffer's payload is the priority byte, the tag and the message, each
    NUL-terminated; an events-buffer payload is binary: ``i32 tag number`` then a typed value —
    here a string (type 2, ``i32 length``, bytes), with tag number 0 since the simulated phone
    has no ``event-log-tags`` file.
    """
    e = entry
    if e.buffer == "events":
        body = e.message.encode(errors="replace")[: MAX_PAYLOAD - 9]
        payload = struct.pack("<iBi", 0, 2, len(body)) + body
    else:
        tag = e.tag.encode(errors="replace")[:128]
        room = MAX_PAYLOAD - len(tag) - 3
        msg = e.message.encode(errors="replace")[:room]
        payload = bytes([_PRIORITY_CODES.get(e.priority, 4)]) + tag + b"\0" + msg + b"\0"
    sec = int(e.ts)
    nsec = int((e.ts - sec) * 1e9)
    header = _ENTRY_HEADER.pack(len(payload), _ENTRY_HEADER.size, e.pid, e.tid, sec, nsec,
                                LOG_IDS.get(e.buffer, 0), uid)
    return header + payload


def format_entry(entry: LogEntry, fmt: str = "threadtime") -> str:
    """One line (with its ``\\n``) in the given ``logcat -v`` format."""
    e = entry
    if fmt == "threadtime":
        return f"{_stamp(e.ts)} {e.pid:5d} {e.tid:5d} {e.priority} {e.tag:<8s}: {e.message}\n"
    if fmt == "time":
        return f"{_stamp(e.ts)} {e.priority}/{e.tag:<8s}({e.pid:5d}): {e.message}\n"
    if fmt == "brief":
        return f"{e.priority}/{e.tag:<8s}({e.pid:5d}): {e.message}\n"
    if fmt == "tag":
        return f"{e.priority}/{e.tag:<8s}: {e.message}\n"
    if fmt == "process":
        return f"{e.priority}({e.pid:5d}) {e.message}  ({e.tag})\n"
    if fmt == "raw":
        return f"{e.message}\n"
    raise ValueError(f"unknown log format {fmt!r}")


def parse_time_spec(spec: str, *, now: float) -> float | None:
    """``logcat -T 'MM-DD hh:mm:ss.mmm'`` → device-clock seconds (year of ``now``), else None."""
    try:
        date, clock = spec.split()
        month, day = (int(x) for x in date.split("-"))
        hms, _, frac = clock.partition(".")
        hour, minute, second = (int(x) for x in hms.split(":"))
        year = time.gmtime(now).tm_year
        base = time.mktime((year, month, day, hour, minute, second, 0, 0, 0)) - time.mktime(
            time.gmtime(0)
        )
        return base + (int(frac.ljust(3, "0")[:3]) / 1000 if frac else 0.0)
    except (ValueError, OverflowError):
        return None


class _Ring:
    """Entries of one buffer, oldest first, bounded in bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: list[LogEntry] = []
        self._head = 0
        self._bytes = 0

    def append(self, entry: LogEntry) -> None:
        self._entries.append(entry)
        self._bytes += entry.size
        while self._bytes > self.capacity and self._head < len(self._entries) - 1:
            self._bytes -= self._entries[self._head].size
            self._head += 1
        if self._head > 4096 and self._head * 2 > len(self._entries):
            del self._entries[: self._head]
            self._head = 0

    def clear(self) -> None:
        self._entries.clear()
        self._head = 0
        self._bytes = 0

    def after(self, seq: int) -> list[LogEntry]:
        i = bisect.bisect_right(self._entries, seq, lo=self._head, key=lambda e: e.seq)
        return self._entries[i:]

    @property
    def size(self) -> int:
        return self._bytes


class LogBuffer:
    """All rings of one device, with a global sequence number so readers can merge them.

    Readers (``logcat`` follow) keep a cursor (the last seq they handed on) and wait for new
    entries with :meth:`wait_after`. Writers never block; a bulk writer that must not outrun
    its readers awaits :meth:`wait_readers` (that is backpressure for tests and benchmarks,
    not something logd does).
    """

    def __init__(self, *, capacity: int = 256 * 1024) -> None:
        if capacity < 4096:
            raise ValueError("a log ring needs at least 4 KiB")
        self.capacity = capacity
        self._rings = {name: _Ring(capacity) for name in BUFFERS}
        self._seq = 0
        self._waiters = Waiters()
        self._readers: dict[int, int] = {}  # reader id → cursor seq
        self._next_reader = 0
        self.last_ts = 0.0

    # -- writing --------------------------------------------------------------------------

    def append(
        self,
        priority: str,
        tag: str,
        message: str,
        *,
        pid: int,
        tid: int,
        ts: float,
        buffer: str = "main",
    ) -> None:
        if priority not in PRIORITIES:
            raise ValueError(f"bad log priority {priority!r}")
        ring = self._rings[buffer]
        ts = max(ts, self.last_ts)  # the device clock never runs backwards in the log
        self.last_ts = ts
        for line in message.split("\n"):
            self._seq += 1
            ring.append(LogEntry(self._seq, ts, pid, tid, priority, tag, line, buffer))
        self._waiters.notify()

    def clear(self, buffers: Iterable[str] = DEFAULT_BUFFERS) -> None:
        for name in buffers:
            self._rings[name].clear()

    # -- reading --------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._seq

    def entries(self, buffers: Iterable[str] = DEFAULT_BUFFERS, *, after: int = 0) -> list[LogEntry]:
        """Entries of ``buffers`` with seq > ``after``, merged in write order."""
        picked = [self._rings[b].after(after) for b in dict.fromkeys(buffers)]
        if len(picked) == 1:
            return list(picked[0])
        merged = [e for part in picked for e in part]
        merged.sort(key=lambda e: e.seq)
        return merged

    def size(self, buffer: str) -> int:
        return self._rings[buffer].size

    def text(self, buffers: Iterable[str] = DEFAULT_BUFFERS, fmt: str = "threadtime") -> str:
        return "".join(format_entry(e, fmt) for e in self.entries(buffers))

    async def wait_after(self, seq: int) -> None:
        """Return once an entry with seq > ``seq`` exists."""
        await self._waiters.wait_for(lambda: self._seq > seq)

    # -- reader cursors (for backpressure) ------------------------------------------------

    def add_reader(self, cursor: int) -> int:
        self._next_reader += 1
        self._readers[self._next_reader] = cursor
        return self._next_reader

    def move_reader(self, reader: int, cursor: int) -> None:
        if reader in self._readers:
            self._readers[reader] = cursor
            self._waiters.notify()

    def remove_reader(self, reader: int) -> None:
        self._readers.pop(reader, None)
        self._waiters.notify()

    async def wait_readers(self, *, max_lag: int) -> None:
        """Wait until every live reader is at most ``max_lag`` entries behind."""
        await self._waiters.wait_for(
            lambda: not (self._readers and min(self._readers.values()) < self._seq - max_lag)
        )
