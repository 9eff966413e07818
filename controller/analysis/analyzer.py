"""``analyze(text)``: raw logcat in, evidence and a verdict out. Pure: no I/O, never raises.

One pass over the parsed lines. Multi-line evidence (StrictMode violations and crashes, which
are a header plus a stack) is collected by *traces* keyed by ``(pid, tid)``: logcat interleaves
processes, so a line from another key neither continues nor ends a trace, while a non-stack line
from the same key ends it. Unprefixed lines inherit the key of the entry above them (see
``lines``); a trace opened by a bare header adopts the key of the prefixed stack that follows it
(a paste whose first line lost its prefix).

Attribution (docs/design.md §5): with a package, only the app's processes count. Its pids are learned
from the log (``Start proc`` — including a custom-named process started for one of the package's
components —, ``Process:`` lines, ANR ``PID:`` lines, Studio process columns; see
``processes``) or passed by the caller. A violation from a pid nobody named counts when its stack
runs the package's code (a bare paste has no pid); one from a pid known to be another app's never
does. ANRs count by package, component or pid. Other processes' evidence is kept apart
(``other_*``) and never moves the verdict.

Fast path: plain threadtime lines that mention none of the evidence keywords, and continue no
open trace, are counted without being built (``wants``); a hypothesis test checks that this
changes no result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import controller.analysis.anr as anr_mod
import controller.analysis.scan as scan
import controller.analysis.strictmode as strictmode
from controller.analysis.displayed import parse_displayed
from controller.analysis.heuristics import Heuristics
from controller.analysis.instrumentation import InstrumentationResult
from controller.analysis.lines import LogLine, ParsedLog, decode, iter_lines
from controller.analysis.models import (
    Anr,
    Crash,
    Death,
    Displayed,
    Issue,
    TestTiming,
    Thresholds,
    Timing,
    Violation,
)
from controller.analysis.processes import belongs_to, parse_death, parse_start, start_host
from controller.analysis.stack import app_frame, split_exception, stack_kind, stack_line
from controller.analysis.summary import build_issues
from controller.analysis.timing import parse_elapsed, parse_test_event
from controller.analysis.verdict import decide

__all__ = ["AnalysisResult", "analyze"]

_FATAL = "FATAL EXCEPTION"
_MAX_PRE = 20          # non-stack lines a trace accepts before its first frame
_IDE_SUFFIXES = (" (Fix with AI)", " (Ask Gemini)", " (Ask Studio Bot)")

_STALE = 1000         # lines after which an open trace or ANR block is closed
_NEVER = 1 << 62      # no line index reaches it
_TAGS = frozenset({"TestRunner", "am_anr", "am_proc_start", "DroidUnblocker"})
_TIMEOUT_SOURCE = "service_timeout"   # an ANR known from ActivityManager's service timeout

Key = tuple[int | None, int | None]
_NO_KEYS: frozenset[tuple[int, int]] = frozenset()

# Whether ``analyze`` runs the whole-buffer pre-filter (``scan``) when its native scanners are
# installed; the tests turn it off to compare against reading every line.
_PREFILTER = True


@dataclass
class AnalysisResult:
    """Everything ``analyze`` found; ``to_json()`` is the docs/design.md §9 shape plus extras."""

    entries: int
    lines: int
    damaged_lines: int
    violations: list[Violation]
    blocking_time_ms: int
    anrs: list[Anr]
    crashes: list[Crash]
    displayed: list[Displayed]
    issues: list[Issue]
    summary: str
    verification_status: str
    reason_code: str
    package: str | None = None
    app_pids: list[int] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    tests: list[TestTiming] = field(default_factory=list)
    deaths: list[Death] = field(default_factory=list)
    other_violations: list[Violation] = field(default_factory=list)
    other_anrs: list[Anr] = field(default_factory=list)
    other_crashes: list[Crash] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)

    @property
    def strict_mode_violations(self) -> list[str]:
        """The violations' raw log lines (the contract: every interface returns these)."""
        return [v.line for v in self.violations]

    @property
    def violation_kinds(self) -> list[str]:
        """The violations' kinds (``DiskRead``, ``Network`` …), each once, in order found."""
        return list(dict.fromkeys(v.kind for v in self.violations if v.kind))

    @property
    def has_violations(self) -> bool:
        return bool(self.violations)

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "violations": [v.to_json() for v in self.violations],
            "strict_mode_violations": self.strict_mode_violations,
            "violation_kinds": self.violation_kinds,
            "has_violations": self.has_violations,
            "blocking_time_ms": self.blocking_time_ms,
            "anrs": [a.to_json() for a in self.anrs],
            "crashes": [c.to_json() for c in self.crashes],
            "displayed": [d.to_json() for d in self.displayed],
            "issues": [i.to_json() for i in self.issues],
            "summary": self.summary,
            "verification_status": self.verification_status,
            # extras
            "reason_code": self.reason_code,
            "package": self.package,
            "app_pids": self.app_pids,
            "lines": self.lines,
            "damaged_lines": self.damaged_lines,
            "formats": self.formats,
            "timings": [t.to_json() for t in self.timings],
            "tests": [t.to_json() for t in self.tests],
            "deaths": [d.to_json() for d in self.deaths],
            "other_violations": [v.to_json() for v in self.other_violations],
            "other_anrs": [a.to_json() for a in self.other_anrs],
            "other_crashes": [c.to_json() for c in self.other_crashes],
        }


