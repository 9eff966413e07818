"""The whole-buffer pre-filter: which lines of a log the per-line parser has to read.

Most of a test run's log is chatter: plain ``threadtime`` lines that name none of the
evidence keywords and continue no open trace. ``analyze`` counts those without building them
(``_State.wants``); this module finds them without a Python step per line, with two compiled
patterns run once over the log's bytes in native code:

* **shape** (RE2, one DFA): the lines that are *not* of the plain shape
  ``MM-DD HH:MM:SS.fff  PID  TID L Tag: msg`` (ASCII digits, a pid and tid without leading
  zeros, a tag starting with a printable character and ending at the line's first ``:``,
  followed by a space). A line of that shape is one that ``lines._THREADTIME_FAST`` matches;
  the pattern is the shape's complement, one alternative per place a line can leave it.
* **keywords** (Hyperscan, one database): the keywords and tags ``wants`` looks for, lines
  over 2,000 bytes (the per-line path reads those over ``lines._HEAD`` differently), and the
  characters that make ``str.splitlines`` split where ``\\n`` does not (``\\r``, ``\\x0b``,
  U+2028 …) or that ``iter_lines`` rewrites (``\\x1b``) — one of those and the log takes the
  per-line path whole.

Every other line is a plain threadtime line ``wants`` declines as long as no trace or ANR block
is open for its pid/tid; while one is, the gap is searched for that pid/tid (``_key_pattern``)
and the lines found are read one by one. The line after a line of another shape is read too (a
console wrap may join it back). The lines read go through the same ``lines.Cursor`` as in
``iter_lines``, so the results are the same by construction; a property test and the corpora
hold them equal.

The *lane*: plain lines that start a process (``Start proc PID:NAME …``, a busy system's
chatter, about one line in eight of a test run's log). Their only effect is on the pid →
process map (``_State.started``), so between two lines read they are taken in bulk: one
``findall`` over the gap (``_LANE``: pid, name, and the rest from its first `` for ``, whose
``processes.start_host`` is cached) and one ``dict.update``. The keyword scan sends the lines
where that could read differently from ``feed`` the long way (``_LANE_LONG_WAY``): a ``proc``
not inside ``Start proc``, a ``Start proc`` without the ``PID:NAME`` form or with a non-ASCII
name, a `` for `` or a ``% `` before it, a line over 2,000 bytes. Closing a stale trace or ANR block is
ordered before the next line fed, a lane line included (``_State.quiet_until``): from the
line where one may go stale, the gap's first ``Start proc`` line is read the long way. Without
the native libraries (``available()`` false) ``analyze`` reads every line, as before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import chain
from typing import Any

from controller.analysis.lines import _HEAD, _THREADTIME_FAST, Cursor, LogLine, ParsedLog
from controller.analysis.processes import _SCAN, start_host

try:  # native scanners: without them (a platform with no wheel) every line is read
    import hyperscan
    import re2
    _NATIVE = True
except ImportError:  # pragma: no cover - both are dependencies of the controller
    _NATIVE = False

__all__ = ["KEYWORDS", "Plan", "available", "iter_scanned", "plan"]

# Every substring ``_State.wants`` tests (and every tag it wants, or a substring of it).
KEYWORDS = (
    "StrictMode", "iolation", "proc", "never released", "eaked", "Finalizing a Cursor",
    "FATAL EXCEPTION", "ANR in", "Displayed", "elapsed", "PROCESS", "Kill", "died", "signal",
    "POLICY_DEATH", ">>> ", "DroidUnblocker", "executing service", "TestRunner", "am_anr",
    "pause timeout", "GC freed",
)

_KEYWORD, _ABORT = 0, 1
# ``proc`` is looked for where it is not part of ``Start proc`` (the lane's word, which the
# gaps' ``findall`` finds): preceded by anything but ``Start ``, byte by byte.
_PROC_ELSEWHERE = (rb"(?:^|[^ ])proc|(?:^|[^t]) proc|(?:^|[^r])t proc|(?:^|[^a])rt proc"
                   rb"|(?:^|[^t])art proc|(?:^|[^S])tart proc")
# ``Start proc`` lines the lane must not take: a ``Start proc `` without the ``PID:NAME`` of
# ``processes._START`` after it (the pre-7.0 form, one in a tag) or with a non-ASCII name
# (``\d`` and ``\s`` differ there) — without the space it matches no form of ``parse_start``;
# a `` for `` before it on the line (``start_host`` reads the message's first one); a ``% ``
# before it (``feed`` also takes a CPU reading, ``heuristics``: one starts the message); a
# line over ``processes._SCAN`` bytes (``parse_start`` reads a message's first 2,000
# characters). (The log's last line is read anyway.) One alternation each where they share a
# word: Hyperscan runs them faster so.
_NAME = rb"[^\t\n\x0b-\x0d\x1c-\x1f /{]"
_LANE_LONG_WAY = (
    rb"Start proc (?:[^0-9]|[0-9]+[^0-9:]|[0-9]+:[\t\n\x0b-\x0d\x1c-\x1f /{]"
    rb"|[0-9]+:" + _NAME + rb"*[\x80-\xff])",
    rb" for [^\n]*Start proc",
    rb"% [^\n]*Start proc",
    rb"\n[^\n]{%d}" % (min(_SCAN, _HEAD) + 1),
)

# The plain shape, token by token: (byte class, repetition). Consecutive classes are disjoint
# where a repetition meets its successor, so a prefix of the shape parses one way only.
_DIGIT = frozenset(b"0123456789")
_SPACE = frozenset(b" ")
_NONZERO = frozenset(b"123456789")
_TOKENS: tuple[tuple[frozenset[int], str], ...] = (
    (_DIGIT, ""), (_DIGIT, ""), (frozenset(b"-"), ""), (_DIGIT, ""), (_DIGIT, ""),
    (_SPACE, ""), (_DIGIT, ""), (_DIGIT, ""), (frozenset(b":"), ""), (_DIGIT, ""),
    (_DIGIT, ""), (frozenset(b":"), ""), (_DIGIT, ""), (_DIGIT, ""), (frozenset(b"."), ""),
    (_DIGIT, "+"), (_SPACE, "+"), (_NONZERO, ""), (_DIGIT, "*"), (_SPACE, "+"),
    (_NONZERO, ""), (_DIGIT, "*"), (_SPACE, ""), (frozenset(b"VDIWEFAS"), ""),
    (_SPACE, "+"), (frozenset(range(0x21, 0x7F)) - frozenset(b":"), ""),
    (frozenset(range(256)) - frozenset(b":\n"), "*"), (frozenset(b":"), ""), (_SPACE, ""),
)


def _class(members: frozenset[int]) -> str:
    out, b = [], sorted(members)
    i = 0
    while i < len(b):
        j = i
        while j + 1 < len(b) and b[j + 1] == b[j] + 1:
            j += 1
        out.append(f"\\x{b[i]:02x}" if i == j else f"\\x{b[i]:02x}-\\x{b[j]:02x}")
        i = j + 1
    return "[" + "".join(out) + "]"


def _not_shape() -> str:
    """A line start (after ``\\n``) whose line leaves the shape: for each token, the shape up to
    it, then a byte neither it nor a repetition just before it accepts (``\\n`` included)."""
    alts = []
    for k, (members, rep) in enumerate(_TOKENS):
        if rep == "*":
            continue              # the next token's alternative covers it
        allowed = set(members)
        j = k - 1
        while j >= 0 and _TOKENS[j][1]:
            allowed |= _TOKENS[j][0]
            if _TOKENS[j][1] == "+":
                break
            j -= 1
        prefix = "".join(_class(m) + r for m, r in _TOKENS[:k])
        alts.append(prefix + _class(frozenset(range(256)) - allowed))
    return "\\n(?:" + "|".join(alts) + ")"


@lru_cache(maxsize=1)
def _engines() -> tuple[Any, Any]:
    opts = re2.Options()
    opts.encoding = re2.Options.Encoding.LATIN1
    opts.never_capture = True
    shape = re2.compile(_not_shape().encode("ascii"), opts)
    words = [k for k in KEYWORDS if k != "proc"] + ["am_proc_start"]
    exprs = [re.escape(k).encode("ascii") for k in words]
    exprs += [_PROC_ELSEWHERE, *_LANE_LONG_WAY]
    exprs.append(rb"[\r\x0b\x0c\x1b\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]")
    ids = [_KEYWORD] * (len(exprs) - 1) + [_ABORT]
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=ids, flags=0)
    return shape, db


def available() -> bool:
    return _NATIVE


_local = threading.local()


def _scratch(db: Any) -> Any:
    """This thread's Hyperscan scratch space: one scratch serves one scan at a time, and the
    analyzer runs in worker threads (several runs at once)."""
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = hyperscan.Scratch(db)
    return scratch


@dataclass(slots=True)
class Plan:
    """A log's bytes and the line starts the per-line parser must read, ascending."""

    data: bytes
    errors: str            # how a line's bytes become its text: as ``decode`` does, or back
    starts: list[int]      # to the very ``str`` they were encoded from

    @property
    def total(self) -> int:
        """Lines, as ``str.splitlines`` counts them (``iter_scanned`` counts them on its way)."""
        n = self.data.count(b"\n")
        return n if self.data.endswith(b"\n") or not self.data else n + 1


