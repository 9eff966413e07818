"""The result of a sandbox run: the seed's fields exactly, plus droidwire's (DESIGN.md §5).

Seed: ``strict_mode_violations``, ``has_violations``, ``blocking_time_ms`` (-1: no timing),
``systrace`` (the first 2000 characters of the logcat), ``summary``. Ours:
``verification_status``, ``reason_code``, ``run_id``, ``device``, ``toolchain``,
``compile_rounds``, ``tests``, ``anrs``, ``crashes``, ``issues``, ``timings`` (phases in ms),
and ``violations`` / ``measurements`` (the analysis' details).
"""

from __future__ import annotations

from typing import Any

from controller.analysis import AnalysisResult, InstrumentationResult, pending
from controller.executor.gateway import DeviceView

__all__ = ["SYSTRACE_CHARS", "analysed_result", "base_result", "pending_result"]

SYSTRACE_CHARS = 2000  # the seed's ``systrace``: the first 2000 characters of the logcat


def base_result(run_id: str, device: DeviceView | None) -> dict[str, Any]:
    """Every field, empty: what a run that collected nothing reports."""
    return {
        "strict_mode_violations": [],
        "has_violations": False,
        "blocking_time_ms": -1,
        "systrace": "",
        "summary": "",
        "verification_status": "PENDING",
        "reason_code": "",
        "run_id": run_id,
        "device": device.describe() if device is not None else None,
        "toolchain": None,
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
    status = analysis.verification_status
    if status == "PENDING" and analysis.reason_code == "incomplete":
        # No evidence and the run did not finish: say why it did not.
        if abort is not None:
            verdict = pending(*abort)
        else:
            message = (parsed.message if parsed else None) or "the instrumentation did not finish"
            verdict = pending("test_crashed", message)
        result.update(
            verification_status=verdict.status.value,
            reason_code=verdict.reason_code,
            summary=f"{verdict.summary} | {analysis.summary}",
        )
    elif status == "REFUTED" and abort is not None:
        verdict = pending(*abort)
        result.update(
            verification_status=verdict.status.value,
            reason_code=verdict.reason_code,
            summary=f"{verdict.summary} | {analysis.summary}",
        )
    elif status == "REFUTED" and parsed is not None and parsed.run_status not in ("ok",):
        verdict = pending("test_crashed", parsed.message or f"run {parsed.run_status}")
        result.update(
            verification_status=verdict.status.value,
            reason_code=verdict.reason_code,
            summary=f"{verdict.summary} | {analysis.summary}",
        )
    return result
