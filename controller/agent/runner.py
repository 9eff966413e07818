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

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.agent.plan import AGENT_TOOLS, Check, Plan, PlanError, PlanStep, step_call
from controller.agent.planners import Planner, RulePlanner
from controller.agent.traces import FRAME_KEYS, Trace
from controller.agent.verifier import UNVERIFIED, Verdict, Verifier
from protocol.agent_methods import AGENT_CHECK, APP_STOP, DEVICE_STATE, UI_DUMP, UI_SCREENSHOT
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_DUMP, Method

__all__ = ["AgentRunner", "Caller", "RunnerSettings", "evaluate", "failure_summary", "loading"]

Caller = Callable[[Method[Any, Any], dict[str, Any]], Awaitable[dict[str, Any]]]

log = logging.getLogger("droidwire.controller.agent")

MAX_OUTPUT = 1000
MAX_FACTS = 32  # remembered facts per call, each at most MAX_FACT characters
MAX_FACT = 300


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    settled: bool = True  # ask every action for its settled frame too
    logcat_lines: int = 300  # read for the A2A summary
    # Plans per instruction: the first, one correction after a failure, and more after a
    # rejected mark_done or a requested screenshot.
    max_rounds: int = 4
    # Opt-in per call: an ANR of the app in front during a step force-stops it (am force-stop)
    # and captures the screen and the ANR's log lines into the trace.
    anr_recovery: bool = False


STUCK_FRAMES = 3  # observations of one page with a progress indicator: stuck loading
_PROGRESS = ("progressbar", "progressindicator", "spinner")