class _Abort(Exception):
    pass


def plan(text: str | bytes) -> Plan | None:
    """Scan a log (its text, or the bytes of a UTF-8 file); None: read every line instead."""
    if not available() or not text:
        return None
    if isinstance(text, str):
        data, errors = text.encode("utf-8", "surrogatepass"), "surrogatepass"
    else:
        if text.startswith((b"\xff\xfe", b"\xfe\xff")):
            return None                          # UTF-16: ``decode`` and the per-line path
        data, errors = (text[3:] if text.startswith(b"\xef\xbb\xbf") else text), "replace"
        head = data[:2000]
        if len(head) >= 8 and (head[0::2].count(0) or head[1::2].count(0)):
            return None                          # maybe UTF-16 without a BOM: as ``decode``
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")     # a lone \r still sends the log down the
    shape, db = _engines()                      # per-line path (the scan aborts on it)
    ends: list[int] = []
    add = ends.append

    def hit(pattern: int, _start: int, end: int, _flags: int, _ctx: object) -> bool | None:
        # ``end - 1`` is a byte of the line (for a long line: the 2,001st after its \n).
        if pattern == _ABORT:
            raise _Abort
        add(end - 1)
        return None

    try:
        db.scan(data, match_event_handler=hit, scratch=_scratch(db))
    except _Abort:
        return None
    rfind = partial(data.rfind, b"\n", 0)
    starts = {rfind(e) + 1 for e in ends}
    starts.add(0)                                  # no \n before the first line
    for m in shape.finditer(data):
        s = m.start() + 1                          # the line after the \n leaves the shape
        starts.add(s)
        nxt = data.find(b"\n", s)
        if nxt >= 0:
            starts.add(nxt + 1)                    # a console wrap may join the next one
    last = data.rfind(b"\n")
    if last != len(data) - 1:
        starts.add(last + 1)                       # an unterminated last line: read it
    starts.discard(len(data))
    return Plan(data, errors, sorted(starts))


