"""Per-test logcat slices: the run's log cut at AndroidJUnitRunner's own markers.

``androidx.test.runner`` logs, under tag ``TestRunner``, ``started: method(pkg.Class)`` when a
test begins and ``finished: method(pkg.Class)`` when it ends (``failed: …`` in between for a
failure). Every line from a test's ``started`` to its ``finished`` — whatever its tag or
process, so the app's StrictMode lines land with the test that caused them — is that test's
slice. A test run again (a retry) adds its second window to the same slice. A test that
started and never finished (a crash, a lost device) keeps everything up to the log's end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_SLICE_LINES", "TestKey", "slice_by_test"]

MAX_SLICE_LINES = 400  # per test; the head is kept (the evidence comes early) and the cut said
_MARKER = re.compile(r"\bTestRunner\s*:\s+(started|finished): (\S+)\(([^()\s]+)\)\s*$")

TestKey = tuple[str, str]  # (class, method)


def slice_by_test(lines: Iterable[str], *, max_lines: int = MAX_SLICE_LINES) -> dict[TestKey, str]:
    """Each test's lines, keyed by ``(class, method)``, joined with newlines."""
    slices: dict[TestKey, list[str]] = {}
    dropped: dict[TestKey, int] = {}
    current: TestKey | None = None
    for line in lines:
        match = _MARKER.search(line)
        if match is not None and match.group(1) == "started":
            current = (match.group(3), match.group(2))
        if current is not None:
            kept = slices.setdefault(current, [])
            if len(kept) < max_lines:
                kept.append(line)
            else:
                dropped[current] = dropped.get(current, 0) + 1
        if match is not None and match.group(1) == "finished":
            current = None
    out = {}
    for key, kept in slices.items():
        if key in dropped:
            kept = [*kept, f"… {dropped[key]} more lines"]
        out[key] = "\n".join(kept)
    return out
