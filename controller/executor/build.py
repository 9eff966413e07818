"""The build part of a run: the compile → fix → recompile loop on a build bridge, cached by
the build's boundary (:mod:`controller.executor.cache`), with source look-ups for the fixer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import select

from controller.executor.base import Abort, ExecutorBase, Plan, reason_for, test_class_of
from controller.executor.cache import CompiledTest, build_boundary, cache_key
from controller.executor.gateway import (
    BridgeView,
    DeviceView,
    Target,
    all_bridges,
)
from controller.executor.recording import RecordingGateway, ms_since
from controller.executor.remote_index import RemoteSourceIndex, names_to_look_up
from controller.executor.request import ExecuteRequest
from controller.executor.results import RunResult, pending_result
from controller.executor.steps import StepLog
from controller.store import (
    Bridge,
)
from fixer import compile_fix_loop_async
from fixer.repair import unified_diff
from protocol.errors import RpcError
from protocol.methods import (
    COMPILE,
    INVALID_RESULT,
    SOURCE_LOOKUP,
    Apk,
    CompileResult,
)

__all__ = [
    "STOP_REASONS",
    "BuildSteps",
    "compile_error",
    "compile_failed_detail",
    "file_of",
    "judged_by",
]

STOP_REASONS = {
    "build_config": "the build itself is broken, not the test",
    "unchanged_errors": "a fix left the same errors",
    "no_fix": "no fix found",
}


def compile_failed_detail(fixes: int, stop_reason: str) -> str:
    """Why a compile failed for good, in words: how many fix rounds ran, and why it stopped."""
    if fixes == 0:
        detail = "the test does not compile and no fix was tried"
    else:
        detail = f"still failing after {fixes} fix round{'s' if fixes != 1 else ''}"
    if stop_reason != "max_rounds":
        detail += f" ({STOP_REASONS.get(stop_reason, stop_reason)})"
    return detail


def compile_error(error: dict[str, Any]) -> dict[str, Any]:
    """A compile error as callers see it: the file relative to the project (``app/src/…``),
    not the bridge host's own working-copy path."""
    file = error.get("file")
    if isinstance(file, str):
        parts = file.replace("\\", "/").split("/")
        at = max((i for i, part in enumerate(parts) if part == "src"), default=None)
        error["file"] = "/".join(parts[max(at - 1, 0):]) if at is not None else parts[-1]
    return error


def file_of(code: str) -> str:
    test_class = test_class_of(code)
    return f"{test_class.rsplit('.', 1)[-1]}.kt" if test_class else "Test.kt"


def judged_by(result: CompileResult) -> str:
    """The toolchain a result names: ``kotlinc`` when the real compiler judged the test and
    the simulated toolchain built it (without an SDK); ``gradle`` or ``simulated`` otherwise."""
    if result.checked_by == "kotlinc" and result.toolchain == "simulated":
        return "kotlinc"
    return result.toolchain


