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
* **keywords** (Hyperscan, one database): the keywords and tags ``wants`` looks for, lines over
  ``lines._HEAD`` bytes (the per-line path reads those differently), and the characters that
  make ``str.splitlines`` split where ``\\n`` does not (``\\r``, ``\\x0b``, U+2028 …) or that
  ``iter_lines`` rewrites (``\\x1b``) — one of those and the log takes the per-line path whole.

Every other line is a plain threadtime line ``wants`` declines as long as no trace or ANR block
is open for its pid/tid; while one is, the gap is searched for that pid/tid (``_key_pattern``)
and the lines found are read one by one. The line after a line of another shape is read too (a
console wrap may join it back). The lines read go through the same ``lines.Cursor`` as in
``iter_lines``, so the results are the same by construction; a property test and the corpora
hold them equal.

The *lane*: plain lines whose only keyword is ``proc`` (a busy system's ``Start proc`` lines,
about one line in eight of a test run's log). Each is read from the bytes where it lies — no
``str``, no ``LogLine`` —: the first ``Start proc PID:NAME`` of its message, on an ASCII line of
at most 2,000 bytes with no `` for `` before it, and ``processes.start_host`` of the rest (cached
by the rest from its first `` for ``: in a run the same few endings repeat). Any other lane
line, or one of an open key, goes through ``_State.proc_line`` or the cursor as before. Without the native libraries (``available()`` false) ``analyze`` reads every
line, as before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import chain
from typing import Any

from controller.analysis.lines import _HEAD, _THREADTIME_FAST, Cursor, LogLine, ParsedLog
from controller.analysis.processes import start_host

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

_KEYWORD, _LONG, _ABORT, _PROC = 0, 1, 2, 3
# A line whose only keyword is this one (the ``Start proc`` chatter of a busy system) takes a
# shorter road when its message has it: ``_State.proc_line`` (the same steps as ``feed``).
_PROC_KEYWORD = "proc"

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
    words = [k for k in KEYWORDS if k != _PROC_KEYWORD] + ["am_proc_start"]
    exprs = [re.escape(k).encode("ascii") for k in words]
    exprs.append(_PROC_KEYWORD.encode("ascii"))
    exprs.append(b"\\n[^\\n]{%d}" % (_HEAD + 1))
    exprs.append(rb"[\r\x0b\x0c\x1b\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]")
    ids = [_KEYWORD] * len(words) + [_PROC, _LONG, _ABORT]
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
    lane: list[int]        # starts of plain lines whose only keyword is ``_PROC_KEYWORD``
    ascii: bool            # the whole log is ASCII

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
    proc_ends: list[int] = []
    add, add_proc = ends.append, proc_ends.append

    def hit(pattern: int, _start: int, end: int, _flags: int, _ctx: object) -> bool | None:
        # ``end - 1`` is a byte of the line (for _LONG: the 2,049th after its \n).
        if pattern == _PROC:
            add_proc(end - 1)
        elif pattern == _ABORT:
            raise _Abort
        else:
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
    # The lane: the lines of the "proc" hits (their \n before, each once), less those read.
    before = dict.fromkeys(map(rfind, proc_ends))
    for s in starts:
        before.pop(s - 1, None)
    lane = [n + 1 for n in before]
    lane.sort()                                    # hits come in order: already sorted
    return Plan(data, errors, sorted(starts), lane, bool(lane) and data.isascii())


@lru_cache(maxsize=64)
def _key_pattern(keys: frozenset[tuple[int, int]]) -> re.Pattern[bytes]:
    # In a line of the shape, pid and tid are digit runs without leading zeros after a space,
    # then the level: a line of that key holds " PID +TID L ". (Anywhere else is a false hit:
    # the line is read and ``wants`` decides.)
    alts = sorted(f"{p} +{t}".encode("ascii") for p, t in keys)
    return re.compile(b" (?:" + b"|".join(alts) + b") [VDIWEFAS] ")


# From a message's start: what precedes the first match of ``processes._START``
# (``Start proc (\d+):([^\s/{]+)``), its groups, and the rest of the line — on an ASCII line,
# where ``\d`` is [0-9] and ``\s`` what ``str.isspace`` says.
_START_BYTES = re.compile(
    rb"([^\n]*?)Start proc ([0-9]+):([^\t\n\x0b-\x0d\x1c-\x1f /{]+)([^\n]*)")
_HOSTS_MAX = 512


def iter_scanned(
    p: Plan,
    stats: ParsedLog,
    keep: Callable[[re.Match[str]], bool],
    open_keys: Callable[[], frozenset[tuple[int, int]] | None],
    proc_line: Callable[[int, int, int, str], bool],
    proc_start: Callable[[int, int, str, str | None], None],
) -> Iterator[LogLine]:
    """What ``iter_lines(text, stats, keep)`` yields, reading only the lines it must.

    ``open_keys()`` says, between lines, which plain threadtime lines ``keep`` would take
    whatever their message: those of these (pid, tid) keys, or (None) every line.
    ``proc_line(index, pid, tid, msg)`` takes a plain line whose only keyword is in its
    message and is ``_PROC_KEYWORD`` in place of yielding it, or declines it (False: it is
    yielded as usual). ``proc_start(index, pid, name, host)`` is ``proc_line`` for such a line
    of no open key whose message this module has read itself (``Start proc PID:NAME``, once, on
    an ASCII line; ``host``: what ``processes.start_host`` says of the message).
    """
    data, errors = p.data, p.errors
    lane = p.lane
    ascii_log = p.ascii
    nlane = len(lane)
    size = len(data)
    cur = Cursor(stats, keep)
    fast = _THREADTIME_FAST.match
    count = data.count
    find = data.find
    rfind = data.rfind
    start_match = _START_BYTES.match
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

    def read_lane(idx: int, start: int) -> LogLine | None:
        """A lane line, one by one (as ``proc_line`` and ``read`` take it)."""
        raw = text_at(start)[0]
        # date, time, pid, tid, level, "tag: msg" — the plain shape, so the tag
        # ends at the line's first ":" after the time, and ": " follows it
        f = raw.split(None, 5)
        tail = f[5]
        msg = tail[tail.index(":") + 2:]
        if _PROC_KEYWORD in msg and proc_line(idx, int(f[2]), int(f[3]), msg):
            cur.kept(idx, raw)
            return None
        return read(idx, start)[0]

    def started(idx: int, start: int) -> bool:
        """A lane line of no open key, read here: False, it must go the long way."""
        # The tag ends at the first ":" after the time ("MM-DD HH:MM:SS", 14 bytes).
        m = start_match(data, find(b":", start + 14) + 2)
        if m is None:
            return False                # no ``Start proc PID:NAME``: the long way
        head, pid, name, tail = m.groups()
        if (m.end() - start > 2000      # ``parse_start`` reads a message's first 2,000
                or b" for " in head):   # ``start_host`` could match before it
            return False
        if not ascii_log and not data[start:m.end()].isascii():
            return False
        at = tail.find(b" for ")
        if at < 0:
            host = None                 # every match of ``_HOST`` starts with " for "
        else:
            # No match of ``_HOST`` starts before the tail's first " for " (nor inside
            # "Start proc PID:NAME"): its first match in the message is this piece's.
            tail = tail[at:]
            try:
                host = hosts[tail]
            except KeyError:
                host = start_host(tail.decode("ascii"))
                if len(hosts) >= _HOSTS_MAX:
                    hosts.clear()
                hosts[tail] = host
        proc_start(idx, int(pid), name.decode("ascii"), host)
        return True

    li = 0             # the next lane line: lane[li]

    def one(idx: int, start: int) -> tuple[LogLine | None, int, int]:
        """The line at ``start``, the long way (a lane line as ``proc_line`` takes it)."""
        nonlocal li
        if li < nlane and lane[li] == start:
            li += 1
            return read_lane(idx, start), idx + 1, (find(b"\n", start) + 1) or size
        return read(idx, start)

    def region(idx: int, start: int, stop: int) -> Iterator[LogLine]:
        """Plain lines from ``start`` (line ``idx``) up to ``stop``: lane lines are taken,
        the others skipped unless a trace or ANR block is open for their key. Leaves
        ``state`` at the line at ``stop``."""
        nonlocal li
        while li < nlane and lane[li] < start:
            li += 1                     # joined to a line read before
        while start < stop:
            keys = open_keys()
            if keys is None:            # every line is read
                ln, idx, start = one(idx, start)
                if ln is not None:
                    yield ln
                continue
            at = stop
            if keys:
                km = _key_pattern(keys).search(data, start, stop)
                if km is not None:
                    at = rfind(b"\n", 0, km.start()) + 1
            # No line before ``at`` is of an open key (closing a stale trace only shrinks
            # the keys): its lane lines are taken here, up to one that must go the long way,
            # and the others skipped.
            pos, n = start, idx
            while li < nlane and lane[li] < at:
                s = lane[li]
                n += count(b"\n", pos, s)
                pos = s
                if not started(n, s):
                    at = s
                    break
                li += 1
            if at > start:
                n += count(b"\n", pos, at)
                cur.skip(n - idx, n - 1, last_of(at))
                idx, start = n, at
            if start < stop:            # a line of an open key (or a false hit), or a lane
                ln, idx, start = one(idx, start)     # line ``started`` declined
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
