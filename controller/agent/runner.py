"""nl2sh: run a natural-language instruction on a device as a checked, traced plan.

:meth:`AgentRunner.act`:

1. observe — ``device.state`` and ``ui.dump``;
2. plan — the planner (rules or LLM); a refusal ends here, recorded;
3. check — the whole plan goes to the bridge's dry run ``agent.check`` (the owner's policy:
   allow-list, package scope, bounds it can know); one refused step refuses the plan, and
   **nothing** has been sent to the device;
4. run — step by step: pre-check, the RPC (with retries), the expected state; each command
   with its duration, exit code, truncated output and evidence frames, each check with its
   outcome, in the trace's step log;
5. on failure, the A2A summary (current page, logcat issues, ANRs, crashes) goes back to the
   planner for **one** corrected plan (checked and run the same way); then it stops.

The device is reached through a :data:`Caller` — ``(method, params) → result`` — that the
REST layer binds to ``Hub.device_call`` (authorization and audit included).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.agent.plan import Check, Plan, PlanError, PlanStep, step_call
from controller.agent.planners import Planner
from controller.agent.traces import Trace
from protocol.agent_methods import AGENT_CHECK, DEVICE_STATE, UI_DUMP
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_DUMP, Method

__all__ = ["AgentRunner", "Caller", "RunnerSettings", "evaluate", "failure_summary"]

Caller = Callable[[Method[Any, Any], dict[str, Any]], Awaitable[dict[str, Any]]]

MAX_OUTPUT = 1000


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    settled: bool = True  # ask every action for its settled frame too
    logcat_lines: int = 300  # read for the A2A summary


def _elements(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in result.get("elements", [])]


def _find(elements: Sequence[Mapping[str, Any]], name: str) -> tuple[str, dict[str, Any]] | None:
    """(selector kind, element) for ``name``: text, then description, then resource id."""
    wanted = name.casefold()
    for key in ("text", "desc", "resource_id"):
        for exact in (True, False):
            for e in sorted(elements, key=lambda e: not e.get("actionable")):
                value = str(e.get(key, ""))
                if key == "resource_id":
                    value = value.split(":id/", 1)[-1]
                value = value.casefold()
                if value and (value == wanted if exact else wanted in value):
                    return key, dict(e)
    return None


def evaluate(
    check: Check, state: Mapping[str, Any], elements: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What in ``check`` does not hold (empty: it all holds)."""
    failures = []
    if check.package is not None and state.get("package") != check.package:
        failures.append(f"package is {state.get('package')!r}, not {check.package!r}")
    if check.activity is not None:
        full, short = state.get("activity") or "", state.get("activity_short") or ""
        wanted = check.activity
        if wanted not in (full, short) and not full.endswith(wanted.lstrip(".")):
            failures.append(f"page is {short or full!r}, not {wanted!r}")
    if check.keyboard is not None and bool(state.get("keyboard")) != check.keyboard:
        failures.append(f"keyboard is {'shown' if state.get('keyboard') else 'hidden'}")
    if check.text is not None:
        wanted = check.text.casefold()
        if not any(
            wanted in str(e.get("text", "")).casefold()
            or wanted in str(e.get("desc", "")).casefold()
            for e in elements
        ):
            failures.append(f"no element shows {check.text!r}")
    if check.checked is not None:
        found = _find(elements, check.checked)
        if found is None:
            failures.append(f"no element {check.checked!r}")
        elif not found[1].get("checked"):
            failures.append(f"{check.checked!r} is not checked")
    return failures


