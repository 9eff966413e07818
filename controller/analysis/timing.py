"""Timing from the workspace's ``DroidUnblocker`` helper and test delimiters from TestRunner.

``DroidUnblocker: elapsed=847ms`` (also ``elapsed=847 ms``, fractions rounded; an optional
``test=Class#method`` token names the test). AndroidJUnitRunner's
log listener writes ``TestRunner: started: name(class)``, ``finished:``, ``failed:``,
``ignored:``, ``assumption failed:``; a reading between ``started`` and ``finished`` of the same
process belongs to that test.
"""

from __future__ import annotations

import re

__all__ = ["parse_elapsed", "parse_test_event"]

_ELAPSED = re.compile(r"elapsed\s*[=:]\s*(\d+(?:\.\d+)?)\s*ms\b")
_TEST = re.compile(r"\btest=(\S+)")
_EVENT = re.compile(r"\s*(started|finished|failed|ignored|assumption failed):\s*(.+?)\((.+)\)\s*$")


def parse_elapsed(msg: str, tag: str | None) -> tuple[int, str | None] | None:
    """``(ms, test)``; ``test`` when the line names it (``test=Class#method``)."""
    if tag != "DroidUnblocker" and "DroidUnblocker" not in msg:
        return None
    m = _ELAPSED.search(msg)
    if not m:
        return None
    t = _TEST.search(msg)
    return int(float(m[1]) + 0.5), (t[1] if t else None)


def parse_test_event(msg: str) -> tuple[str, str, str] | None:
    """``(event, class, name)`` for a TestRunner line."""
    m = _EVENT.match(msg[:2000])
    if not m:
        return None
    return m[1], m[3].strip(), m[2].strip()