class _Trace:
    """A header plus its stack: one StrictMode violation or one crash."""

    __slots__ = (
        "cause_at",
        "causes",
        "exception",
        "frames",
        "header",
        "is_crash",
        "key",
        "last",
        "line",
        "line_no",
        "pid",
        "pre",
        "process",
        "started",
        "tag",
        "test",
        "thread",
        "tid",
    )

    def __init__(self, ln: LogLine, is_crash: bool, header: Any, test: TestTiming | None):
        self.is_crash = is_crash
        self.header = header               # strictmode.Header, or the thread name of a crash
        self.key: Key = (ln.pid, ln.tid)
        self.pid, self.tid, self.tag = ln.pid, ln.tid, ln.tag
        self.process = ln.process
        self.line = ln.raw
        self.line_no = ln.index + 1
        self.last = ln.index
        self.frames: list[str] = []
        self.causes: list[str] = []
        self.cause_at: int | None = None   # index in frames where the first cause starts
        self.pre: list[str] = []
        self.exception: str | None = None
        self.thread: str | None = header if is_crash else None
        self.started = False
        self.test = test

    def feed(self, ln: LogLine) -> bool:
        """Take the line if it continues this trace; False ends the trace."""
        if ln.entry and self.tag and ln.tag and ln.tag != self.tag:
            return False
        msg = ln.msg
        kind, f = stack_line(msg)
        if kind is None:
            if self.started or _FATAL in msg:
                return False
            if not self.is_crash:
                if len(self.pre) >= 5 or strictmode.parse_header(msg, ln.tag) is not None:
                    return False
                self.pre.append(msg.strip())
            else:
                s = msg.strip()
                if self.exception is None and s.startswith("Process: "):
                    name, _, rest = s[len("Process: "):].partition(", PID: ")
                    self.process = name.strip() or None
                    digits = rest.strip().split(" ")[0]
                    if digits.isdigit():
                        self.pid = int(digits)
                elif self.exception is None:
                    self.exception = s
                elif len(self.pre) < _MAX_PRE:
                    self.pre.append(s)
                else:
                    return False
        elif kind == "frame":
            if f is not None:
                self.frames.append(f)
            self.started = True
        elif kind == "cause":
            self.causes.append(msg.lstrip(" \t,")[len("Caused by:"):].strip())
            if self.cause_at is None:
                self.cause_at = len(self.frames)
            self.started = True
        else:
            self.started = True
        self.last = ln.index
        return True


