"""The result of a sandbox run: the five base fields exactly, plus droidwire's (docs/design.md §5).

Base: ``strict_mode_violations``, ``has_violations``, ``blocking_time_ms`` (-1: no timing),
``systrace`` (the first 2000 characters of the logcat), ``summary``. Ours:
``verification_status``, ``reason_code``, ``violation_kinds``, ``run_id``, ``device``, ``toolchain``,
``builder``, ``compile_rounds``, ``tests``, ``anrs``, ``crashes``, ``issues``, ``timings`` (phases in ms),
and ``violations`` / ``measurements`` (the analysis' details).
"""

from __future__ import annotations

from typing import Any

from controller.analysis import AnalysisResult, InstrumentationResult, pending
from controller.executor.gateway import DeviceView

__all__ = ["REASON_CODES", "SYSTRACE_CHARS", "analysed_result", "base_result", "pending_result"]

SYSTRACE_CHARS = 2000  # ``systrace``: the first 2000 characters of the logcat
#: PENDING's reason codes (docs/design.md §5); ``internal`` only for a controller bug.
REASON_CODES = frozenset(
    {"skipped", "compile_failed", "no_device", "adb_unavailable", "bridge_unavailable",
     "device_paused", "timeout", "test_crashed", "access_revoked"}
)


def base_result(run_id: str, device: DeviceView | None) -> dict[str, Any]:
    """Every field, empty: what a run that collected nothing reports."""
    return {
        "strict_mode_violations": [],
        "violation_kinds": [],
        "has_violations": False,
        "blocking_time_ms": -1,
        "systrace": "",
        "summary": "",
        "verification_status": "PENDING",
        "reason_code": "",
        "run_id": run_id,
        "device": device.describe() if device is not None else None,
        "toolchain": None,
        "builder": None,  # {"id", "name", "shared"} of the bridge that built the APKs
        "compile_rounds": [],
        "tests": [],
        "anrs": [],
        "crashes": [],
        "issues": [],
        "timings": {},
    }


def pending_result(
    run_id: str, device: DeviceView | None, reason_code: str, detail: str
) -> dict[str, Any]:
    verdict = pending(reason_code, detail)
    result = base_result(run_id, device)
    result.update(
        verification_status=verdict.status.value,
        reason_code=verdict.reason_code,
        summary=verdict.summary,
    )
    return result


def analysed_result(
    run_id: str,
    device: DeviceView,
    analysis: AnalysisResult,
    logcat: str,
    parsed: InstrumentationResult | None,
    abort: tuple[str, str] | None,
) -> dict[str, Any]:
    body = analysis.to_json()
    result = base_result(run_id, device)
    result.update(
        strict_mode_violations=analysis.strict_mode_violations,
        violation_kinds=analysis.violation_kinds,
        has_violations=analysis.has_violations,
        blocking_time_ms=analysis.blocking_time_ms,
        systrace=logcat[:SYSTRACE_CHARS],
        summary=analysis.summary,
        verification_status=analysis.verification_status,
        reason_code=analysis.reason_code,
        violations=body["violations"],
        anrs=body["anrs"],
        crashes=body["crashes"],
        issues=body["issues"],
        measurements=body["timings"],
    )
    override = _why_no_verdict(analysis, parsed, abort)
    if override is not None:
        verdict = pending(*override)
        result.update(
            verification_status=verdict.status.value,
            reason_code=verdict.reason_code,
            summary=f"{verdict.summary} | {analysis.summary}",
        )
    return result


def _why_no_verdict(
    analysis: AnalysisResult, parsed: InstrumentationResult | None, abort: tuple[str, str] | None
) -> tuple[str, str] | None:
    """When the log holds no evidence and the run cannot vouch for a REFUTED — it did not run
    to completion, or ran nothing — the PENDING reason (§5's codes only), else None.

    Evidence (a violation, blocking, an ANR) always stands, however the run ended.
    """
    status, reason = analysis.verification_status, analysis.reason_code
    if status == "PENDING" and reason in REASON_CODES:
        return None  # the analysis' own test_crashed, with the exception in its summary
    if status not in ("PENDING", "REFUTED"):
        return None
    if abort is not None:
        return abort
    if status == "PENDING" and reason == "no_log":
        return "adb_unavailable", "the device's logcat was empty"
    if parsed is None:
        return "test_crashed", "the instrumentation printed nothing"
    if parsed.run_status != "ok":
        return "test_crashed", parsed.message or f"the instrumentation {parsed.run_status}"
    if not parsed.tests:
        return "test_crashed", "no test ran"
    if status == "PENDING":
        return "test_crashed", parsed.message or "the instrumentation did not finish"
    return None

