"""Logcat and instrumentation analysis: raw device output in, evidence and a verdict out.

Pure functions, no I/O (the CLI and the executor read the bytes). Entry points:

* :func:`analyze` — a log (any logcat or Android Studio rendering, pasted or dumped) →
  :class:`AnalysisResult`, whose ``to_json()`` is the ``logcat analyze --json`` shape.
* :func:`parse_instrumentation` — ``am instrument -r`` output → :class:`InstrumentationResult`
  (``instrumentation parse --json``).
* :func:`decide` / :func:`pending` / :func:`seed_summary` — the verdict rules of DESIGN.md §5.
"""

from controller.analysis.analyzer import AnalysisResult, analyze
from controller.analysis.instrumentation import (
    InstrumentationResult,
    TestResult,
    parse_instrumentation,
)
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
from controller.analysis.verdict import Status, Verdict, decide, pending, seed_summary

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
    "parse_instrumentation",
    "pending",
    "seed_summary",
]