def _dedupe(violations: list[Violation]) -> list[Violation]:
    """Drop the second copy of one violation logged twice, by penaltyLog (tag StrictMode) and by
    the app's own penaltyListener (another tag): same pid, kind and stack, a few lines apart."""
    out: list[Violation] = []
    for v in violations:
        twin = next((o for o in reversed(out[-8:]) if o.pid == v.pid and o.kind == v.kind
                     and o.frames and o.frames[:6] == v.frames[:6] and o.tag != v.tag
                     and v.line_no - o.line_no < 200), None)
        if twin is None:
            out.append(v)
    return out


def _strip_ide(s: str) -> str:
    """Drop what tools append to a thread name: IDE link text, Xposed's dagger."""
    s = s.rstrip(" †‡")
    for suffix in _IDE_SUFFIXES:
        if s.endswith(suffix):
            return s[: -len(suffix)]
    return s


def analyze(
    text: str | bytes,
    *,
    package: str | None = None,
    pids: Mapping[int, str] | Iterable[int] | None = None,
    thresholds: Thresholds = Thresholds(),
    completed: bool | None = None,
    instrumentation: InstrumentationResult | None = None,
) -> AnalysisResult:
    """Analyse a log: its text, or the bytes of a log file (decoded as ``lines.decode`` does).

    ``package`` limits the evidence to that app; ``pids`` adds known pids (a pid → process map,
    or pids of the app); ``completed`` says whether the run finished (default: unknown, or what
    ``instrumentation`` — the run's parsed ``am instrument -r`` output — says).
    """
    stats = ParsedLog([])
    state = _State(package)
    feed = state.feed
    p = scan.plan(text) if _PREFILTER else None
    lines: Iterator[LogLine]
    if p is not None:
        lines = scan.iter_scanned(p, stats, state.wants, state.open_keys, state.quiet_until,
                                  state.started)
    else:
        lines = iter_lines(decode(text) if isinstance(text, bytes) else text, stats, state.wants)
    for ln in lines:
        feed(ln)
    state.close_all()
    return state.result(stats.entries, stats.total, stats.damaged, dict(stats.formats),
                        pids, thresholds, completed, instrumentation)