async def failure_summary(call: Caller, what: str, *, lines: int = 300) -> str:
    """The A2A summary: current page, what failed, logcat issues, ANRs and crashes."""
    parts = [f"Failed: {what}"]
    try:
        state = await call(DEVICE_STATE, {})
        parts.insert(0, str(state.get("text", "")))
    except RpcError as exc:
        parts.append(f"device state unavailable: {exc.message}")
    try:
        log = await call(LOGCAT_DUMP, {"lines": lines})
        from controller.analysis import analyze

        result = analyze("\n".join(log.get("lines", [])))
        data = result.to_json()
        issues = [str(i.get("title")) for i in data.get("issues", [])][:5]
        anrs = [str(a.get("package") or a.get("reason")) for a in data.get("anrs", [])][:3]
        crashes = [str(c.get("exception")) for c in data.get("crashes", [])][:3]
        parts.append(f"Logcat issues: {'; '.join(issues) or 'none'}")
        parts.append(f"ANRs: {', '.join(anrs) or 'none'}; crashes: {', '.join(crashes) or 'none'}")
    except RpcError as exc:
        parts.append(f"logcat unavailable: {exc.message}")
    return "\n".join(parts)


class AgentRunner:
    def __init__(self, planner: Planner, *, settings: RunnerSettings | None = None) -> None:
        self.planner = planner
        self.settings = settings or RunnerSettings()

    async def act(self, call: Caller, instruction: str, trace: Trace) -> dict[str, Any]:
        """Run ``instruction``; the answer is ``{"trace_id", "ok", "steps", …}``."""
        state, elements = await self._observe(call, trace)
        try:
            plan = await self.planner.plan(instruction, state, elements)
        except PlanError as exc:
            await trace.record("plan", "refused", reason=exc.reason, message=exc.message)
            return await self._done(trace, ok=False, message=exc.message, reason=exc.reason)
        for round_ in (1, 2):
            await trace.record(
                "plan",
                "ok",
                round=round_,
                source=plan.source,
                plan=plan.model_dump(exclude_none=True),
            )
            refusal = await self._check(call, plan, trace)
            if refusal is not None:
                return await self._done(trace, ok=False, message=refusal, reason="refused")
            failed = await self._run(call, plan, trace)
            if failed is None:
                return await self._done(trace, ok=True, message="done", rounds=round_)
            if round_ == 2 or not self.planner.corrects:
                return await self._done(trace, ok=False, message=failed, reason="failed")
            feedback = await failure_summary(call, failed, lines=self.settings.logcat_lines)
            await trace.record("summary", "ok", text=feedback)
            state, elements = await self._observe(call, trace)
            try:
                plan = await self.planner.plan(instruction, state, elements, feedback=feedback)
            except PlanError as exc:
                await trace.record(
                    "plan", "failed", round=2, reason=exc.reason, message=exc.message
                )
                return await self._done(trace, ok=False, message=failed, reason="failed")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _done(self, trace: Trace, *, ok: bool, message: str, **extra: Any) -> dict[str, Any]:
        await trace.finish(ok=ok, summary=message, **extra)
        return {
            "trace_id": trace.id,
            "ok": ok,
            "message": message,
            **extra,
            "steps": trace.steps_json(),
        }

    async def _observe(
        self, call: Caller, trace: Trace
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        state = await call(DEVICE_STATE, {})
        elements = _elements(await call(UI_DUMP, {}))
        await trace.record("observe", "ok", state=state.get("text"), elements=len(elements))
        return state, elements

    async def _check(self, call: Caller, plan: Plan, trace: Trace) -> str | None:
        """The bridge's dry run over every step; the refusal message, or None."""
        steps = []
        for step in plan.steps:
            method, params = step_call(step, settled=False)
            steps.append({"method": method.name, "params": params})
        out = await call(AGENT_CHECK, {"steps": steps})
        results = list(out.get("results", []))
        refused = [(i, r) for i, r in enumerate(results) if not r.get("ok")]
        if not refused:
            await trace.record("check", "ok", steps=len(steps))
            return None
        for i, r in refused:
            await trace.record(
                "check",
                "refused",
                step=i,
                action=plan.steps[i].action,
                method=steps[i]["method"],
                params=steps[i]["params"],
                code=r.get("code"),
                rule=r.get("rule"),
                message=r.get("message"),
            )
        i, first = refused[0]
        return (
            f"step {i + 1} ({plan.steps[i].action}) refused by the device's policy: "
            f"{first.get('message')} (rule {first.get('rule')}); nothing was sent"
        )

    async def _run(self, call: Caller, plan: Plan, trace: Trace) -> str | None:
        """Run the steps; the first failure's description, or None when all succeeded."""
        for i, step in enumerate(plan.steps):
            failed = await self._step(call, i, step, trace)
            if failed is not None:
                return f"step {i + 1} ({step.action} {step.target or ''}): {failed}".strip()
        return None

    async def _step(self, call: Caller, i: int, step: PlanStep, trace: Trace) -> str | None:
        elements: list[dict[str, Any]] | None = None
        if step.pre_check is not None:
            state = await call(DEVICE_STATE, {})
            elements = _elements(await call(UI_DUMP, {})) if step.pre_check.needs_ui else []
            failures = evaluate(step.pre_check, state, elements)
            await trace.record(
                "pre_check",
                "failed" if failures else "ok",
                step=i,
                check=step.pre_check.model_dump(exclude_none=True),
                failures=failures,
            )
            if failures:
                return "pre-check failed: " + "; ".join(failures)
        method, params = step_call(step, settled=self.settings.settled)
        if step.action == "tap" and step.target is not None and step.index is None:
            elements = _elements(await call(UI_DUMP, {}))
            found = _find(elements, step.target)
            if found is not None:
                key, element = found
                params.pop("text", None)
                params[key] = element.get(key) or step.target
                if step.state is not None and bool(element.get("checked")) == (step.state == "on"):
                    await trace.record(
                        "command",
                        "skipped",
                        step=i,
                        method=method.name,
                        reason=f"{step.target!r} is already {step.state}",
                    )
                    return None
        failure: str | None = "not run"
        for attempt in range(step.retries + 1):
            failure = await self._send(call, i, attempt, step, method, params, trace)
            if failure is None or failure.startswith("refused"):
                break
        return failure

    async def _send(
        self,
        call: Caller,
        i: int,
        attempt: int,
        step: PlanStep,
        method: Method[Any, Any],
        params: dict[str, Any],
        trace: Trace,
    ) -> str | None:
        started = time.monotonic()
        try:
            result = dict(await call(method, params))
        except RpcError as exc:
            duration_ms = int((time.monotonic() - started) * 1000)
            status = "refused" if exc.code is ErrorCode.FORBIDDEN else "failed"
            await trace.record(
                "command",
                status,
                step=i,
                attempt=attempt,
                method=method.name,
                params=params,
                duration_ms=duration_ms,
                code=exc.code.value,
                message=exc.message,
                rule=(exc.data or {}).get("rule"),
            )
            return f"{status}: {exc.message}"
        duration_ms = int((time.monotonic() - started) * 1000)
        # Frames are named after the step about to be written (seq = steps so far).
        frames = await trace.keep_frames(len(trace.steps), result)
        exit_code = int(result.get("exit_code", 0))
        output = str(result.get("output") or (result.get("stdout", "") + result.get("stderr", "")))
        ok = bool(result.get("ok", exit_code == 0))
        await trace.record(
            "command",
            "ok" if ok else "failed",
            step=i,
            attempt=attempt,
            method=method.name,
            params=params,
            command=result.get("command"),
            exit_code=exit_code,
            duration_ms=duration_ms,
            output=output[:MAX_OUTPUT],
            settled=result.get("settled"),
            **frames,
        )
        if not ok:
            return f"exit code {exit_code}: {output[:200]}"
        if step.expect is None:
            return None
        state = result.get("state") or await call(DEVICE_STATE, {})
        elements = _elements(await call(UI_DUMP, {})) if step.expect.needs_ui else []
        failures = evaluate(step.expect, state, elements)
        await trace.record(
            "expect",
            "failed" if failures else "ok",
            step=i,
            attempt=attempt,
            check=step.expect.model_dump(exclude_none=True),
            failures=failures,
            page=state.get("activity_short"),
        )
        return ("expected state not reached: " + "; ".join(failures)) if failures else None
