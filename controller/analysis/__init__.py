"""Logcat and instrumentation analysis: raw device output in, evidence and a verdict out.

Pure functions, no I/O (the CLI and the executor read the bytes). Entry points:

* :func:`analyze` — a log (any logcat or Android Studio rendering, pasted or dumped) →
  :class:`AnalysisResult`, whose ``to_json()`` is the ``logcat analyze --json`` shape.
* :func:`parse_instrumentation` — ``am instrument -r`` output → :class:`InstrumentationResult`
  (``instrumentation parse --json``).
* :func:`decide` / :func:`pending` / :func:`summary_line` — the verdict rules of docs/design.md §5.
* :func:`decode` — log file bytes to text (UTF-8, or the UTF-16 Windows shells write).

The sandbox executor's call::

    inst = parse_instrumentation(am_instrument_output)
    result = analyze(logcat_text, package=app_package, pids=known_pids, instrumentation=inst)
    result.to_json()   # violations, blocking_time_ms, tests, anrs, crashes, issues, summary,
                       # verification_status, reason_code, …

Decisions where the spec was silent: the summary reads ``Blocking time: n/a`` when no
``DroidUnblocker`` reading was logged; ``reason_code`` values are listed in ``verdict``; a
``DroidUnblocker`` reading from an unknown pid counts (it is our own helper), one from a pid
known to be another app's does not.
"""

from controller.analysis.analyzer import AnalysisResult, analyze
from controller.analysis.instrumentation import (
    InstrumentationResult,
    TestResult,
    parse_instrumentation,
)
from controller.analysis.lines import decode
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
from controller.analysis.verdict import Status, Verdict, decide, pending, summary_line

__all__ = [
    "AnalysisResult",
    "Anr",
    "Crash",
    "Death",
    "Displayed",
    "InstrumentationResult",
    "Issue",
    "Status",
    "TestResult",
    "TestTiming",
    "Thresholds",
    "Timing",
    "Verdict",
    "Violation",
    "analyze",
    "decide",
    "decode",
    "parse_instrumentation",
    "pending",
    "summary_line",
]
