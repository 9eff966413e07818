"""Java/Kotlin stack traces as they appear in logs: frames, causes, and the app frame.

A frame is written ``pkg.Class.method(File.kt:12)`` (without ``at ``). Method names may hold
``-``/``--`` (Compose), ``<init>``/``<clinit>``, ``$``; the location may be ``Native Method``,
``Unknown Source:6``, ``PG:1``, ``D8$$SyntheticClass:0`` or a file with no line number.
The app frame rule is docs/design.md §9: the first frame whose class is outside the platform and
language runtimes; with a package, the first frame in that package if there is one.
"""

from __future__ import annotations

import re

__all__ = [
    "PLATFORM_PREFIXES",
    "app_frame",
    "frame_of",
    "is_platform",
    "split_exception",
    "stack_kind",
    "stack_line",
]

PLATFORM_PREFIXES: tuple[str, ...] = (
    "android.", "androidx.", "com.android.", "dalvik.", "java.", "javax.", "jdk.", "kotlin.",
    "kotlinx.", "libcore.", "sun.", "org.apache.harmony.", "org.json.", "org.xmlpull.", "j$.",
)

_FRAME = re.compile(r"at\s+([^\s(]+)\(([^()]*)\)")
_MORE = re.compile(r"\.\.\.(?:\s+\d+\s+more)?\s*$")
# "pkg.Class: message" or "pkg.Class" — the toString() of a Throwable.
_EXCEPTION = re.compile(r"([A-Za-z_$][\w$]*(?:\.[\w$]+)+|[A-Z][\w$]*(?:Exception|Error|Throwable))(?::\s?(.*))?$")
# An exception named inside a message, after ": " (one-line nested chains).
_NESTED = re.compile(r":\s((?:[a-z_][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)\b(?::\s?.*)?)$")


def _lead(msg: str) -> str:
    return msg.lstrip(" \t,")


def stack_kind(msg: str) -> str | None:
    """Classify a stack-trace line: frame, partial_frame, cause, suppressed, more, binder."""
    return stack_line(msg)[0]


def stack_line(msg: str) -> tuple[str | None, str | None]:
    """``stack_kind(msg)`` and, for a frame, ``frame_of(msg)`` — one match for both."""
    s = _lead(msg)
    if s.startswith("at "):
        m = _FRAME.match(s)
        return ("frame", f"{m[1]}({m[2]})") if m else ("partial_frame", None)
    return _other_kind(s), None


def _other_kind(s: str) -> str | None:
    if s.startswith("Caused by:"):
        return "cause"
    if s.startswith("Suppressed:"):
        return "suppressed"
    if s.startswith("...") and _MORE.match(s):
        return "more"
    if s.startswith("# via Binder call") or s.startswith("android.os.StrictMode$LogStackTrace"):
        return "binder"
    return None


def frame_of(msg: str) -> str | None:
    """The frame in a stack line, as ``pkg.Class.method(File.kt:12)``; None if not a frame."""
    m = _FRAME.match(_lead(msg))
    return f"{m[1]}({m[2]})" if m else None


def is_platform(frame: str) -> bool:
    return frame.startswith(PLATFORM_PREFIXES)


def app_frame(frames: list[str], package: str | None = None) -> str | None:
    if package:
        prefix = package + "."
        for f in frames:
            if f.startswith(prefix):
                return f
    for f in frames:
        if not f.startswith(PLATFORM_PREFIXES):
            return f
    return None


def split_exception(line: str) -> tuple[str, str | None, str | None]:
    """Split a Throwable line into (class, message, nested cause named in the message)."""
    s = line.strip()
    m = _EXCEPTION.match(s)
    if not m:
        return s, None, None
    message = m[2] if m[2] else None
    nested = None
    if message:
        n = _NESTED.search(message[:2000])
        if n:
            nested = n[1]
    return m[1], message, nested
