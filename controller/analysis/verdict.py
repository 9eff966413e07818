"""The verdict of docs/design.md §5 and the one-line summary.

* CONFIRMED  a StrictMode violation, ``blocking_time_ms`` over the threshold (300 ms), or an
  ANR of the app. ``reason_code``: ``strict_mode_violation`` | ``anr`` | ``main_thread_blocked``.
* PARTIAL    no violation and noise floor (16 ms) < ``blocking_time_ms`` ≤ threshold:
  ``blocking_below_threshold``.
* REFUTED    none of the above and the run completed: ``no_evidence``.
* PENDING    no evidence could be collected: ``test_crashed`` (the app or test crashed before any
  timing was taken; summary ``Inconclusive: <exception>``), ``incomplete`` (the caller says the
  run did not finish and nothing was found), ``no_log`` (not one log entry in the input: an
  empty or foreign text refutes nothing), and the executor's own ``skipped``,
  ``compile_failed``, ``no_device``, ``adb_unavailable``, ``bridge_unavailable``, ``device_paused``,
  ``timeout``
  through :func:`pending`.

Summary: ``StrictMode violations: DiskRead, Network | Blocking time: 847ms``; ``none`` when there
are no violations; ``Blocking time: n/a`` when no timing was logged (``blocking_time_ms`` = -1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from controller.analysis.models import Thresholds

__all__ = ["Status", "Verdict", "decide", "pending", "summary_line"]


class Status(StrEnum):
    CONFIRMED = "CONFIRMED"
    PARTIAL = "PARTIAL"
    REFUTED = "REFUTED"
    PENDING = "PENDING"


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    reason_code: str
    summary: str


_UNAVAILABLE = frozenset({"compile_failed", "no_device", "adb_unavailable", "bridge_unavailable",
                          "device_paused", "timeout", "access_revoked"})


def summary_line(kinds: list[str], blocking_time_ms: int) -> str:
    unique = list(dict.fromkeys(kinds))
    v = ", ".join(unique) if unique else "none"
    b = f"{blocking_time_ms}ms" if blocking_time_ms >= 0 else "n/a"
    return f"StrictMode violations: {v} | Blocking time: {b}"


def decide(
    *,
    kinds: list[str],
    blocking_time_ms: int,
    anrs: int,
    crash: str | None = None,
    crashed_before_timing: bool = False,
    completed: bool | None = None,
    empty: bool = False,
    thresholds: Thresholds = Thresholds(),
) -> Verdict:
    """Decide from the app's own evidence. ``crash`` is the first own crash's exception text;
    ``empty`` says the input held no log entry at all (nothing to refute with)."""
    base = summary_line(kinds, blocking_time_ms)
    if kinds:
        return Verdict(Status.CONFIRMED, "strict_mode_violation", base)
    if anrs:
        return Verdict(Status.CONFIRMED, "anr", base)
    if blocking_time_ms > thresholds.blocking_ms:
        return Verdict(Status.CONFIRMED, "main_thread_blocked", base)
    if blocking_time_ms > thresholds.noise_floor_ms:
        return Verdict(Status.PARTIAL, "blocking_below_threshold", base)
    if crash is not None and crashed_before_timing:
        return Verdict(Status.PENDING, "test_crashed", f"Inconclusive: {crash} | {base}")
    if empty:
        return Verdict(Status.PENDING, "no_log", f"Inconclusive: no log entries | {base}")
    if completed is False:
        return Verdict(Status.PENDING, "incomplete", f"Inconclusive: the run did not finish | {base}")
    return Verdict(Status.REFUTED, "no_evidence", base)


def pending(reason_code: str, detail: str = "") -> Verdict:
    """A PENDING verdict for the executor's own failures, with the summary §5 prescribes."""
    if reason_code == "skipped":
        summary = f"Skipped: {detail}" if detail else "Skipped"
    elif reason_code == "test_crashed":
        summary = f"Inconclusive: {detail}" if detail else "Inconclusive"
    elif reason_code in _UNAVAILABLE:
        summary = f"Sandbox unavailable: {reason_code}" + (f" ({detail})" if detail else "")
    else:
        summary = f"Inconclusive: {reason_code}" + (f" ({detail})" if detail else "")
    return Verdict(Status.PENDING, reason_code, summary)