class _State:
    def __init__(self, package: str | None):
        self.package = package
        self.traces: dict[Key, _Trace] = {}
        self.anr_open: dict[Key, list[Any]] = {}
        self.violations: list[Violation] = []
        self.crashes: list[Crash] = []
        self.anrs: list[Anr] = []
        self.displayed: list[Displayed] = []
        self.timings: list[Timing] = []
        self.tests: list[TestTiming] = []
        self.current: dict[int | None, TestTiming | None] = {}
        self.deaths: list[Death] = []
        self.procs: dict[int, str] = {}
        self.vm_deaths: list[LogLine] = []
        self.hosts: dict[int, str] = {}        # pid → package whose component it was started for
        # No open trace or ANR block goes stale before this line: the oldest last line + _STALE
        # + 1 (a lower bound between ``quiet_until`` calls: a trace's last line only moves on).
        self.next_stale_check = _NEVER
        self.heuristics = Heuristics()  # hang, CPU with GC churn (over time)
        self._keys_sig: tuple[Key | None, ...] = ()
        self._keys: frozenset[tuple[int, int]] = _NO_KEYS

    # -- the loop ---------------------------------------------------------------------------
    def wants(self, m: re.Match[str]) -> bool:
        """Whether a plain threadtime line (pid, tid, level, tag, msg) can matter: the fast
        path skips the others without building them."""
        if self.traces or self.anr_open:
            # First: the lines read because a trace is open for their key (its stack).
            if (None, None) in self.traces:
                return True
            key = (int(m[1]), int(m[2]))
            if key in self.traces or key in self.anr_open:
                return True
        msg = m[5]
        if (m[4] in _TAGS or "StrictMode" in msg or "iolation" in msg or "proc" in msg
                or "never released" in msg or "eaked" in msg or "Finalizing a Cursor" in msg
                or "FATAL EXCEPTION" in msg or "ANR in" in msg or "Displayed" in msg
                or "elapsed" in msg or "PROCESS" in msg or "Kill" in msg or "died" in msg
                or "signal" in msg or "POLICY_DEATH" in msg or ">>> " in msg
                or "DroidUnblocker" in msg or "executing service" in msg
                or "pause timeout" in msg or "GC freed" in msg):
            return True   # substring tests inlined: this runs on every line
        return False

    def open_keys(self) -> frozenset[tuple[int, int]] | None:
        """The (pid, tid) keys whose plain threadtime lines ``wants`` takes whatever they say
        (open traces and ANR blocks); None: every line (a trace without a key is open)."""
        if not self.traces and not self.anr_open:
            return _NO_KEYS
        if (None, None) in self.traces:
            return None
        sig = (*self.traces, None, *self.anr_open)
        if sig != self._keys_sig:      # asked between every two lines read: mostly unchanged
            self._keys_sig = sig
            self._keys = frozenset((p, t) for p, t in chain(self.traces, self.anr_open)
                                   if p is not None and t is not None)
        return self._keys

    def quiet_until(self) -> int:
        """The first line index at which ``feed`` may close a stale trace or ANR block."""
        if not self.traces and not self.anr_open:
            self.next_stale_check = _NEVER
            return _NEVER
        self.next_stale_check = min(chain((tr.last for tr in self.traces.values()),
                                          (slot[0].line_no - 1 for slot in self.anr_open.values())),
                                    default=_NEVER - _STALE - 1) + _STALE + 1
        return self.next_stale_check

    def started(self, procs: Iterable[tuple[int, str]], hosts: Iterable[tuple[int, str]]) -> None:
        """``feed`` for a run of plain ``Start proc`` lines (``scan``'s lane): their (pid,
        process) and (pid, host) pairs in order. The caller makes sure that each line is one
        ``feed`` would only store these from: no other keyword of ``wants``, no open key, no
        trace or ANR block going stale before it (``quiet_until``)."""
        self.procs.update(procs)
        self.hosts.update(hosts)

    def feed(self, ln: LogLine) -> None:
        msg = ln.msg
        self.heuristics.feed(ln)
        if ln.index >= self.next_stale_check:
            self._close_stale(ln.index)
        if ln.fmt in ("blank", "separator"):
            tr = self.traces.pop((None, None), None)
            if tr is not None:
                self._close(tr)
            self.anr_open.pop((None, None), None)
            if ln.fmt == "blank":
                return
        key: Key = (ln.pid, ln.tid)
        if self.traces:
            tr = self.traces.get(key)
            if tr is None and ln.entry and ln.pid is not None:
                bare = self.traces.get((None, None))
                if bare is not None and bare.last == ln.index - 1 and stack_kind(msg):
                    # A bare header whose stack carries the prefix: adopt its pid/tid.
                    del self.traces[(None, None)]
                    bare.key, bare.pid, bare.tid = key, ln.pid, ln.tid
                    bare.tag = bare.tag or ln.tag
                    self.traces[key] = tr = bare
            if tr is not None:
                if tr.feed(ln):
                    return
                del self.traces[key]
                self._close(tr)
        if self.anr_open and key in self.anr_open:
            self._anr_field(key, msg)
        if ln.process and ln.pid is not None:
            self.procs[ln.pid] = ln.process
        tag = ln.tag
        if ("StrictMode" in msg or "iolation" in msg or "never released" in msg
                or "eaked" in msg or "Finalizing a Cursor" in msg):
            h = strictmode.parse_header(msg, tag)
            if h is not None:
                self._open(ln, False, h)
                return
        if _FATAL in msg and msg.lstrip(" *\t").startswith(_FATAL):
            i = msg.find(_FATAL)
            rest = msg[i + len(_FATAL):]
            if rest.startswith(" IN SYSTEM PROCESS"):
                rest = rest[len(" IN SYSTEM PROCESS"):]
            thread = _strip_ide(rest.lstrip(":").strip()) or None
            self._open(ln, True, thread)
            return
        if "ANR in" in msg:
            h2 = anr_mod.parse_header(msg, tag)
            if h2 is not None:
                a = Anr(h2[0], h2[1], None, None, ln.index + 1, source=tag or "ActivityManager")
                # The full report supersedes the service timeout that announced it.
                self.anrs = [x for x in self.anrs
                             if not (x.source == _TIMEOUT_SOURCE and x.package == h2[0])]
                self.anrs.append(a)
                self.anr_open[key] = [a, anr_mod.FIELD_WINDOW]
                self.next_stale_check = min(self.next_stale_check, ln.index + _STALE + 1)
                return
        if "executing service" in msg:
            to = anr_mod.parse_service_timeout(msg, tag)
            if to is not None:
                if not any(x.package == to[0] and x.line_no > ln.index - _STALE
                           for x in self.anrs):
                    self.anrs.append(Anr(to[0], to[1], None, to[2], ln.index + 1,
                                         source=_TIMEOUT_SOURCE))
                return
        if "Displayed" in msg:
            d = parse_displayed(msg)
            if d is not None:
                self.displayed.append(Displayed(d[0], d[1], ln.index + 1, d[2]))
                return
        if "elapsed" in msg:
            e = parse_elapsed(msg, tag)
            if e is not None:
                ms, named = e
                t = self._current_test(ln.pid)
                if named is not None and (t is None or t.id != named):
                    t = next((x for x in self.tests if x.id == named), None)
                self.timings.append(Timing(ms, ln.pid, ln.index + 1,
                                           t.id if t else named))
                if t is not None:
                    t.blocking_time_ms = max(t.blocking_time_ms, ms)
                return
        if tag is not None:
            if tag == "TestRunner":
                self._test_event(ln)
                return
            if tag == "am_anr":
                r = anr_mod.parse_am_anr(msg)
                if r is not None:
                    self.procs[r[0]] = r[1]
                    pending = next((a for a in self.anrs if a.source == _TIMEOUT_SOURCE
                                    and a.package == r[1] and a.pid is None), None)
                    if pending is not None:
                        pending.pid = r[0]
                    elif not any(a.pid == r[0] and a.package == r[1] for a in self.anrs):
                        self.anrs.append(Anr(r[1], None, r[0], r[2] or None, ln.index + 1,
                                             source="am_anr"))
                return
        if ("proc" in msg or "PROCESS" in msg or "Kill" in msg or "died" in msg
                or "signal" in msg or "POLICY_DEATH" in msg or ">>> " in msg
                or tag == "am_proc_start"):
            st = parse_start(msg, tag)
            if st is not None:
                self.procs[st[0]] = st[1]
                host = start_host(msg) if "Start proc" in msg else None
                if host is not None:
                    self.hosts[st[0]] = host
                return
            dt = parse_death(msg, ln.pid)
            if dt is not None:
                if dt[0] is not None and dt[1]:
                    if dt[2].startswith("signal"):  # a thread/comm name, maybe truncated
                        self.procs.setdefault(dt[0], dt[1])
                    else:
                        self.procs[dt[0]] = dt[1]
                name = dt[1] or (ln.process if dt[0] == ln.pid else None)
                self.deaths.append(Death(dt[0], name, dt[2], ln.index + 1))
                if dt[2] == "StrictMode VmPolicy penaltyDeath":
                    self.vm_deaths.append(ln)

    def _close_stale(self, index: int) -> None:
        # A stack arrives in one burst; a trace or ANR block silent this long is over. It is
        # closed before the next line fed, whichever lines are fed (``scan`` feeds fewer).
        for key, tr in list(self.traces.items()):
            if tr.last < index - _STALE:
                del self.traces[key]
                self._close(tr)
        for key, slot in list(self.anr_open.items()):
            if slot[0].line_no - 1 < index - _STALE:
                del self.anr_open[key]
        self.quiet_until()

    def close_all(self) -> None:
        for tr in sorted(self.traces.values(), key=lambda t: t.line_no):
            self._close(tr)
        self.traces.clear()

    # -- pieces -----------------------------------------------------------------------------
    def _current_test(self, pid: int | None) -> TestTiming | None:
        t = self.current.get(pid)
        if t is None and (pid is None or pid not in self.current):
            live = [x for x in self.current.values() if x is not None]
            if len(live) == 1:
                t = live[0]
        return t

    def _test_event(self, ln: LogLine) -> None:
        ev = parse_test_event(ln.msg)
        if ev is None:
            return
        event, cls, name = ev
        t = self.current.get(ln.pid)
        if t is None or (t.class_name, t.name) != (cls, name):
            t = next((x for x in reversed(self.tests) if (x.class_name, x.name) == (cls, name)
                      and not x.finished), None)
        if event == "started" or t is None:
            t = TestTiming(cls, name, pid=ln.pid)
            self.tests.append(t)
        if event == "started":
            self.current[ln.pid] = t
        elif event == "finished":
            t.finished = True
            if t.status == "error":
                t.status = "passed"
            self.current[ln.pid] = None
        elif event == "failed":
            t.status = "failed"
        elif event == "ignored":
            t.status, t.finished = "ignored", True
        elif event == "assumption failed":
            t.status = "assumption_failure"

    def _open(self, ln: LogLine, is_crash: bool, header: Any) -> None:
        if ln.continued and ln.tag != ("AndroidRuntime" if is_crash else "StrictMode"):
            # A header on a line with no prefix of its own, under an entry of another (or no)
            # tag: a piece of some other entry that a console wrap or a paste cut from its
            # prefix. Who logged it is unknown — not the entry above (attribution then goes by
            # its stack).
            ln = replace(ln, pid=None, tid=None, tag=None, process=None)
        key: Key = (ln.pid, ln.tid)
        old = self.traces.pop(key, None)
        if old is not None:
            self._close(old)
        self.traces[key] = _Trace(ln, is_crash, header, self._current_test(ln.pid))
        self.next_stale_check = min(self.next_stale_check, ln.index + _STALE + 1)

    def _anr_field(self, key: Key, msg: str) -> None:
        slot = self.anr_open[key]
        a: Anr = slot[0]
        f = anr_mod.parse_field(msg)
        if f is not None:
            name, value = f
            if name == "PID" and a.pid is None:
                digits = value.split(" ")[0]
                if digits.isdigit():
                    a.pid = int(digits)
                    if a.package:
                        self.procs.setdefault(a.pid, a.package)
            elif name in ("Reason", "Subject") and a.reason is None:
                a.reason = value or None
            elif name == "Parent" and a.parent is None:
                a.parent = value or None
            elif name == "Frozen":
                a.frozen = value.lower().startswith("true")
            elif name == "ErrorId":
                a.error_id = value or None
        slot[1] -= 1
        if slot[1] <= 0:
            del self.anr_open[key]

    def _close(self, tr: _Trace) -> None:
        if tr.is_crash:
            self._close_crash(tr)
        else:
            self._close_violation(tr)

    def _close_violation(self, tr: _Trace) -> None:
        h: strictmode.Header = tr.header
        frames = tr.frames
        if h.kind in strictmode.LEAK_KINDS and tr.cause_at is not None:
            # The allocation site (under "Caused by") is where the leak was made.
            frame = app_frame(frames[tr.cause_at:], self.package) or app_frame(frames, self.package)
        else:
            frame = app_frame(frames, self.package)
        kind = h.kind
        if kind == "Unknown":
            kind = strictmode.kind_from_frames(frames) or kind
        self.violations.append(Violation(
            kind, h.duration_ms, tr.pid, tr.tid, frame, tr.line, tr.line_no, h.class_name,
            h.message, h.policy, h.code, "log", tr.test.id if tr.test else None, frames,
            tr.tag))

    def _close_crash(self, tr: _Trace) -> None:
        exc_line = tr.exception or ""
        exception, message, nested = split_exception(exc_line) if exc_line else ("", None, None)
        cause = tr.causes[-1] if tr.causes else nested
        frame = app_frame(tr.frames, self.package)
        crash = Crash(tr.process, tr.pid, tr.thread, exception or "unknown", message, cause,
                      frame, tr.line_no, tr.tid, tr.line, frames=tr.frames)
        sm = strictmode.violation_in_crash([exc_line, *tr.causes])
        if sm is None and "StrictMode" in exc_line and "policy violation" in exc_line.lower():
            sm = strictmode.Header("Unknown", None, None, message)
        if sm is not None or ("StrictMode" in exc_line and "violation" in exc_line):
            crash.strict_mode = True
            if sm is not None and not any(v.pid == tr.pid and v.kind == sm.kind
                                          for v in self.violations):
                self.violations.append(Violation(
                    sm.kind, sm.duration_ms, tr.pid, tr.tid, frame, tr.line, tr.line_no,
                    sm.class_name, sm.message, sm.policy, sm.code, "crash",
                    tr.test.id if tr.test else None, tr.frames))
        if tr.pid is not None and tr.process:
            self.procs[tr.pid] = tr.process
        self.crashes.append(crash)
        if tr.test is not None and not tr.test.finished:
            tr.test.status = "error"

    # -- attribution and verdict ------------------------------------------------------------
    def result(self, entries: int, nlines: int, damaged: int, formats: dict[str, int],
               pids: Mapping[int, str] | Iterable[int] | None, thresholds: Thresholds,
               completed: bool | None,
               instrumentation: InstrumentationResult | None) -> AnalysisResult:
        package = self.package
        procs = self.procs
        app_pids: set[int] = set()
        if pids is not None:
            if isinstance(pids, Mapping):
                for p, name in pids.items():
                    procs[int(p)] = str(name)
                    if package is None or belongs_to(str(name), package):
                        app_pids.add(int(p))
            else:
                app_pids.update(int(p) for p in pids)
        if package:
            app_pids.update(p for p, name in procs.items() if belongs_to(name, package))
            app_pids.update(p for p, host in self.hosts.items() if host == package)

        for c in self.crashes:
            if c.process is None and c.pid is not None:
                c.process = procs.get(c.pid)

        def runs_package(frames: list[str]) -> bool:
            prefix = package + "."  # type: ignore[operator]
            return any(f.startswith(prefix) for f in frames)

        def own_violation(v: Violation) -> bool:
            if package is None or (v.pid is not None and v.pid in app_pids):
                return True
            if v.pid is not None and v.pid in procs:
                return False        # a pid known to be another app's
            return runs_package(v.frames)

        def own_crash(c: Crash) -> bool:
            return (package is None or (c.pid is not None and c.pid in app_pids)
                    or belongs_to(c.process, package) or runs_package(c.frames)
                    or "{" + package + "/" in (c.message or ""))

        def own_anr(a: Anr) -> bool:
            return (package is None or belongs_to(a.package, package)
                    or (a.pid is not None and a.pid in app_pids)
                    or (a.component or "").startswith(package + "/"))

        def own_timing(t: Timing) -> bool:
            # DroidUnblocker is our own helper: only a pid known to be another app's excludes it.
            return (package is None or t.pid is None or t.pid in app_pids
                    or t.pid not in procs)

        for ln in self.vm_deaths:
            # penaltyDeath without penaltyLog: the death is the only trace of the violation.
            if not any(v.pid == ln.pid for v in self.violations if v.line_no < ln.index + 1):
                self.violations.append(Violation(
                    "Unknown", None, ln.pid, ln.tid, None, ln.raw, ln.index + 1,
                    message="StrictMode VmPolicy violation with POLICY_DEATH", source="death",
                    tag=ln.tag))
        self.violations.sort(key=lambda v: v.line_no)
        self.violations = _dedupe(self.violations)
        violations = [v for v in self.violations if own_violation(v)]
        other_violations = [v for v in self.violations if not own_violation(v)]
        crashes = [c for c in self.crashes if own_crash(c)]
        other_crashes = [c for c in self.crashes if not own_crash(c)]
        anrs = [a for a in self.anrs if own_anr(a)]
        other_anrs = [a for a in self.anrs if not own_anr(a)]
        timings = [t for t in self.timings if own_timing(t)]
        blocking = max((t.elapsed_ms for t in timings), default=-1)

        by_test = {t.id: t for t in self.tests}
        for v in violations:
            if v.test and v.test in by_test:
                by_test[v.test].violations.append(v.kind)
        if completed is None and any(not t.finished for t in self.tests):
            completed = False

        first_timing = timings[0].line_no if timings else None
        crash_text, crash_line = None, None
        if crashes:
            c0 = crashes[0]
            crash_text = c0.exception + (f": {c0.message}" if c0.message else "")
            crash_line = c0.line_no
        else:
            # A native crash of the app (libc "Fatal signal", a tombstone) ends the test too.
            native = [d for d in self.deaths if d.reason.startswith(("signal", "native crash"))
                      and (d.pid is not None or d.process is not None)
                      and (package is None or d.pid in app_pids
                           or belongs_to(d.process, package))]
            if native:
                crash_text, crash_line = native[0].reason, native[0].line_no
        if instrumentation is not None:
            if completed is None:
                completed = instrumentation.run_status == "ok"
            if crash_text is None and instrumentation.run_status == "crashed":
                # The log lost the crash (another buffer, a cleared log): the runner saw it.
                crash_text = instrumentation.message or "Process crashed."
        verdict = decide(
            kinds=[v.kind for v in violations], blocking_time_ms=blocking, anrs=len(anrs),
            crash=crash_text[:300] if crash_text else None,
            crashed_before_timing=crash_text is not None and (
                first_timing is None or (crash_line is not None and crash_line < first_timing)),
            completed=completed, thresholds=thresholds,
            empty=entries == 0 and not (self.violations or self.anrs or self.crashes
                                        or self.timings or self.displayed or self.deaths))
        issues = build_issues(
            violations=violations, anrs=anrs, crashes=crashes, timings=timings,
            tests=self.tests, blocking_time_ms=blocking, thresholds=thresholds,
            other_violations=len(other_violations), other_anrs=len(other_anrs),
            other_crashes=len(other_crashes), package=package, damaged_lines=damaged,
            displayed=self.displayed,
            deaths=[d for d in self.deaths if package is not None and (
                (d.pid is not None and d.pid in app_pids) or belongs_to(d.process, package))])
        issues += self.heuristics.issues(package, app_pids)
        return AnalysisResult(
            entries=entries, lines=nlines, damaged_lines=damaged, violations=violations,
            blocking_time_ms=blocking, anrs=anrs, crashes=crashes, displayed=self.displayed,
            issues=issues, summary=verdict.summary, verification_status=str(verdict.status),
            reason_code=verdict.reason_code, package=package, app_pids=sorted(app_pids),
            timings=timings, tests=self.tests, deaths=self.deaths,
            other_violations=other_violations, other_anrs=other_anrs,
            other_crashes=other_crashes, formats=formats)