@lru_cache(maxsize=64)
def _key_pattern(keys: frozenset[tuple[int, int]]) -> re.Pattern[bytes]:
    # In a line of the shape, pid and tid are digit runs without leading zeros after a space,
    # then the level: a line of that key holds " PID +TID L ". (Anywhere else is a false hit:
    # the line is read and ``wants`` decides.)
    alts = sorted(f"{p} +{t}".encode("ascii") for p, t in keys)
    return re.compile(b" (?:" + b"|".join(alts) + b") [VDIWEFAS] ")


# From ``Start proc``: the pid and name of ``processes._START`` (``Start proc (\d+):([^\s/{]+)``,
# here on an ASCII name, where ``\s`` is what ``str.isspace`` says), then the rest of the line
# from its first `` for `` (empty without one): every match of ``processes._HOST`` starts with
# `` for ``, and none starts inside ``Start proc PID:NAME``.
_LANE = re.compile(
    rb"Start proc ([0-9]+):(" + _NAME + rb"+)[^ \n]*+(?: (?!for )[^ \n]*+)*+( for [^\n]*+)?")
_HOSTS_MAX = 512


def iter_scanned(
    p: Plan,
    stats: ParsedLog,
    keep: Callable[[re.Match[str]], bool],
    open_keys: Callable[[], frozenset[tuple[int, int]] | None],
    quiet_until: Callable[[], int],
    started: Callable[[Iterable[tuple[int, str]], Iterable[tuple[int, str]]], None],
) -> Iterator[LogLine]:
    """What ``iter_lines(text, stats, keep)`` yields, reading only the lines it must.

    ``open_keys()`` says, between lines, which plain threadtime lines ``keep`` would take
    whatever their message: those of these (pid, tid) keys, or (None) every line.
    ``quiet_until()``: the first line index at which feeding a line may close a stale trace or
    ANR block. ``started(procs, hosts)`` takes lane lines at once: their (pid, process) and
    (pid, host) pairs in order, as ``feed`` would store them one by one.
    """
    data, errors = p.data, p.errors
    size = len(data)
    cur = Cursor(stats, keep)
    fast = _THREADTIME_FAST.match
    count = data.count
    find = data.find
    rfind = data.rfind
    lane_lines = _LANE.findall
    hosts: dict[bytes, str | None] = {}

    def text_at(start: int) -> tuple[str, int]:
        """The line at ``start`` and where the next one starts."""
        end = find(b"\n", start)
        if end < 0:
            end = size
        return data[start:end].decode("utf-8", errors), end + 1

    def last_of(end: int) -> Callable[[], str]:
        # The line that ends at ``end`` (exclusive of its \n), read only if asked for.
        return lambda: text_at(rfind(b"\n", 0, end - 1) + 1)[0]

    def read(idx: int, start: int) -> tuple[LogLine | None, int, int]:
        """One line through the cursor: (the line or None, next index, next start)."""
        raw, nstart = text_at(start)
        m = fast(raw) if len(raw) <= _HEAD else None
        if m is not None:
            return cur.threadtime(idx, raw, m), idx + 1, nstart
        def nxt() -> str | None:
            return text_at(nstart)[0] if nstart < size else None

        ln, joined = cur.other(idx, raw, nxt)
        if joined:
            return ln, idx + 2, min(text_at(nstart)[1], size)
        return ln, idx + 1, nstart

    def host_of(tail: bytes) -> str | None:
        if not tail:
            return None
        try:
            return hosts[tail]
        except KeyError:
            host = start_host(tail.decode("utf-8", errors))
            if len(hosts) >= _HOSTS_MAX:
                hosts.clear()
            hosts[tail] = host
            return host

    def lane(start: int, stop: int) -> None:
        """Take the ``Start proc`` lines from ``start`` to ``stop`` at once (plain lines, none of
        an open key, where no trace or ANR block goes stale)."""
        found = lane_lines(data, start, stop)
        if not found:
            return
        pids, names, tails = zip(*found, strict=True)
        numbers = list(map(int, pids))
        of = {t: host_of(t) for t in set(tails)}
        if any(of.values()):
            owners = [(n, h) for n, h in zip(numbers, map(of.__getitem__, tails), strict=True)
                      if h is not None]
        else:
            owners = []
        started(zip(numbers, map(bytes.decode, names), strict=True), owners)

    def line_at(start: int, lines: int) -> int:
        """Where the line ``lines`` lines below the one at ``start`` starts."""
        for _ in range(lines):
            start = find(b"\n", start) + 1
        return start

    def region(idx: int, start: int, stop: int) -> Iterator[LogLine]:
        """Plain lines from ``start`` (line ``idx``) up to ``stop``: lane lines are taken,
        the others skipped unless a trace or ANR block is open for their key. Leaves
        ``state`` at the line at ``stop``."""
        while start < stop:
            keys = open_keys()
            if keys is None:            # every line is read
                ln, idx, start = read(idx, start)
                if ln is not None:
                    yield ln
                continue
            at = stop
            if keys:
                km = _key_pattern(keys).search(data, start, stop)
                if km is not None:
                    at = rfind(b"\n", 0, km.start()) + 1
            # No line before ``at`` is of an open key (closing a stale trace only shrinks
            # the keys): its lane lines are taken at once and the others skipped, up to the
            # line from which feeding one may close a stale trace or ANR block; from there,
            # the first ``Start proc`` line is read (``feed`` closes it first).
            if at > start:
                n = idx + count(b"\n", start, at)
                quiet = quiet_until()
                if quiet < n:
                    cut = line_at(start, quiet - idx) if quiet > idx else start
                    lane(start, cut)
                    first = find(b"Start proc", cut, at)
                    if first >= 0:
                        at = rfind(b"\n", 0, first) + 1
                        n = idx + count(b"\n", start, at)
                else:
                    lane(start, at)
                if at > start:
                    cur.skip(n - idx, n - 1, last_of(at))
                    idx, start = n, at
            if start < stop:            # a line of an open key (or a false hit), or a
                ln, idx, start = read(idx, start)     # ``Start proc`` line after ``quiet``
                if ln is not None:
                    yield ln
        state[0], state[1] = idx, start

    state = [0, 0]     # the next line's index and start
    idx = start = 0
    try:
        for s in chain(p.starts, (size,)):
            if s < start:
                continue                  # already read (joined to the line before it)
            if s > start:
                yield from region(idx, start, s)
                idx, start = state
            if s >= size:
                break
            ln, idx, start = read(idx, start)
            if ln is not None:
                yield ln
    finally:
        cur.finish(idx)