def loading(elements: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the UI tree shows a progress indicator (a ProgressBar, a Material progress
    indicator, or an element whose id says progress/loading)."""
    for e in elements:
        kind = str(e.get("class_name") or e.get("class") or "").lower()
        rid = str(e.get("resource_id") or "").lower().split(":id/")[-1]
        if any(p in kind for p in _PROGRESS) or "progress" in rid or "loading" in rid:
            return True
    return False


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


@dataclass(slots=True)
class _Round:
    """How one plan's run ended: ``failed`` (what failed), or ``verdict`` (it said
    ``mark_done``), or ``screenshot`` (it asked to see the screen), or none (all steps ran)."""

    failed: str | None = None
    verdict: Verdict | None = None
    summary: str = ""
    screenshot: bytes | None = None


class AgentRunner:
    """Runs instructions. ``verifier`` judges ``mark_done`` (default: none configured, so a
    claim of success is reported unverified); ``fallback`` plans when the model's reply is not
    a valid plan (default: the rule templates, when ``planner`` is not already them)."""

    def __init__(
        self,
        planner: Planner,
        *,
        settings: RunnerSettings | None = None,
        verifier: Verifier | None = None,
        fallback: Planner | None = None,
    ) -> None:
        self.planner = planner
        self.settings = settings or RunnerSettings()
        self.verifier = verifier or Verifier(None)
        if fallback is None and not isinstance(planner, RulePlanner):
            fallback = RulePlanner()
        self.fallback = fallback
        self._frames: dict[str, bytes] = {}  # the last action's evidence (this call's)
        self.memory: list[str] = []  # the trace's scratchpad (remember)
        self._pages: list[tuple[str, bool]] = []  # (page, progress shown) per observation
        self._anrs_seen: set[str] = set()  # ANR report lines already in the log
        self._stuck = ""  # the stuck-loading issue, once found

    async def act(self, call: Caller, instruction: str, trace: Trace) -> dict[str, Any]:
        """Run ``instruction``; the answer is ``{"trace_id", "ok", "steps", …}``."""
        self._frames, self.memory, self._pages, self._stuck = {}, [], [], ""
        self._anrs_seen = await self._anr_lines(call) if self.settings.anr_recovery else set()
        state, elements = await self._observe(call, trace)
        plan, error = await self._plan(instruction, state, elements, trace, 1)
        if plan is None:
            assert error is not None
            await trace.record("plan", "refused", reason=error.reason, message=error.message)
            return await self._done(trace, ok=False, message=error.message, reason=error.reason)
        corrections = 0
        for round_ in range(1, self.settings.max_rounds + 1):
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
            outcome = await self._run(call, plan, trace, instruction)
            screenshot = outcome.screenshot
            if outcome.failed is not None:
                if corrections >= 1 or not self.planner.corrects:
                    return await self._done(trace, ok=False, message=outcome.failed,
                                            reason="failed")
                corrections += 1
                summary = await failure_summary(call, outcome.failed,
                                                lines=self.settings.logcat_lines)
                await trace.record("summary", "ok", text=summary)
                feedback = f"The previous plan failed. What happened:\n{summary}"
            elif outcome.verdict is not None:
                verdict = outcome.verdict
                if verdict.accepted:
                    return await self._done(trace, ok=True, message="done", rounds=round_,
                                            verdict=verdict.to_json(), claim=outcome.summary)
                if verdict.status == UNVERIFIED:
                    return await self._done(trace, ok=False, message=verdict.reason,
                                            reason="unverified", verdict=verdict.to_json())
                feedback = (
                    "You said mark_done, but the verifier rejected it: the screen does not show "
                    f"the goal reached. What it found missing: {verdict.gap}"
                )
            elif screenshot is not None:
                feedback = "You asked to see the screen: it is attached."
            else:
                return await self._done(trace, ok=True, message="done", rounds=round_)
            if round_ == self.settings.max_rounds or not self.planner.corrects:
                reason = "failed" if outcome.failed is not None else "not_done"
                return await self._done(trace, ok=False, message=feedback[:500], reason=reason)
            state, elements = await self._observe(call, trace)
            if self._stuck:
                feedback = f"{self._stuck}.\n{feedback}"
            try:
                plan = await self.planner.plan(
                    instruction, state, elements, feedback=feedback, memory=tuple(self.memory),
                    screenshot=screenshot,
                )
            except PlanError as exc:
                await trace.record(
                    "plan", "failed", round=round_ + 1, reason=exc.reason, message=exc.message
                )
                message = outcome.failed or f"the next plan failed: {exc.message}"
                return await self._done(trace, ok=False, message=message, reason="failed")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _plan(
        self,
        instruction: str,
        state: Mapping[str, Any],
        elements: Sequence[Mapping[str, Any]],
        trace: Trace,
        round_: int,
    ) -> tuple[Plan | None, PlanError | None]:
        """The first plan: the planner's, or when the model's reply is no valid plan (or the
        model failed), the rule templates' — logged and recorded as a fallback."""
        try:
            return await self.planner.plan(instruction, state, elements), None
        except PlanError as exc:
            if self.fallback is None or exc.reason == "refused":
                return None, exc
            log.warning("the model's plan was unusable (%s: %s); falling back to the rule "
                        "planner", exc.reason, exc.message)
            await trace.record("plan", "fallback", round=round_, reason=exc.reason,
                               message=exc.message, planner="rules")
            try:
                return await self.fallback.plan(instruction, state, elements), None
            except PlanError as rules:
                return None, PlanError(
                    exc.reason, f"{exc.message}; the rule planner could not plan it either: "
                    f"{rules.message}",
                )

    async def _done(self, trace: Trace, *, ok: bool, message: str, **extra: Any) -> dict[str, Any]:
        if self.memory:
            extra["memory"] = list(self.memory)
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
        page = str(state.get("activity") or "")
        self._pages.append((page, loading(elements)))
        recent = self._pages[-STUCK_FRAMES:]
        if (not self._stuck and len(recent) == STUCK_FRAMES and all(loading_ for _, loading_ in
                                                                    recent)
                and len({p for p, _ in recent}) == 1):
            self._stuck = (f"Stuck on a loading screen: {state.get('activity_short') or page} "
                           f"showed a progress indicator in {STUCK_FRAMES} observations in a row")
            await trace.record("issue", "warning", issue="stuck_loading", title=self._stuck)
        return state, elements

    async def _check(self, call: Caller, plan: Plan, trace: Trace) -> str | None:
        """The bridge's dry run over every step; the refusal message, or None."""
        steps = []
        positions = []  # the plan's step index of each checked step
        for i, step in enumerate(plan.steps):
            if step.action in AGENT_TOOLS:
                continue  # no command reaches the device (a screenshot is a read)
            method, params = step_call(step, settled=False)
            steps.append({"method": method.name, "params": params})
            positions.append(i)
        if not steps:
            await trace.record("check", "ok", steps=0)
            return None
        out = await call(AGENT_CHECK, {"steps": steps})
        results = list(out.get("results", []))
        refused = [(positions[j], j, r) for j, r in enumerate(results) if not r.get("ok")]
        if not refused:
            await trace.record("check", "ok", steps=len(steps))
            return None
        for i, j, r in refused:
            await trace.record(
                "check",
                "refused",
                step=i,
                action=plan.steps[i].action,
                method=steps[j]["method"],
                params=steps[j]["params"],
                code=r.get("code"),
                rule=r.get("rule"),
                message=r.get("message"),
            )
        i, _, first = refused[0]
        return (
            f"step {i + 1} ({plan.steps[i].action}) refused by the device's policy: "
            f"{first.get('message')} (rule {first.get('rule')}); nothing was sent"
        )

    async def _run(self, call: Caller, plan: Plan, trace: Trace, goal: str) -> _Round:
        """Run the steps, up to the first failure, ``mark_done`` or ``request_screenshot``."""
        for i, step in enumerate(plan.steps):
            if step.action == "remember":
                fact = (step.target or "")[:MAX_FACT]
                if len(self.memory) < MAX_FACTS:
                    self.memory.append(fact)
                await trace.record("remember", "ok", step=i, fact=fact, memory=len(self.memory))
                continue
            if step.action == "mark_done":
                summary = step.target or ""
                return _Round(verdict=await self._verify(call, trace, i, goal, summary),
                              summary=summary)
            if step.action == "request_screenshot":
                return _Round(screenshot=await self._screenshot(call, trace, i, step))
            failed = await self._step(call, i, step, trace)
            if self.settings.anr_recovery:
                failed = await self._recover_anr(call, trace, i) or failed
            if failed is not None:
                return _Round(
                    failed=f"step {i + 1} ({step.action} {step.target or ''}): {failed}".strip()
                )
        if plan.source == "llm" and self.verifier.configured:
            # A model's plan that ran to its end without saying mark_done is judged all the
            # same: its steps running is not the goal reached.
            summary = "(no mark_done: the plan ran to its end)"
            return _Round(verdict=await self._verify(call, trace, len(plan.steps), goal, summary),
                          summary=summary)
        return _Round()

    async def _anr_lines(self, call: Caller) -> set[str]:
        try:
            out = await call(LOGCAT_DUMP, {"lines": self.settings.logcat_lines})
        except RpcError:
            return set()
        return {line for line in out.get("lines", []) if "ANR in " in line}

    async def _recover_anr(self, call: Caller, trace: Trace, i: int) -> str | None:
        """An ANR of the app in front since the last look: force-stop it, capture, say so."""
        lines = await self._anr_lines(call)
        new = sorted(lines - self._anrs_seen)
        self._anrs_seen |= lines
        if not new:
            return None
        state = await call(DEVICE_STATE, {})
        package = state.get("package")
        hit = [ln for ln in new if isinstance(package, str) and package
               and re.search(rf"ANR in {re.escape(package)}(?![\w.])", ln)]
        if not hit:
            return None
        shot = await call(UI_SCREENSHOT, {"marks": False})
        evidence = {"screenshot_png": shot["png"]} if isinstance(shot.get("png"), bytes) else {}
        frames = await trace.keep_frames(len(trace.steps), evidence)
        try:
            await call(APP_STOP, {"package": package, "settled": False})
            stopped = "force-stopped"
        except RpcError as exc:
            stopped = f"not stopped ({exc.message})"
        await trace.record("anr", "recovered" if stopped == "force-stopped" else "failed",
                           step=i, package=package, lines=hit[:5], action=stopped, **frames)
        return f"{package} stopped responding (ANR): {stopped}, its screen and log captured"

    async def _screenshot(self, call: Caller, trace: Trace, i: int, step: PlanStep) -> bytes:
        method, params = step_call(step)
        out = await call(method, params)
        png = out.get("png")
        if not isinstance(png, bytes):
            raise RpcError(ErrorCode.INTERNAL, "the bridge returned no PNG")
        frames = await trace.keep_frames(len(trace.steps), {"screenshot_png": png})
        await trace.record("screenshot", "ok", step=i, marks=params["marks"], **frames)
        return png

    async def _verify(
        self, call: Caller, trace: Trace, i: int, goal: str, summary: str
    ) -> Verdict:
        """mark_done: the verifier's verdict on the evidence, recorded with its frames."""
        state = await call(DEVICE_STATE, {})
        elements = _elements(await call(UI_DUMP, {}))
        evidence = dict(self._frames)
        if not evidence:  # nothing acted this call: the screen as it is now
            shot = await call(UI_SCREENSHOT, {"marks": False})
            if isinstance(shot.get("png"), bytes):
                evidence = {"settled_png": shot["png"]}
        image = evidence.get("composite_png") or evidence.get("settled_png") or evidence.get(
            "at_action_png")
        verdict = await self.verifier.verify(goal, summary, state, elements, image,
                                             memory=tuple(self.memory))
        frames = await trace.keep_frames(len(trace.steps), evidence)
        detail = {k: v for k, v in verdict.to_json().items() if k != "status"}
        await trace.record("verify", verdict.status, step=i, summary=summary[:1000],
                           page=state.get("activity_short"), **detail, **frames)
        return verdict

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
        pngs = {k: v for k, v in result.items() if k in FRAME_KEYS and isinstance(v, bytes)}
        if pngs:
            self._frames = pngs  # the evidence a mark_done is judged on
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
