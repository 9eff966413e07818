"""Log lines: every logcat rendering we have seen, parsed into one shape.

Formats (``logcat -v …`` per AOSP ``liblog/logprint.cpp``; Android Studio's viewers):

* ``threadtime``   ``MM-DD HH:MM:SS.mmm  PID  TID L Tag     : msg`` (also with the date cut off,
  so the line starts at the right-aligned pid column)
* ``time``         ``MM-DD HH:MM:SS.mmm L/Tag( PID): msg`` (DDMS exports add ``:`` after the time)
* ``brief``        ``L/Tag( PID): msg``; ``tag``: ``L/Tag: msg``
* ``long``         ``[ MM-DD HH:MM:SS.mmm PID:TID L/Tag ]`` then the message lines, then a blank
* ``studio_legacy`` ``YYYY-MM-DD HH:MM:SS.mmm PID-TID/process L/Tag: msg`` (also without the pid,
  or without time and pid, or as ``com.pkg L/Tag: msg`` with only the process shown; Studio 1.x
  wrote ``L/Tag﹕ msg`` with U+FE55 SMALL COLON); continuation lines are indented to the message
  column
* ``studio``       Android Studio 2022+: ``YYYY-MM-DD HH:MM:SS.mmm PID-TID Tag process L msg``;
  ``studio_compact``: ``HH:MM:SS.mmm L msg``
* ``studio_4x``    ``Tag  L  msg``, continuation lines repeat only the level (``D      at …``)
* ``level_tag``    ``L Tag: msg``; ``tag_only`` ``StrictMode: msg`` (for a few well-known tags)
* ``forwarded``    ``[Tag] msg``: a line re-emitted by another runtime's logger (.NET MAUI/Xamarin),
  recognised by its shape — any tag-like word in brackets —, stack frames prefixed the same way

Wrappers removed before matching: markdown quoting and backticks, list dashes, a leading ``,``
(log-concatenating CI tools), CI timestamps (GitHub Actions ISO, Taskcluster ``[task …]``), a
``findstr``/``grep -n`` file prefix, indentation. Lines that match nothing are continuation lines:
they inherit the pid/tid/tag of the entry above them (that is how Studio pastes and hard-wrapped
lines look), or stand alone in a bare block. Lines that look like a truncated prefix are counted
as damaged; a console wrap that split the timestamp over two lines is joined back.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = ["LogLine", "ParsedLog", "clean", "decode", "iter_lines", "parse_lines"]

_L = r"[VDIWEFAS]"
_DATE = r"(?:(?:\d{4}-)?\d\d-\d\d\s+)?"
# Wall clock (with -v zone's offset), or -v epoch / -v monotonic seconds.
_TIME = r"(?:\d\d:\d\d:\d\d(?:\.\d+)?(?:\s+[+-]\d{4})?|\d+\.\d{3,9})"

# Groups: pid, tid, level, tag, msg. The tag is everything up to the first ": " (tags may hold
# ':' themselves, e.g. a truncated "prung:SamSprun"), and the message may be empty.
_THREADTIME = re.compile(
    rf"{_DATE}{_TIME}\s+(?:\w+\s+)??(\d+)\s+(\d+)\s+({_L})\s+(\S.*?|)\s*:(?: |$)(.*)$"
)
# The common case first: a tag without ':' (the general pattern above handles the rest).
_THREADTIME_FAST = re.compile(
    rf"{_DATE}{_TIME}\s+(\d+)\s+(\d+)\s+({_L})\s+(\S[^:]*?|)\s*:(?: |$)(.*)$"
)
# A threadtime line cut inside its tag (no ": " yet): pid, tid, level, what is left of the tag.
_THREADTIME_CUT = re.compile(rf"{_DATE}{_TIME}\s+(\d+)\s+(\d+)\s+({_L})(?:\s+(\S*))?\s*$")
_THREADTIME_NODATE = re.compile(rf"(\d+)\s+(\d+)\s+({_L})\s+(\S.*?)\s*:(?: |$)(.*)$")
# pid, tid, process, level, tag, msg
_STUDIO_LEGACY = re.compile(
    rf"{_DATE}{_TIME}\s+(\d+)-(\d+)/(\S*)\s+({_L})/(.*?)(?::(?: |$)|\ufe55 ?)(.*)$"
)
# level, tag, pid, msg  (time format, DDMS export, Studio without pid)
_TIME_FMT = re.compile(rf"{_DATE}{_TIME}:?\s+({_L})/(.*?)(?:\(\s*(\d+)\))?:(?: |$)(.*)$")
# level, tag, pid, msg  (brief, tag)
_BRIEF = re.compile(rf"({_L})/([^\s(][^(]*?|[^\s(:]+)(?:\(\s*(\d+)\))?:(?: |$)(.*)$")
# pid, tid, tag, process, level, msg (Studio 2022+; tag and process columns can be hidden)
_STUDIO = re.compile(
    rf"{_DATE}{_TIME}\s+(?:(\d+)-(\d+)\s+)?(?:(\S+)\s+)??(?:(\S+)\s+)??({_L})(?:\s+(.*))?$"
)
# Studio 2022+ with the time and pid columns hidden: tag, process, level, msg.
_STUDIO_NOTIME = re.compile(rf"([\w.$:/-]+)\s{{2,}}(\S+)\s{{2,}}({_L})\s{{2,}}(.*)$")
_STUDIO_COMPACT = re.compile(rf"{_TIME}\s+({_L})\s\s+(.*)$")
# pid, tid, level, tag
_LONG = re.compile(
    rf"\[\s*{_DATE}{_TIME}\s+(?:\w+\s*:\s*)??(\d+)\s*:\s*(0x[0-9a-fA-F]+|\d+)\s+({_L})/(.*?)\s*\]$"
)
# A tag forwarded by another runtime's logger (.NET MAUI/Xamarin's debug output, IDE consoles):
# ``[StrictMode] msg``, ``[ContextImpl] \tat …`` — any tag-shaped word in brackets, then a space.
_FORWARDED = re.compile(r"\[([A-Za-z][\w.$:/-]{0,63})\](?: |\t|$)(.*)$")
# Android Studio 2.x/3.x with time and pid hidden, the process shown: ``com.pkg L/Tag: msg``.
_PROCESS_BRIEF = re.compile(
    rf"([A-Za-z][\w]*(?:\.[\w]+)+(?::[\w.]+)?)\s+({_L})/([^\s(:][^(:]*?):(?: |$)(.*)$")
_STUDIO_4X = re.compile(rf"([\w.$:/-]+)\s{{2,}}({_L})\s{{2,}}(.*)$")
_LEVEL_ONLY = re.compile(rf"({_L})\s{{2,}}(.*)$")
_LEVEL_TAG = re.compile(rf"({_L})\s+([^\s:]\S*?)\s*:(?: |$)(.*)$")
_TAG_ONLY = re.compile(
    r"(StrictMode|AndroidRuntime|ActivityManager|ActivityTaskManager|ActivityManagerService"
    r"|DroidUnblocker|TestRunner|System\.err|System\.out|libc|DEBUG):(?: |$)(.*)$"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SEPARATOR = re.compile(r"-{5,} ?(?:beginning of|switch to|PROCESS (?:STARTED|ENDED))")
_WRAPPER = re.compile(
    r"(?:[\s>`,\ufeff\u200b]+"                       # indentation, quote, backticks, ',', BOM
    r"|\d{1,6} ?\| "                                  # a code viewer's line-number gutter
    r"|\d{1,7}\t"                                     # cat -n (the number right-aligned)
    r"|\d{1,7}:(?: |(?=\d\d-\d\d\s))"                  # an editor's "12: ", grep -n's "12:"
    r"|- (?=\S)"                                      # markdown list item
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s"  # GitHub Actions / ISO timestamp
    r"|\[task [^\]]*\]\s"                             # Taskcluster
    r"|\[\d{4}-\d\d-\d\d[T ][^\]]*\]\s"               # bracketed CI timestamp
    r"|[A-Za-z]:\\[^:]*:\d+:"                         # Windows findstr file:line:
    r"|[\w./-]+\.(?:txt|log):\d+:"                    # grep -n file:line:
    r")+"
)
# What a prefix looks like when the rest of it was cut off or mangled.
_DAMAGED = re.compile(r"(?:\d{4}-)?\d\d-\d?\d?(?:\s|$)|\d\d:\d\d(?::|\s|$)|\d+-\d+/|\d+\s+\d+\s*$|\d+\s*$"
                      rf"|{_L}/[^\s(:]+\(\s*\d*\s*$")


# A damaged line that begins with a date and an hour, a time with its fraction, or a brief prefix
# cut before its ")": the start of an entry, never the continuation of the one above it.
_ENTRY_START = re.compile(
    rf"(?:\d{{4}}-)?\d\d-\d\d\s+\d\d|\d\d:\d\d:\d\d\.\d|{_L}/[^\s(:]+\(\s*\d*\s*$")

# The pid of a damaged entry start, where its prefix shows it whole (followed by a space or "-").
_PARTIAL_PID = re.compile(rf"{_DATE}{_TIME}\s+(\d+)(?=\s|-)")

_DATED = re.compile(r"(?:\d{4}-)?\d\d-\d\d\s+\d\d:\d\d:\d\d")

_HEAD = 2048  # prefixes are matched on at most this many characters


@dataclass(slots=True)
class LogLine:
    """One physical line (or a console-wrapped pair joined back), with its prefix parsed.

    ``msg`` is the message after the prefix, or the cleaned text of an unprefixed line.
    ``entry`` says a log prefix was recognised; ``continued`` that the line had none and
    inherits ``pid``/``tid``/``level``/``tag``/``process`` from the entry above it.
    """

    index: int
    raw: str
    msg: str
    pid: int | None = None
    tid: int | None = None
    level: str | None = None
    tag: str | None = None
    process: str | None = None
    fmt: str = "bare"
    entry: bool = False
    continued: bool = False
    damaged: bool = False


@dataclass(slots=True)
class ParsedLog:
    lines: list[LogLine]
    entries: int = 0
    total: int = 0
    damaged: int = 0
    formats: Counter[str] = field(default_factory=Counter)


def decode(data: bytes) -> str:
    """Bytes of a log file as text: UTF-8 (with or without BOM), or UTF-16 as Windows
    PowerShell writes ``adb logcat > file``; undecodable bytes become U+FFFD."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    head = data[:2000]
    if len(head) >= 8:
        even, odd = head[0::2].count(0), head[1::2].count(0)
        if odd > 0.9 * (len(head) // 2) and even == 0:
            return data.decode("utf-16-le", errors="replace")
        if even > 0.9 * (len(head) // 2) and odd == 0:
            return data.decode("utf-16-be", errors="replace")
    return data.decode("utf-8", errors="replace")


def clean(line: str) -> str:
    """Strip wrappers (quoting, CI prefixes, indentation) from the start of a line."""
    m = _WRAPPER.match(line)
    return line[m.end():] if m else line


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s, 16) if s.startswith("0x") else int(s)
    except ValueError:
        return None


_Match = tuple[str, int | None, int | None, str | None, str | None, str | None, str]


def _match(s: str) -> _Match | None:
    """Recognise a prefix on cleaned text: (fmt, pid, tid, level, tag, process, msg)."""
    c = s[:1]
    if c.isdigit():
        m = _THREADTIME.match(s)
        if m:
            return ("threadtime", int(m[1]), int(m[2]), m[3], m[4], None, m[5])
        m = _STUDIO_LEGACY.match(s)
        if m:
            proc = m[3] if m[3] and m[3] != "?" else None
            return ("studio_legacy", int(m[1]), int(m[2]), m[4], m[5], proc, m[6])
        m = _TIME_FMT.match(s)
        if m:
            return ("time", _int(m[3]), None, m[1], m[2], None, m[4])
        m = _STUDIO_COMPACT.match(s)
        if m:
            return ("studio_compact", None, None, m[1], None, None, m[2])
        m = _THREADTIME_CUT.match(s)
        if m:  # not Studio's "tag process" columns: those are never two bare numbers
            return ("threadtime", int(m[1]), int(m[2]), m[3], None, None, m[4] or "")
        m = _STUDIO.match(s)
        if m:
            tag, proc = m[3], m[4]
            if tag is None and proc is not None:
                # One column of the two: it is the tag (a process column is only trusted beside
                # a tag column, since a dotted tag looks like a package), unless it is "pid-N".
                tag, proc = (None if proc.startswith("pid-") else proc), None
            if proc is not None and proc.startswith("pid-"):
                proc = None
            return ("studio", _int(m[1]), _int(m[2]), m[5], tag, proc, m[6] or "")
        m = _THREADTIME_NODATE.match(s)
        if m:
            return ("threadtime", int(m[1]), int(m[2]), m[3], m[4], None, m[5])
        return None
    if c == "[":
        m = _LONG.match(s)
        if m:
            return ("long", int(m[1]), _int(m[2]), m[3], m[4], None, "")
        m = _FORWARDED.match(s)
        if m:
            return ("forwarded", None, None, None, m[1], None, m[2])
        return None
    if len(s) > 2 and s[1] == "/":
        m = _BRIEF.match(s)
        if m:
            return ("brief", _int(m[3]), None, m[1], m[2], None, m[4])
    m = _PROCESS_BRIEF.match(s)
    if m:
        return ("studio_legacy", None, None, m[2], m[3], m[1], m[4])
    m = _STUDIO_NOTIME.match(s)
    if m and not s.startswith("at "):
        proc = None if m[2].startswith("pid-") else m[2]
        return ("studio", None, None, m[3], m[1], proc, m[4])
    m = _STUDIO_4X.match(s)
    if m and not s.startswith("at "):
        return ("studio_4x", None, None, m[2], m[1], None, m[3])
    if len(s) > 1 and s[1] == " ":
        m = _LEVEL_TAG.match(s)
        if m:
            return ("level_tag", None, None, m[1], m[2], None, m[3])
    m = _TAG_ONLY.match(s)
    if m:
        return ("tag_only", None, None, None, m[1], None, m[2])
    return None


def _match_long(s: str) -> _Match | None:
    # Prefix regexes run on a bounded head so that a pathological line stays linear.
    r = _match(s[:_HEAD])
    if r is None:
        return None
    return (*r[:6], r[6] + s[_HEAD:])


def parse_lines(text: str) -> ParsedLog:
    """Split ``text`` into lines and parse each one's prefix. Never raises."""
    parsed = ParsedLog([])
    parsed.lines.extend(iter_lines(text, parsed))
    return parsed


def iter_lines(
    text: str,
    stats: ParsedLog | None = None,
    keep: Callable[[re.Match[str]], bool] | None = None,
) -> Iterator[LogLine]:
    """Parse lines one at a time (the analyzer streams them); counts go into ``stats``.

    ``keep(match)``, when given, is asked about each plain threadtime line (groups: pid, tid,
    level, tag, msg): a line it declines is counted but not yielded (the analyzer's fast path
    for uninteresting lines).
    """
    if stats is None:
        stats = ParsedLog([])
    if "\x1b" in text:  # terminal colours (logcat -v color, copied consoles)
        text = _ANSI.sub("", text)
    raw_lines = text.splitlines()
    cur = Cursor(stats, keep)
    fast = _THREADTIME_FAST.match
    i = 0
    n = len(raw_lines)
    try:
        while i < n:
            raw = raw_lines[i]
            idx = i
            i += 1
            # Fast path: plain threadtime, the format the executor itself collects.
            m = fast(raw) if len(raw) <= _HEAD else None
            if m is not None:
                ln = cur.threadtime(idx, raw, m)
                if ln is not None:
                    yield ln
                continue
            ln, joined = cur.other(idx, raw, raw_lines[i] if i < n else None)
            if joined:
                i += 1
            yield ln
    finally:
        cur.finish(n)


class Cursor:
    """What one line's parse depends on from the lines above it, and the counts so far.

    ``iter_lines`` drives it over every line; ``scan`` drives it over the lines its
    whole-buffer pre-filter could not rule out, and tells it about the plain threadtime lines
    in between (``skip``) without building them.
    """

    __slots__ = ("keep", "long_ctx", "prev", "skipped", "stats", "tt_count")

    def __init__(self, stats: ParsedLog, keep: Callable[[re.Match[str]], bool] | None):
        self.stats = stats
        self.keep = keep
        self.prev: LogLine | None = None       # last entry: what unprefixed lines inherit
        # A declined entry (index, raw line or how to read it), parsed only when needed.
        self.skipped: tuple[int, str | Callable[[], str]] | None = None
        self.long_ctx: LogLine | None = None   # the header of an open `-v long` record
        self.tt_count = 0

    def threadtime(self, idx: int, raw: str, m: re.Match[str]) -> LogLine | None:
        """A line ``_THREADTIME_FAST`` matched: built, or None when ``keep`` declines it."""
        self.tt_count += 1
        self.long_ctx = None
        keep = self.keep
        if keep is not None and not keep(m):
            self.prev, self.skipped = None, (idx, raw)
            return None
        ln = LogLine(idx, raw, m[5], int(m[1]), int(m[2]), m[3], m[4], None, "threadtime", True)
        self.prev = ln
        return ln

    def kept(self, idx: int, raw: str) -> None:
        """A plain threadtime line ``keep`` took, handled by the caller without a LogLine
        (one is built from ``raw`` if a line below needs its prefix)."""
        self.tt_count += 1
        self.long_ctx = None
        self.prev, self.skipped = None, (idx, raw)

    def skip(self, count: int, last: int, raw: Callable[[], str]) -> None:
        """``count`` plain threadtime lines that ``keep`` would decline, the last at ``last``."""
        if count:
            self.tt_count += count
            self.long_ctx = None
            self.prev, self.skipped = None, (last, raw)

    def finish(self, total: int) -> None:
        stats = self.stats
        stats.entries += self.tt_count
        if self.tt_count:
            stats.formats["threadtime"] += self.tt_count
        stats.total = total

    def other(self, idx: int, raw: str, nxt: str | Callable[[], str | None] | None
              ) -> tuple[LogLine, bool]:
        """Any other line; ``nxt`` is the next line (or how to read it). Returns the line and
        whether it took the next line too (a console wrap joined back)."""
        stats = self.stats
        formats = stats.formats
        prev = self.prev
        if prev is None and self.skipped is not None:
            # An unprefixed line after a declined one still inherits its prefix.
            sidx, sraw = self.skipped
            if not isinstance(sraw, str):
                sraw = sraw()
            sm = _THREADTIME_FAST.match(sraw)
            if sm is not None:
                prev = LogLine(sidx, sraw, sm[5], int(sm[1]), int(sm[2]), sm[3], sm[4], None,
                               "threadtime", True)
        self.skipped = None
        long_ctx = self.long_ctx
        s = clean(raw.rstrip())
        if not s:
            self.prev = self.long_ctx = None
            return LogLine(idx, raw, "", fmt="blank"), False
        if _SEPARATOR.match(s):
            self.prev = self.long_ctx = None
            return LogLine(idx, raw, s, fmt="separator"), False
        if (long_ctx is not None and s[:1].isdigit() and _DATED.match(s)
                and _match(s[:_HEAD]) is not None):
            # A whole dated log line of another format: a paste that mixes formats (Studio
            # shows a line it could not parse as a -v long record) — the record is over.
            long_ctx = self.long_ctx = None
        if long_ctx is not None and not s.startswith("["):
            # Inside a -v long record every line is message, whatever it looks like.
            self.prev = prev
            return LogLine(idx, raw, raw.rstrip(), long_ctx.pid, long_ctx.tid,
                           long_ctx.level, long_ctx.tag, None, "long", False, True), False
        if prev is not None and prev.fmt == "studio_4x":
            m4 = _LEVEL_ONLY.match(s)
            if m4 and not _STUDIO_4X.match(s):
                # "E  Process: x" repeats only the level: it is not "L Tag: msg".
                stats.entries += 1
                formats["studio_4x"] += 1
                self.prev = prev
                return LogLine(idx, raw, m4[2], None, None, m4[1], prev.tag, None,
                               "studio_4x", True), False
        joined_next = False
        r = _match(s) if len(s) <= _HEAD else _match_long(s)
        if r is None and len(s) < 30 and _DAMAGED.match(s):
            nraw = nxt() if callable(nxt) else nxt
            if nraw is not None:
                # A console hard-wrap that split the prefix ("06-2" / "8 21:39:59.649 …").
                tail = clean(nraw.rstrip()).lstrip()
                for joined in (s + tail, s + " " + tail):   # cut inside a token, or at a space
                    r2 = _match(joined) if len(joined) <= _HEAD else None
                    if r2 is not None:
                        r, s, raw = r2, joined, raw + nraw
                        joined_next = True
                        break
        if r is not None:
            fmt, pid, tid, level, tag, proc, msg = r
            if fmt == "long":
                ln = LogLine(idx, raw, msg, pid, tid, level, tag, None, fmt, True)
                self.long_ctx = ln
            else:
                ln = LogLine(idx, raw, msg, pid, tid, level, tag, proc, fmt, True)
                self.long_ctx = None
            stats.entries += 1
            formats[fmt] += 1
            self.prev = ln
            return ln, joined_next
        bad = bool(_DAMAGED.match(s))
        if bad:
            stats.damaged += 1
            if _ENTRY_START.match(s):
                # The start of an entry whose prefix could not be read (a console wrap cut
                # it): it is nobody's continuation, and what follows it is not the earlier
                # entry's either — another process's line must not become this one's.
                pm = _PARTIAL_PID.match(s)
                ln = LogLine(idx, raw, s, int(pm[1]) if pm else None, fmt="bare",
                             damaged=True)
                self.prev = ln
                return ln, False
        self.prev = prev
        if prev is not None:
            return LogLine(idx, raw, s, prev.pid, prev.tid, prev.level, prev.tag, prev.process,
                           "continuation", False, True, bad), False
        return LogLine(idx, raw, s, fmt="bare", damaged=bad), False
