"""The result of a sandbox run: the five base fields exactly, plus droidwire's (docs/design.md §5).

Base: ``strict_mode_violations``, ``has_violations``, ``blocking_time_ms`` (-1: no timing),
``systrace`` (the first 2000 characters of the logcat), ``summary``. Ours:
``verification_status``, ``reason_code``, ``violation_kinds``, ``run_id``, ``device``, ``toolchain``,
``builder``, ``compile_rounds``, ``tests``, ``anrs``, ``crashes``, ``issues``, ``timings`` (phases in ms),
and, once set, ``violations`` / ``measurements`` (the analysis' details), ``compile_output``,
``test_class``, ``package``, ``run_status``, ``resumed``, ``shards`` and ``unit_ms``: :class:`RunResult`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from controller.analysis import AnalysisResult, InstrumentationResult, pending
from controller.executor.gateway import DeviceView

__all__ = [
    "REASON_CODES",
    "SYSTRACE_CHARS",
    "RunResult",
    "analysed_result",
    "base_result",
    "pending_result",
]

SYSTRACE_CHARS = 2000  # ``systrace``: the first 2000 characters of the logcat
#: PENDING's reason codes (docs/design.md §5); ``internal`` only for a controller bug.
REASON_CODES = frozenset(
    {"skipped", "compile_failed", "no_device", "adb_unavailable", "bridge_unavailable",
     "device_paused", "timeout", "test_crashed", "access_revoked"}
)


class RunResult(BaseModel):
    """One run's result, as the executor returns it, the store keeps it and the REST API and
    MCP answer it (:meth:`to_json`). The fields come in this order; those after ``timings``
    are in the JSON only once set (``test_class`` and ``package`` may be set to null)."""

    model_config = ConfigDict(extra="forbid")

    strict_mode_violations: list[str] = []
    violation_kinds: list[str] = []
    has_violations: bool = False
    blocking_time_ms: int = -1
    systrace: str = ""
    summary: str = ""
    verification_status: str = "PENDING"
    reason_code: str = ""
    run_id: str
    device: dict[str, Any] | None = None  # DeviceView.describe(); {"id"} alone after recovery
    toolchain: str | None = None
    builder: dict[str, Any] | None = None  # {"id", "name", "shared"} of the bridge that built
    compile_rounds: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    anrs: list[dict[str, Any]] = []
    crashes: list[dict[str, Any]] = []
    issues: list[dict[str, Any]] = []
    timings: dict[str, int] = {}
    # Present once set:
    violations: list[dict[str, Any]] | None = None  # the analysis' details
    measurements: list[dict[str, Any]] | None = None
    compile_output: str | None = None  # a failed compile's last output
    test_class: str | None = None
    package: str | None = None  # the app under test
    run_status: str | None = None  # how the instrumentation ended
    resumed: bool | None = None  # finished by a controller that took the run over
    shards: list[dict[str, Any]] | None = None  # a sharded run's merge: each shard's detail
    unit_ms: dict[str, float] | None = None  # … and each unit's share of its shard's run_ms

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k not in _WHEN_SET or k in self.model_fields_set}

    def to_json(self) -> dict[str, Any]:
        """The result as JSON: what the store keeps and the REST API and MCP answer."""
        return self.model_dump(mode="json")

    @property
    def device_id(self) -> str | None:
        """The id of the run's device, if it had one."""
        device_id = (self.device or {}).get("id")
        return device_id if isinstance(device_id, str) else None


_WHEN_SET = frozenset(
    ("violations", "measurements", "compile_output", "test_class", "package", "run_status",
     "resumed", "shards", "unit_ms")
)


def base_result(run_id: str, device: DeviceView | None) -> RunResult:
    """Every field, empty: what a run that collected nothing reports."""
    return RunResult(run_id=run_id, device=device.describe() if device is not None else None)


def pending_result(
    run_id: str, device: DeviceView | None, reason_code: str, detail: str
) -> RunResult:
    verdict = pending(reason_code, detail)
    result = base_result(run_id, device)
    result.verification_status = verdict.status.value
    result.reason_code = verdict.reason_code
    result.summary = verdict.summary
    return result


def analysed_result(
    run_id: str,
    device: DeviceView,
    analysis: AnalysisResult,
    logcat: str,
    parsed: InstrumentationResult | None,
    abort: tuple[str, str] | None,
) -> RunResult:
    body = analysis.to_json()
    result = RunResult(
        strict_mode_violations=analysis.strict_mode_violations,
        violation_kinds=analysis.violation_kinds,
        has_violations=analysis.has_violations,
        blocking_time_ms=analysis.blocking_time_ms,
        systrace=logcat[:SYSTRACE_CHARS],
        summary=analysis.summary,
        verification_status=analysis.verification_status,
        reason_code=analysis.reason_code,
        run_id=run_id,
        device=device.describe(),
        anrs=body["anrs"],
        crashes=body["crashes"],
        issues=body["issues"],
        violations=body["violations"],
        measurements=body["timings"],
    )
    override = _why_no_verdict(analysis, parsed, abort)
    if override is not None:
        verdict = pending(*override)
        result.verification_status = verdict.status.value
        result.reason_code = verdict.reason_code
        result.summary = f"{verdict.summary} | {analysis.summary}"
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

