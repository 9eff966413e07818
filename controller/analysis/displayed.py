"""Activity launch times: ``Displayed pkg/.Act: +1s255ms (total +2m2s134ms)``.

Tag ``ActivityManager`` (≤ 9) or ``ActivityTaskManager`` (10+), with `` for user N`` on
Android 14+. Milliseconds are not zero-padded: ``+5s98ms`` is 5098 ms. ``(total …)`` is the
whole launch sequence, not this activity, so ``ms`` ignores it.
"""

from __future__ import annotations

import re

__all__ = ["parse_displayed", "parse_duration"]

_DUR = r"\+((?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?)"
_DISPLAYED = re.compile(
    rf"Displayed\s+(\S+/\S+?)(?:\s+for user \d+)?:\s+{_DUR}(?:\s+\(total\s+{_DUR}\))?"
)
_SCAN = 1000   # a Displayed line is short: never run the pattern over a pathological one
_PARTS = re.compile(r"(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$")


def parse_duration(text: str) -> int | None:
    """``1s255ms`` → 1255, ``2m2s134ms`` → 122134, ``5s98ms`` → 5098."""
    m = _PARTS.match(text.lstrip("+"))
    if not m or not any(m.groups()):
        return None
    minutes, seconds, millis = (int(g) if g else 0 for g in m.groups())
    return (minutes * 60 + seconds) * 1000 + millis


def parse_displayed(msg: str) -> tuple[str, int, int | None] | None:
    m = _DISPLAYED.match(msg.lstrip()[:_SCAN])
    if not m:
        return None
    ms = parse_duration(m[2])
    if ms is None:
        return None
    total = parse_duration(m[3]) if m[3] else None
    return m[1], ms, total