class BuildSteps(ExecutorBase):
    """Compiling a run's test (the fix loop) on a build bridge."""

    def _compile_failed(
        self, run_id: str, device: DeviceView | None, compiled: CompiledTest
    ) -> RunResult:
        rounds = len(compiled.compile_rounds)
        if compiled.stop_reason == "compiled":
            detail = "the build succeeded but produced no APKs"
        else:
            detail = compile_failed_detail(max(rounds - 1, 0), compiled.stop_reason)
        result = pending_result(run_id, device, "compile_failed", detail)
        result.toolchain = compiled.toolchain
        result.compile_rounds = compiled.compile_rounds
        result.compile_output = compiled.output[-4000:]
        return result

    async def _compiled(
        self,
        plan: Plan,
        steps: StepLog,
        deadline: float,
        builder: BridgeView | None,
        devices: Sequence[DeviceView | None],
    ) -> CompiledTest:
        """The APKs for ``devices``: prebuilt, from the cache within ``builder``'s boundary, or
        compiled on ``builder``. No builder (none the run may use is connected): only what
        the cache holds from the caller's or the devices' owners' own builders."""
        request = plan.request
        if request.apks is not None:
            app, test = request.apks.decoded()
            await steps.record("compile", "skipped", detail="prebuilt APKs")
            return CompiledTest(
                ok=True,
                toolchain=None,
                app_apk=Apk.from_bytes("app", "app.apk", app),
                test_apk=Apk.from_bytes("test", "test.apk", test),
                code=request.test_code,
                stop_reason="prebuilt",
            )
        if builder is None:
            owners = {d.owner_id for d in devices if d is not None}
            if plan.principal is not None:
                owners.add(plan.principal.user_id)
            for owner in sorted(owners):
                key = cache_key(request.project_dir, request.test_code, f"owner:{owner}")
                hit = self.cache.get(key)
                if hit is not None:
                    await steps.record(
                        "compile", "ok", detail="served from the controller's APK cache",
                        bridge=hit.bridge, key=key,
                    )
                    return hit
            what = f"project {request.project_dir}" if request.project_dir else "the test"
            detail = (f"no connected bridge of yours, of the device's owner or shared by an "
                      f"admin can build {what}")
            await steps.record("compile", "refused", detail=detail)
            raise Abort("bridge_unavailable", detail)
        key = cache_key(
            request.project_dir, request.test_code,
            build_boundary(builder.owner_id, builder.id, builder.shared),
        )
        compiled, cached = await self.cache.get_or_build(
            key, lambda: self._compile(plan, steps, deadline, builder)
        )
        if cached:
            await steps.record(
                "compile", "ok", detail="served from the controller's APK cache",
                bridge=compiled.bridge, key=key,
            )
        return compiled

    async def _build_groups(self, plan: Plan) -> list[tuple[BridgeView | None, list[int]]]:
        """Which builder compiles for which devices (indexes into ``plan.devices``).

        A device takes APKs only from a build bridge owned by the run's caller, by the
        device's owner, or marked shared by an admin (read from the store now). Preferred:
        the device's own bridge, then the caller's, then the device owner's others, then a
        shared one. One builder every device may use compiles once for all; otherwise each
        device gets its own best (devices with the same builder share its compile)."""
        everything = list(range(len(plan.devices)))
        if plan.request.apks is not None:
            return [(None, everything)]
        project = plan.request.project_dir
        builders = [
            b for b in await all_bridges(self.gateway)
            if b.can_build and (project is None or not b.caps.projects or project in b.caps.projects)
        ]
        shared = await self._shared_bridges([b.id for b in builders])
        builders = [replace(b, shared=b.shared or b.id in shared) for b in builders]
        caller = plan.principal.user_id if plan.principal is not None else None
        devices = [d for d in plan.devices if d is not None]

        def allowed(b: BridgeView, d: DeviceView) -> bool:
            return b.shared or b.owner_id in (caller, d.owner_id)

        near = {d.bridge_id for d in devices}
        common = [b for b in builders if all(allowed(b, d) for d in devices)]
        if common:
            common.sort(key=lambda b: (b.id not in near, b.owner_id != caller, b.shared, b.name))
            return [(common[0], everything)]
        groups: dict[str | None, tuple[BridgeView | None, list[int]]] = {}
        for i, d in enumerate(plan.devices):
            assert d is not None
            fit = sorted(
                (b for b in builders if allowed(b, d)),
                key=lambda b, d=d: (b.id != d.bridge_id, b.owner_id != caller,  # type: ignore[misc]
                                    b.owner_id != d.owner_id, b.name),
            )
            best = fit[0] if fit else None
            groups.setdefault(best.id if best else None, (best, []))[1].append(i)
        return list(groups.values())

    async def _shared_bridges(self, bridge_ids: Sequence[str]) -> set[str]:
        """Which of ``bridge_ids`` an admin marked shared (the store, read now)."""
        if self.store is None or not bridge_ids:
            return set()
        async with self.store.session() as session:
            rows = await session.execute(
                select(Bridge.id).where(Bridge.id.in_(list(bridge_ids)), Bridge.shared.is_(True))
            )
            return {str(r) for r in rows.scalars()}

    async def _compile(
        self, plan: Plan, steps: StepLog, deadline: float, bridge: BridgeView
    ) -> CompiledTest:
        loop = asyncio.get_running_loop()
        request = plan.request
        await steps.record("builder", "ok", bridge=bridge.name, bridge_id=bridge.id,
                           shared=bridge.shared)
        gw = RecordingGateway(self.gateway, steps, self._reauth(plan.principal))
        target: Target = bridge.id
        index = RemoteSourceIndex(package=None)
        max_compiles = self.settings.max_fix_rounds + 1
        state: dict[str, Any] = {"round": 0, "last": None, "code": None, "fix_steps": []}
        started = time.monotonic()

        async def compile_fn(code: str) -> tuple[bool, str]:
            state["round"] += 1
            n = state["round"]
            if n > 1:
                fix_step = await steps.record(
                    "fix", "ok", round=n - 1, diff=unified_diff(state["code"], code, file_of(code))
                )
                state["fix_steps"].append(fix_step)
            state["code"] = code
            steps.progress("compiling", round=n, max_rounds=max_compiles)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Abort("timeout", f"the run's deadline passed before compile round {n}")
            limit = min(self.settings.compile_timeout_s, remaining)
            params = COMPILE.parse_params({
                "test_code": code, "timeout_s": round(limit, 1), "project": request.project_dir,
            })
            try:
                result = await gw.call(
                    target, COMPILE, params, timeout_s=limit + self.settings.rpc_grace_s
                )
            except RpcError as exc:
                if (exc.data or {}).get("reason") == INVALID_RESULT:
                    # a malformed result from the bridge
                    raise Abort("bridge_unavailable", f"compile: bad result ({exc.message})") \
                        from exc
                raise Abort(reason_for(exc, "build"), f"compile: {exc.message}") from exc
            state["last"] = result
            state.setdefault("checks", []).append(result.check)
            if not result.ok and n < max_compiles:
                await self._look_up(gw, target, request, code, result.output, index)
            return result.ok, result.output

        loop_result = await compile_fix_loop_async(
            request.test_code,
            compile_fn,
            index,  # type: ignore[arg-type]  # duck-typed: lookup/find_class/methods_of
            self.llm,
            self.settings.max_fix_rounds,
        )
        rounds = loop_result.rounds
        for fix_step, entry in zip(state["fix_steps"], rounds[1:], strict=False):
            await steps.end(fix_step, "ok", fixer=entry.fixer, changes=entry.changes, note=entry.note)
        if loop_result.stop_reason == "no_fix":
            await steps.record(
                "fix", "failed", round=len(rounds), note=rounds[-1].note or "no fix found"
            )
        last: CompileResult | None = state["last"]
        app = next((a for a in (last.apks if last else []) if a.role == "app"), None)
        test = next((a for a in (last.apks if last else []) if a.role == "test"), None)
        ok = loop_result.ok and app is not None and test is not None
        if loop_result.ok and not ok:
            await steps.record("compile", "failed", detail="the build produced no APKs")
        checks: list[dict[str, Any] | None] = state.get("checks", [])
        return CompiledTest(
            ok=ok,
            toolchain=judged_by(last) if last else bridge.caps.toolchain,
            app_apk=app,
            test_apk=test,
            code=loop_result.code,
            compile_rounds=[
                {"round": r.round, "ok": r.ok, "errors": [compile_error(e.to_dict()) for e in r.errors],
                 "fixer": r.fixer, "diff": r.diff,
                 **({"check": checks[i]} if i < len(checks) and checks[i] else {})}
                for i, r in enumerate(rounds)
            ],
            output=loop_result.output,
            bridge=bridge.name,
            bridge_id=bridge.id,
            shared=bridge.shared,
            stop_reason=loop_result.stop_reason,
            duration_ms=ms_since(started),
        )

    async def _look_up(
        self,
        gw: RecordingGateway,
        target: Target,
        request: ExecuteRequest,
        code: str,
        output: str,
        index: RemoteSourceIndex,
    ) -> None:
        """Fetch the declarations the failing test names, for the fixer (best effort)."""
        names = names_to_look_up(code, output)
        if not names:
            return
        try:
            params = SOURCE_LOOKUP.parse_params({"names": names, "project": request.project_dir})
            found = await gw.call(
                target, SOURCE_LOOKUP, params, timeout_s=self.settings.step_timeout_s
            )
        except RpcError:
            return  # the fixer works without the app's sources, with its rules and the LLM
        index.add(m.model_dump(exclude_none=True) for m in found.methods)
