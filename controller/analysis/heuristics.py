"""L3 heuristics over time: a hang, and CPU saturation with GC churn.

* **hang** — three or more ``Activity pause timeout`` reports (ActivityManager /
  ActivityTaskManager, ``… ActivityRecord{… u0 PKG/.Activity …}``) for one package within
  :data:`HANG_WINDOW_S`: its main thread stopped answering lifecycle calls, again and again.
* **CPU > 95 % with GC churn** — an ANR report's ``CPU usage`` block shows one of the app's
  processes above :data:`CPU_BUSY_PCT` %, and the same process logged at least
  :data:`GC_CHURN` garbage collections (``… GC freed …``) within :data:`GC_WINDOW_S`:
  allocation in a hot loop.

Times come from the lines' own timestamps (threadtime, ``MM-DD HH:MM:SS.mmm``); a line without
one does not count toward a window. Only the app under test's evidence counts when a package
is given.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from controller.analysis.lines import LogLine
from controller.analysis.models import Issue
from controller.analysis.processes import belongs_to

__all__ = ["CPU_BUSY_PCT", "GC_CHURN", "GC_WINDOW_S", "HANG_PAUSES", "HANG_WINDOW_S",
           "Heuristics"]

HANG_PAUSES = 3
HANG_WINDOW_S = 60.0
CPU_BUSY_PCT = 95.0
GC_CHURN = 5
GC_WINDOW_S = 10.0

_TIME = re.compile(r"(?:^|\s)(\d\d):(\d\d):(\d\d)\.(\d{3})")
_PAUSE = re.compile(r"pause timeout for ActivityRecord\{[^}]*?\bu\d+ ([\w.]+)/")
_CPU = re.compile(r"^\s*(\d+(?:\.\d+)?)% (\d+)/([\w.:]+): ")
_MAX = 10_000  # readings kept of each kind


def _seconds(raw: str) -> float | None:
    m = _TIME.search(raw[:48])
    if m is None:
        return None
    h, mi, s, ms = (int(g) for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def _dense(times: Iterable[float], count: int, window: float) -> tuple[int, float] | None:
    """The largest number (≥ ``count``) of ``times`` within one ``window``, and its span."""
    ordered = sorted(times)
    best: tuple[int, float] | None = None
    start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] > window:
            start += 1
        n = end - start + 1
        if n >= count and (best is None or n > best[0]):
            best = (n, t - ordered[start])
    return best


class Heuristics:
    """Collects what the heuristics need as lines go by (:meth:`feed` must stay cheap)."""

    def __init__(self) -> None:
        self.pauses: dict[str, list[float]] = defaultdict(list)
        self.gcs: dict[int, list[float]] = defaultdict(list)
        self.cpu: dict[int, tuple[float, str]] = {}

    def feed(self, ln: LogLine) -> None:
        msg = ln.msg
        if "GC freed" in msg:
            t = _seconds(ln.raw)
            if t is not None and ln.pid is not None and len(self.gcs[ln.pid]) < _MAX:
                self.gcs[ln.pid].append(t)
        elif "pause timeout" in msg:
            m = _PAUSE.search(msg)
            t = _seconds(ln.raw)
            if m is not None and t is not None and len(self.pauses[m[1]]) < _MAX:
                self.pauses[m[1]].append(t)
        elif "%" in msg:
            m = _CPU.match(msg)
            if m is not None and len(self.cpu) < _MAX:
                pct, pid = float(m[1]), int(m[2])
                if pct > self.cpu.get(pid, (0.0, ""))[0]:
                    self.cpu[pid] = (pct, m[3])

    def issues(self, package: str | None, app_pids: set[int]) -> list[Issue]:
        out: list[Issue] = []
        for pkg, times in sorted(self.pauses.items()):
            if package is not None and not belongs_to(pkg, package):
                continue
            dense = _dense(times, HANG_PAUSES, HANG_WINDOW_S)
            if dense is not None:
                out.append(Issue(
                    "error",
                    f"Hang: {dense[0]} activity pause timeouts in {dense[1]:.0f} s in {pkg}",
                    "The main thread stopped answering lifecycle calls again and again: take a "
                    "stack dump (or read the ANR traces) and find what holds the main thread.",
                    "hang", dense[0]))
        for pid, (pct, name) in sorted(self.cpu.items()):
            if pct <= CPU_BUSY_PCT:
                continue
            if package is not None and pid not in app_pids and not belongs_to(name, package):
                continue
            dense = _dense(self.gcs.get(pid, []), GC_CHURN, GC_WINDOW_S)
            if dense is not None:
                out.append(Issue(
                    "warning",
                    f"CPU {pct:.0f}% with GC churn in {name}: {dense[0]} garbage collections "
                    f"in {dense[1]:.0f} s",
                    "The process allocates in a hot loop: find the allocations (Android "
                    "Studio's memory profiler, an allocation tracker) and reuse objects or move "
                    "the work off the main thread.",
                    "cpu_gc_churn", dense[0]))
        return out
