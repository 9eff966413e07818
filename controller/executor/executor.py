"""The sandbox executor: compile → fix → install → run → logcat → verdict (docs/design.md §5).

One request may fan out to several devices: it is *planned* first (devices chosen among those
the caller may use, one run row per device, so ``?wait=false`` can answer with the run ids at
once) and then *run*: one compile — through the fixer's compile→fix→recompile loop, at most
``max_fix_rounds`` fix rounds, on a build bridge the run may use (its caller's, its device
owner's, or one an admin marked shared) — cached by the hash of project, test code and the
builder's boundary (:mod:`controller.executor.cache`), then on every device at once::

    logcat -c → install app + test APKs → am instrument -w -r [→ the failed tests again,
    ``-e class Cls#method``, ``retries`` times] → logcat -d -v threadtime
    → analysis attributed to the app under test → verdict → pm clear + uninstall

Scheduling (:mod:`controller.executor.queue`): a device serves one run at a time; runs wait in
its queue, FIFO per user and round robin across users, and the wait counts against the run's
deadline. A run can be cancelled (:meth:`SandboxExecutor.cancel`) while it waits, compiles or
runs: it ends ``cancelled`` with a PENDING result, its device cleaned up all the same. Each
test's result keeps its own slice of the logcat (:mod:`controller.executor.slices`).

Each device step re-checks the caller's right when it runs (token live, loan live, scope:
:func:`controller.access.check_access`); with an :class:`~controller.access.AccessWatch`, a
run whose caller's token or loan ends is cancelled at once, queued or running. Either way it
ends PENDING ``access_revoked``, its device cleaned up.

Nothing here raises to the caller: every failure becomes a PENDING result whose
``reason_code`` says why (``skipped``, ``compile_failed``, ``no_device``, ``adb_unavailable``,
``bridge_unavailable``, ``timeout``, ``test_crashed``) with §5's summary. Every RPC, fixer
round and refusal is a step of the run's log (:mod:`controller.executor.steps`), failed and
refused ones included. Cleanup runs whatever happened before it, on its own small budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controller.access import ACCESS_REVOKED, AccessWatch, check_access
from controller.analysis import (
    Thresholds,
    analyze,
    parse_instrumentation,
)
from controller.auth import Action, DeviceRef, Principal, authorize, principal_for
from controller.executor.cache import ApkCache, CompiledTest, build_boundary, cache_key
from controller.executor.gateway import (
    BridgeView,
    DeviceView,
    Gateway,
    Target,
    all_bridges,
    all_devices,
)
from controller.executor.placement import Placement, order_by_load, with_store_labels
from controller.executor.queue import Scheduler, SharedTurn
from controller.executor.recovery import (
    Resumable,
    ResumeContext,
    ResumedDevice,
    clean_up,
    end_run,
)
from controller.executor.remote_index import RemoteSourceIndex, names_to_look_up
from controller.executor.request import DEFAULT_TIMEOUT_S, ExecuteRequest
from controller.executor.results import analysed_result, pending_result
from controller.executor.selection import select_devices
from controller.executor.sharding import (
    Units,
    discover_units,
    merge_results,
    merge_retry,
    split,
    unit_durations,
)
from controller.executor.slices import slice_by_test
from controller.executor.steps import MAX_DETAIL_TEXT, ProgressListener, Step, StepLog
from controller.hub.inventory import serial_refusal
from controller.store import (
    Bridge,
    Device,
    Run,
    RunStatus,
    RunStep,
    Store,
    TestResult,
    Token,
    User,
    new_id,
    utcnow,
)
from fixer import ChatCompleter, compile_fix_loop_async
from fixer.prompt import declared_names, package_of
from fixer.repair import unified_diff
from protocol.envelope import new_request_id
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    COMPILE,
    INSTALL,
    INSTRUMENT,
    INVALID_RESULT,
    LOGCAT_CLEAR,
    LOGCAT_DUMP,
    SHELL,
    SOURCE_LOOKUP,
    UNINSTALL,
    Apk,
    CompileResult,
    InstallResult,
    InstrumentResult,
    LogcatDumpParams,
    Method,
    ShellParams,
)

__all__ = [
    "ExecutorSettings",
    "Plan",
    "SandboxExecutor",
    "reason_for",
]

log = logging.getLogger("droidwire.controller.executor")

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)

DEFAULT_RUNNER = "androidx.test.runner.AndroidJUnitRunner"
_QUOTA_POLL_S = 0.25  # a run waiting for its user's quota asks again this often


@dataclass(frozen=True, kw_only=True)
class ExecutorSettings:
    # Rounds
    max_fix_rounds: int = 3
    retries: int = 0  # failed tests run again this often, unless the request says otherwise
    # Timeouts
    default_timeout_s: float = DEFAULT_TIMEOUT_S
    compile_timeout_s: float = 900.0  # one compile, within the run's deadline
    step_timeout_s: float = 60.0  # logcat, install, uninstall: within the run's deadline
    cleanup_timeout_s: float = 30.0  # after the deadline too: a borrower leaves nothing behind
    continue_wait_s: float = 120.0  # a dead replica's run waits this long for its device
    rpc_grace_s: float = 5.0  # the RPC's own deadline over the bridge-side one
    # Verdict
    thresholds: Thresholds = field(default_factory=Thresholds)
    runner: str = DEFAULT_RUNNER


def reason_for(exc: RpcError, stage: str) -> str:
    """The PENDING ``reason_code`` of an RPC error at ``stage`` (``build`` or ``device``)."""
    code = exc.code
    if code is ErrorCode.TIMEOUT:
        return "timeout"
    data = exc.data or {}
    if code is ErrorCode.FORBIDDEN and data.get("rule") == ACCESS_REVOKED:
        return "access_revoked"  # the caller's right lapsed: refused before the step ran
    reason = str(data.get("reason", ""))
    if data.get("rule") == "paused":
        return "device_paused"  # the owner paused sharing while the run went on
    if stage == "build":
        if code is ErrorCode.FORBIDDEN or code is ErrorCode.BAD_REQUEST:
            return "compile_failed"  # the test itself was refused (package, path)
        return "bridge_unavailable"
    if "bridge" in reason or (code is ErrorCode.UNAVAILABLE and "bridge" in exc.message.lower()):
        return "bridge_unavailable"
    if code is ErrorCode.NOT_FOUND:
        # Hidden by the owner's config: not there for us. Otherwise adb lost it.
        return "no_device" if data.get("rule") == "not_exposed" else "adb_unavailable"
    if code in (ErrorCode.CANCELLED, ErrorCode.BUSY):
        return "bridge_unavailable"
    return "adb_unavailable"  # device_offline, unavailable adb, refused or failed installs


class _Abort(Exception):
    """Ends a run early with a PENDING verdict (internal to this module)."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


@dataclass(slots=True)
class Plan:
    """A request with its devices chosen and its runs created."""

    request: ExecuteRequest
    principal: Principal | None
    run_ids: list[str]
    devices: list[DeviceView | None]  # None: the run has no device (skipped, no_device)
    abort: _Abort | None = None  # decided before anything ran
    refusals: list[dict[str, Any]] = field(default_factory=list)
    max_running: int | None = None  # the user's quota: its runs wait for a slot under it
    # Sharded (controller.executor.sharding): each run's units (-e class …), the run that
    # carries the merged result, the file's test units, and the retries on other devices.
    shards: list[list[str]] | None = None
    lead_id: str | None = None
    units: Units | None = None
    retried: list[dict[str, Any]] = field(default_factory=list)
    start_seq: int = 0  # a run continued after its controller died: its next step number


Reauth = Callable[[Target], Awaitable[None]]


class _RecordingGateway:
    """Every RPC through the gateway as a step of the log (a wrapper that records)."""

    def __init__(
        self, gateway: Gateway, steps: StepLog, reauth: Reauth | None = None
    ) -> None:
        self.gateway = gateway
        self.steps = steps
        self.reauth = reauth  # re-checks the caller's right before each step

    async def call(
        self,
        target: Target,
        method: Method[P, R],
        params: P,
        *,
        timeout_s: float | None,
        resume: ResumeContext | None = None,
        check: bool = True,
    ) -> R:
        """``check=False``: a step that runs whatever the caller's right (cleanup)."""
        sent = params.model_dump(exclude_unset=True, exclude_none=True)
        shown = {k: v for k, v in sent.items() if k not in ("test_code", "apk")}
        if "apk" in sent:
            shown["apk_bytes"] = len(sent["apk"])
        where = str(target) if not isinstance(target, str) else f"bridge {target}"
        if check and self.reauth is not None:
            # When the re-check began: it read the store as of then or later, so a step whose
            # re-check began after a revocation committed cannot have passed it.
            checked = {"reauth_at": utcnow().isoformat()}
            try:
                await self.reauth(target)
            except RpcError as exc:
                await self.steps.record(
                    "rpc", "refused", method=method.name, target=where, **checked,
                    error={"code": exc.code.value, "message": exc.message, **_small(exc.data)},
                )
                raise
            extra_in: dict[str, Any] = dict(checked)
        else:
            extra_in = {}
        request_id: str | None = None
        session_of = getattr(self.gateway, "session_of", None)
        if resume is not None and isinstance(target, DeviceRef) and callable(session_of):
            # A restarted controller can wait for this result again (recovery.py): the request
            # id is chosen here and recorded with the bridge session it goes out on.
            bridge_session = session_of(target.bridge_id)
            if isinstance(bridge_session, str):
                request_id = new_request_id()
                extra_in.update(request_id=request_id, bridge_session=bridge_session,
                                resume=resume.model_dump(mode="json"))
        step = await self.steps.begin(
            "rpc", method=method.name, target=where, params=shown, **extra_in
        )
        started = time.monotonic()
        try:
            return await self._call(step, started, target, method, params, timeout_s,
                                    request_id)
        finally:
            settle = getattr(self.gateway, "settle", None)
            if request_id is not None and isinstance(target, DeviceRef) and callable(settle):
                # Only now that the step (with the result) is written: see HubGateway.call.
                with contextlib.suppress(Exception):
                    await asyncio.shield(settle(target.bridge_id, request_id))

    async def _call(
        self,
        step: Step,
        started: float,
        target: Target,
        method: Method[P, R],
        params: P,
        timeout_s: float | None,
        request_id: str | None,
    ) -> R:
        try:
            if request_id is not None:
                result = await self.gateway.call(  # type: ignore[call-arg]
                    target, method, params, timeout_s=timeout_s, request_id=request_id
                )
            else:
                result = await self.gateway.call(target, method, params, timeout_s=timeout_s)
        except RpcError as exc:
            status = "refused" if exc.code is ErrorCode.FORBIDDEN else "failed"
            await self.steps.end(
                step,
                status,
                ms=_ms_since(started),
                error={"code": exc.code.value, "message": exc.message, **_small(exc.data)},
            )
            raise
        except asyncio.CancelledError:
            # The run was cancelled mid-call: the step ends, it does not stay "running".
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.steps.end(step, "failed", ms=_ms_since(started), error="cancelled")
                )
            raise
        except Exception as exc:
            await self.steps.end(step, "failed", ms=_ms_since(started), error=repr(exc)[:300])
            raise
        extra: dict[str, Any] = {}
        if isinstance(result, InstallResult) and result.package and not result.existed:
            # Kept so that a controller restarted mid-run still knows what to uninstall (never
            # a package that was on the device before the run: that one is the owner's).
            extra["package"] = result.package
        if (request_id is not None and isinstance(result, InstrumentResult)
                and len(result.output) <= MAX_DETAIL_TEXT):
            # Kept so that a replica taking over a run that died after its tests ran finishes
            # it (logcat, cleanup, verdict) instead of running the tests again (recovery.py).
            extra["result"] = result.model_dump(exclude_unset=True)
        await self.steps.end(step, "ok", ms=_ms_since(started), **extra)
        return result


_STOP_REASONS = {
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
        detail += f" ({_STOP_REASONS.get(stop_reason, stop_reason)})"
    return detail


def _small(data: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (data or {}).items() if k != "output"}


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


async def _value(value: dict[str, Any]) -> dict[str, Any]:
    return value


async def _raise_cancelled() -> list[dict[str, Any]]:
    raise asyncio.CancelledError


def _failed(tests: Sequence[Any]) -> list[tuple[str, str]]:
    """(class, method) of the tests that failed or erred, in order, without duplicates."""
    out: list[tuple[str, str]] = []
    for t in tests:
        key = (t.class_name, t.name)
        if t.status in ("failed", "error") and t.name != "null" and key not in out:
            out.append(key)
    return out


def _merge_retries(tests: list[dict[str, Any]], attempts: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Each retried test takes its latest status; ``attempts`` counts its runs, and a test
    that passed on a retry is marked ``flaky`` (its first failure kept as ``first_stack``)."""
    by_key = {(t["class"], t["name"]): t for t in tests}
    for records in attempts:
        for record in records:
            test = by_key.get((record["class"], record["name"]))
            if test is None:
                continue
            first = test.get("first_stack", test["stack"])
            test.update(status=record["status"], stack=record["stack"],
                        attempts=test["attempts"] + 1)
            if record["status"] == "passed":
                test["flaky"] = True
                test["first_stack"] = first


def _builder_of(compiled: CompiledTest) -> dict[str, Any] | None:
    """The result's ``builder``: the bridge whose APKs the run installed (None: prebuilt)."""
    if compiled.bridge_id is None:
        return None
    return {"id": compiled.bridge_id, "name": compiled.bridge, "shared": compiled.shared}


def _built(build: CompiledTest | _Abort | None) -> CompiledTest | None:
    """A build that produced APKs, else None (its runs ended before any device work)."""
    return build if isinstance(build, CompiledTest) and build.ok else None


def _lent_to(principal: Principal | None) -> Callable[[DeviceView], bool] | None:
    """Which devices ``principal`` uses through a loan (none for an admin: every device is
    theirs to use); selectors reach those only when nothing of their own matches."""
    if principal is None or principal.is_admin:
        return None
    return lambda d: d.owner_id != principal.user_id


def test_class_of(code: str) -> str | None:
    """The fully-qualified name of the test's first top-level class."""
    names = declared_names(code, top_level_only=True)
    if not names:
        return None
    package = package_of(code)
    return f"{package}.{names[0]}" if package else names[0]


def _error(error: dict[str, Any]) -> dict[str, Any]:
    """A compile error as callers see it: the file relative to the project (``app/src/…``),
    not the bridge host's own working-copy path."""
    file = error.get("file")
    if isinstance(file, str):
        parts = file.replace("\\", "/").split("/")
        at = max((i for i, part in enumerate(parts) if part == "src"), default=None)
        error["file"] = "/".join(parts[max(at - 1, 0):]) if at is not None else parts[-1]
    return error


def _file_of(code: str) -> str:
    test_class = test_class_of(code)
    return f"{test_class.rsplit('.', 1)[-1]}.kt" if test_class else "Test.kt"


class SandboxExecutor:
    """Runs sandbox requests against the devices a :class:`Gateway` reaches."""

    def __init__(
        self,
        gateway: Gateway,
        store: Store | None,
        *,
        settings: ExecutorSettings | None = None,
        llm: ChatCompleter | None = None,
        cache: ApkCache | None = None,
        observer: Callable[[dict[str, Any]], None] | None = None,
        instance: str | None = None,
        shared_turn: SharedTurn | None = None,
        access: AccessWatch | None = None,
    ) -> None:
        self.gateway = gateway
        # Ends a run whose caller's right lapses while it waits or runs (controller.access).
        self.access = access
        self._revoked: dict[str, str] = {}  # run id -> why its caller's right lapsed
        self.store = store
        self.settings = settings or ExecutorSettings()
        self.llm = llm
        self.cache = cache if cache is not None else ApkCache()
        self.observer = observer  # sees every finished result (metrics)
        # shared_turn: a device's turn across replicas (cluster mode), see Scheduler.
        self.scheduler = Scheduler(shared_turn)
        self.placement = Placement(store)  # which device a run goes to (least loaded)
        # Which controller process ran a run (kept in its request record): after a restart,
        # runs of a process that is gone are ended (controller.executor.recovery).
        self.instance = instance or new_id()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._plan_tasks: dict[str, asyncio.Task[Any]] = {}  # run id -> its plan's task
        self._plan_runs: dict[str, tuple[str, ...]] = {}  # run id -> its plan's run ids
        self._jobs: dict[str, asyncio.Task[Any]] = {}  # run id -> its device job
        self._cancelled: dict[str, str] = {}  # run id -> who cancelled it
        self._leads: dict[str, tuple[str, ...]] = {}  # a sharded run's lead id -> its shards

    # -- public ------------------------------------------------------------------------------

    async def execute(
        self,
        request: ExecuteRequest,
        *,
        principal: Principal | None = None,
        listener: ProgressListener | None = None,
    ) -> list[dict[str, Any]]:
        """Plan and run ``request``; one result per device (at least one). Never raises."""
        plan = await self.plan(request, principal)
        return await self.run(plan, listener=listener)

    def submit(
        self,
        plan: Plan,
        *,
        listener: ProgressListener | None = None,
        then: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``plan`` in the background (``?wait=false``); its runs tell how it went.
        ``then`` gets the results (e.g. to audit them)."""

        async def background() -> None:
            results = await self.run(plan, listener=listener)
            if then is not None:
                await then(results)

        for run_id in plan.run_ids:  # cancellable from now on
            self._plan_runs[run_id] = tuple(plan.run_ids)
        if plan.lead_id is not None:
            self._leads[plan.lead_id] = tuple(plan.run_ids)
        task = asyncio.get_running_loop().create_task(background())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def active(self, run_id: str) -> bool:
        """Whether ``run_id`` is running (or waiting) in this executor."""
        return run_id in self._plan_runs or run_id in self._leads

    def cancel(self, run_id: str, *, by: str = "user") -> bool:
        """Cancel a run of this executor: waiting for its device, compiling or running. It
        ends ``cancelled`` (PENDING, reason ``cancelled``) once its device is cleaned up.
        False when the run is not active here (finished, unknown, or on another replica)."""
        shards = self._leads.get(run_id)
        if shards is not None:
            return any([self.cancel(r, by=by) for r in shards])
        if run_id not in self._plan_runs:
            return False
        self._cancelled.setdefault(run_id, by)
        job = self._jobs.get(run_id)
        plan_task = self._plan_tasks.get(run_id)
        if job is not None:
            job.cancel()
        elif plan_task is not None and all(r in self._cancelled for r in self._plan_runs[run_id]):
            plan_task.cancel()  # before the devices: nothing of the plan is left to do
        # Not started yet: run() finds it cancelled; a compile under way: its job never starts.
        return True

    async def aclose(self) -> None:
        """Cancel background runs (their rows end ``cancelled``)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def plan(self, request: ExecuteRequest, principal: Principal | None) -> Plan:
        """Choose the devices and create the runs. Raises ``RpcError`` only for a malformed
        selector (``bad_request``) or an ambiguous serial (``conflict``)."""
        abort: _Abort | None = None
        devices: list[DeviceView | None]
        refusals: list[dict[str, Any]] = []
        if request.skipped:
            devices, abort = [None], _Abort("skipped", "the test body could not be generated")
        else:
            usable, refusals = await self._usable_devices(principal)
            usable = await with_store_labels(self.store, usable)
            me = principal.user_id if principal is not None else None
            names = await self._owner_names(request.selectors)
            lent = _lent_to(principal)
            # Choosing and creating the runs under the placement lock: a request arriving at
            # the same moment (on any replica) sees these runs in the devices' loads.
            async with self.placement.transaction() as session:
                loads = await self.placement.loads(
                    session, [d.id for d in usable if d.ready], me
                )
                ordered = order_by_load(usable, loads)
                chosen = select_devices(request.selectors, ordered, me=me, owner_names=names,
                                        lent=lent)
                shards: list[list[str]] | None = None
                units = discover_units(request.test_code) if request.shard else None
                if units is not None and request.shard and chosen:
                    # Sharded: the suite's units over the least-loaded matching devices.
                    if not request.selectors:
                        chosen = select_devices(["all"], ordered, lent=lent)
                    wanted = min(request.shard, len(chosen))
                    unit_list = units.for_devices(wanted)
                    if unit_list:
                        weights = await self._unit_weights(session, unit_list, units)
                        shards = split(unit_list, weights, wanted)
                        chosen = chosen[:len(shards)]
                    else:
                        chosen = chosen[:1]  # no @Test found: one unsharded run
                if chosen:
                    devices = list(chosen)
                else:
                    devices = [None]
                    abort = self._why_none(request.selectors, usable, me, names, lent)
                quota = await self.placement.quota(session, me)
                refusal = quota.refusal(len(devices)) if abort is None else None
                if refusal is not None:
                    raise refusal
                extras = ([{"classes": shard} for shard in shards]
                          if shards is not None else None)
                run_ids = await self._create_runs(request, principal, devices, session, extras)
                lead_id = None
                if shards is not None:
                    lead_id = await self._create_lead(request, principal, session, run_ids,
                                                      devices, shards)
            return Plan(request, principal, run_ids, devices, abort, refusals,
                        max_running=quota.max_running, shards=shards, lead_id=lead_id,
                        units=units)
        run_ids = await self._create_runs(request, principal, devices)
        return Plan(request, principal, run_ids, devices, abort, refusals)

    async def run(self, plan: Plan, *, listener: ProgressListener | None = None) -> list[dict[str, Any]]:
        """Run a plan to its results (one per run, in order). Never raises but cancellation."""
        steps = StepLog(self.store, plan.run_ids, listener=listener, start_seq=plan.start_seq)
        started = time.monotonic()
        timeout_s = plan.request.timeout_s or self.settings.default_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout_s
        if plan.lead_id is not None:
            await self._mark([plan.lead_id], RunStatus.RUNNING)
            self._leads[plan.lead_id] = tuple(plan.run_ids)
        if plan.max_running is None or plan.abort is not None:
            await self._mark(plan.run_ids, RunStatus.RUNNING)
        # else: _run() marks them running once the user's quota lets them start.
        if plan.refusals:
            # Which devices stays out of the caller's log (they may not even see them); the
            # controller's own log has it.
            log.info("runs %s: refused devices %s", plan.run_ids, plan.refusals)
            await steps.record(
                "authorize",
                "refused",
                devices=len(plan.refusals),
                codes=sorted({r["code"] for r in plan.refusals}),
            )
        for run_id in plan.run_ids:
            self._plan_runs[run_id] = tuple(plan.run_ids)
        unwatch = []
        if self.access is not None and plan.principal is not None:
            for run_id, device in zip(plan.run_ids, plan.devices, strict=True):
                unwatch.append(self.access.watch(
                    plan.principal, device.ref if device is not None else None,
                    lambda reason, r=run_id: self._lapse(r, reason),  # type: ignore[misc]
                ))
        inner = asyncio.get_running_loop().create_task(
            self._run(plan, steps, deadline)
            if not all(r in self._cancelled for r in plan.run_ids)
            else _raise_cancelled()
        )
        for run_id in plan.run_ids:
            self._plan_tasks[run_id] = inner
        try:
            results = await inner
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if (this is not None and this.cancelling()) or not all(
                r in self._cancelled for r in plan.run_ids
            ):
                for run_id in plan.run_ids:
                    self._cancelled.pop(run_id, None)
                    self._revoked.pop(run_id, None)
                leads = [plan.lead_id] if plan.lead_id is not None else []
                self._leads.pop(plan.lead_id or "", None)
                await asyncio.shield(self._mark_cancelled([*plan.run_ids, *leads]))
                raise
            # Cancelled through cancel() before any device work: every run says so.
            await steps.record("cancel", "ok", by=self._cancelled[plan.run_ids[0]])
            results = [
                self._cancelled_result(run_id, device)
                for run_id, device in zip(plan.run_ids, plan.devices, strict=True)
            ]
        except Exception as exc:  # a bug here must still answer with a verdict
            log.exception("sandbox run %s failed", plan.run_ids)
            await steps.record("internal", "failed", error=repr(exc)[:500])
            results = [
                pending_result(run_id, device, "internal", f"controller error: {type(exc).__name__}")
                for run_id, device in zip(plan.run_ids, plan.devices, strict=True)
            ]
        finally:
            for stop in unwatch:
                stop()
            for run_id in plan.run_ids:
                self._plan_tasks.pop(run_id, None)
                self._plan_runs.pop(run_id, None)
                self._jobs.pop(run_id, None)
        total = _ms_since(started)
        for result in results:
            result["timings"].setdefault("total_ms", total)
        await self._finish(plan.run_ids, results)
        for run_id in plan.run_ids:
            self._cancelled.pop(run_id, None)
            self._revoked.pop(run_id, None)
        if self.observer is not None:
            for result in results:
                try:
                    self.observer(result)
                except Exception:
                    log.exception("result observer failed")
        if plan.lead_id is not None:
            self._leads.pop(plan.lead_id, None)
            assert plan.shards is not None and plan.units is not None
            merged = merge_results(plan.lead_id, plan.shards, results, plan.units,
                                   plan.retried)
            await self._finish([plan.lead_id], [merged])
            steps.progress("done")
            return [merged]
        steps.progress("done")
        return results

    # -- planning ----------------------------------------------------------------------------

    async def _usable_devices(
        self, principal: Principal | None
    ) -> tuple[list[DeviceView], list[dict[str, Any]]]:
        usable: list[DeviceView] = []
        refusals: list[dict[str, Any]] = []
        for device in await all_devices(self.gateway):
            if principal is not None and self.store is not None:
                try:
                    await authorize(principal, device.ref, Action.USE, store=self.store)
                except RpcError as exc:
                    # Not offered to the caller (a device they may not see stays unseen),
                    # but counted in the run's log.
                    refusals.append(
                        {"device": device.id, "code": exc.code.value, **_small(exc.data)}
                    )
                    continue
            usable.append(device)
        if principal is not None and not principal.is_admin and self.store is not None:
            # The caller's own devices whose bridge is away (not even in its grace period)
            # still hold their selectors: a loan never takes one over (selection.py).
            known = {(d.bridge_id, d.serial) for d in usable}
            async with self.store.session() as session:
                rows = (await session.execute(
                    select(Bridge.id, Bridge.name, Device.serial, Device.last_info)
                    .join(Device, Device.bridge_id == Bridge.id)
                    .where(Bridge.owner_id == principal.user_id)
                )).all()
            for bridge_id, bridge_name, serial, info in rows:
                if (bridge_id, serial) not in known and serial_refusal(serial) is None:
                    usable.append(DeviceView(bridge_id, bridge_name, principal.user_id, serial,
                                             "disconnected", dict(info or {})))
        return usable, refusals

    async def _owner_names(self, selectors: Sequence[str]) -> dict[str, str]:
        """User id → name, when a selector names an owner (``owner=alice``)."""
        if self.store is None or not any(s.strip().startswith("owner") for s in selectors):
            return {}
        async with self.store.session() as session:
            rows = (await session.execute(select(User.id, User.name))).all()
        return {str(i): str(n) for i, n in rows}

    def _why_none(
        self,
        selectors: Sequence[str],
        usable: Sequence[DeviceView],
        me: str | None,
        owner_names: Mapping[str, str],
        lent: Callable[[DeviceView], bool] | None = None,
    ) -> _Abort:
        named = select_devices(selectors or ["all"], usable, only_ready=False, me=me,
                               owner_names=owner_names, lent=lent)
        if not named:
            what = ", ".join(selectors) or "any device"
            return _Abort("no_device", f"no device matches {what}")
        if all(d.state == "paused" for d in named):
            return _Abort("device_paused",
                          f"{named[0].id} is paused: its owner has paused sharing on its bridge")
        if all(d.state == "disconnected" for d in named):
            return _Abort("bridge_unavailable", f"the bridge of {named[0].id} is not connected")
        return _Abort("adb_unavailable", f"{named[0].id} is {named[0].state}")

    async def _create_runs(
        self,
        request: ExecuteRequest,
        principal: Principal | None,
        devices: Sequence[DeviceView | None],
        session: AsyncSession | None = None,
        extras: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[str]:
        runs = [
            Run(
                id=new_id(),
                user_id=principal.user_id if principal is not None else None,
                status=RunStatus.QUEUED.value,
                request={
                    **request.for_record(),
                    "device_id": d.id if d else None,
                    "controller": self.instance,
                    # Which token submitted it (its id, never the secret): a replica that
                    # continues the run acts as that token, re-checked (continue_run).
                    **({"token_id": principal.token_id} if principal is not None else {}),
                    **(extras[i] if extras is not None else {}),
                },
            )
            for i, d in enumerate(devices)
        ]
        if session is not None:
            session.add_all(runs)
            await session.flush()
        elif self.store is not None:
            async with self.store.session() as own, own.begin():
                own.add_all(runs)
                await own.flush()
        return [r.id for r in runs]

    async def _create_lead(
        self,
        request: ExecuteRequest,
        principal: Principal | None,
        session: AsyncSession | None,
        run_ids: Sequence[str],
        devices: Sequence[DeviceView | None],
        shards: Sequence[Sequence[str]],
    ) -> str:
        """The run that stands for a sharded request as a whole: its result is the merge."""
        lead = Run(
            id=new_id(),
            user_id=principal.user_id if principal is not None else None,
            status=RunStatus.QUEUED.value,
            request={
                **request.for_record(), "device_id": None, "controller": self.instance,
                "kind": "sharded",
                "shards": [{"run_id": r, "device_id": d.id if d else None, "classes": list(c)}
                           for r, d, c in zip(run_ids, devices, shards, strict=True)],
            },
        )
        if session is not None:
            session.add(lead)
            await session.flush()
        return lead.id

    async def _unit_weights(
        self, session: AsyncSession | None, unit_list: Sequence[str], units: Units
    ) -> dict[str, float]:
        """Each unit's expected duration: from earlier sharded runs when known (the others
        estimated at the known units' mean time per test), else its test count."""
        history: list[Mapping[str, Any]] = []
        if session is not None:
            rows = await session.execute(
                select(Run.result)
                .where(Run.status == RunStatus.FINISHED.value,
                       Run.request["kind"].as_string() == "sharded")
                .order_by(Run.created_at.desc())
                .limit(20)
            )
            history = [r for r in rows.scalars().all() if isinstance(r, dict)]
        known = unit_durations(history)
        per_test = [known[u] / units.tests_in(u) for u in unit_list if u in known]
        if not per_test:
            return {u: float(units.tests_in(u)) for u in unit_list}
        mean = sum(per_test) / len(per_test)
        return {u: known.get(u, mean * units.tests_in(u)) for u in unit_list}

    # -- running -----------------------------------------------------------------------------

    async def _run(self, plan: Plan, steps: StepLog, deadline: float) -> list[dict[str, Any]]:
        if plan.abort is not None:
            status = "skipped" if plan.abort.reason_code == "skipped" else "refused"
            await steps.record(plan.abort.reason_code, status, detail=plan.abort.detail)
            return [
                pending_result(run_id, device, plan.abort.reason_code, plan.abort.detail)
                for run_id, device in zip(plan.run_ids, plan.devices, strict=True)
            ]
        if plan.max_running is not None:
            try:
                await self._user_slot(plan, steps, deadline)
            except _Abort as abort:
                return [
                    pending_result(run_id, device, abort.reason_code, abort.detail)
                    for run_id, device in zip(plan.run_ids, plan.devices, strict=True)
                ]
        compile_started = time.monotonic()
        # One compile per builder: a builder every device may take APKs from when there is
        # one, else one per group of devices (see _build_groups).
        builds: dict[int, CompiledTest | _Abort] = {}
        for builder, group in await self._build_groups(plan):
            try:
                outcome: CompiledTest | _Abort = await self._compiled(
                    plan, steps, deadline, builder, [plan.devices[i] for i in group]
                )
            except _Abort as abort:
                outcome = abort
            for i in group:
                builds[i] = outcome
        compile_ms = _ms_since(compile_started)
        loop = asyncio.get_running_loop()
        user = plan.principal.user_id if plan.principal is not None else ""
        jobs: list[asyncio.Future[dict[str, Any]]] = []
        forks: dict[int, StepLog] = {}  # the runs that went to their device, by index
        for i, (run_id, device) in enumerate(zip(plan.run_ids, plan.devices, strict=True)):
            compiled = builds[i]
            if isinstance(compiled, _Abort):
                jobs.append(loop.create_task(_value(
                    pending_result(run_id, device, compiled.reason_code, compiled.detail)
                )))
                continue
            if not compiled.ok:
                jobs.append(loop.create_task(_value(
                    self._compile_failed(run_id, device, compiled)
                )))
                continue
            assert device is not None
            forks[i] = steps.fork(run_id, device.id)
            if run_id in self._cancelled:
                await forks[i].record("cancel", "ok", by=self._cancelled[run_id])
                jobs.append(loop.create_task(_value(self._cancelled_result(run_id, device))))
                continue
            job = loop.create_task(
                self._on_device(
                    forks[i], run_id, device, compiled, deadline, user,
                    plan.request.retries, plan.principal,
                    classes=plan.shards[i] if plan.shards is not None else None,
                )
            )
            self._jobs[run_id] = job
            jobs.append(job)
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        results = []
        for i, (run_id, device, done) in enumerate(
            zip(plan.run_ids, plan.devices, outcomes, strict=True)
        ):
            if isinstance(done, asyncio.CancelledError):
                results.append(self._cancelled_result(run_id, device))
            elif isinstance(done, BaseException):
                raise done
            else:
                results.append(done)
            build = builds[i]
            if isinstance(build, CompiledTest):
                results[-1]["builder"] = _builder_of(build)
        for result in results:
            result["timings"]["compile_ms"] = compile_ms
        if plan.shards is not None:
            await self._retry_elsewhere(plan, forks, results, builds, deadline, user)
        return results

    async def _retry_elsewhere(
        self,
        plan: Plan,
        forks: Mapping[int, StepLog],
        results: list[dict[str, Any]],
        builds: Mapping[int, CompiledTest | _Abort],
        deadline: float,
        user: str,
    ) -> None:
        """Sharded: each shard's failed or erring tests run again, alone, on the next shard's
        device (once); their outcome is folded into the shard's result. The retry installs
        that device's own build (from a builder allowed for it, like its shard's run)."""
        ran = [i for i in sorted(forks) if _built(builds.get(i)) is not None]
        if len(ran) < 2:
            return
        jobs: list[Awaitable[dict[str, Any]]] = []
        where: list[tuple[int, DeviceView]] = []
        for index in ran:
            run_id, result = plan.run_ids[index], results[index]
            failed = [f"{t['class']}#{t['name']}" for t in result.get("tests") or []
                      if t.get("status") in ("failed", "error") and t.get("name") != "null"]
            if not failed or run_id in self._cancelled:
                continue
            nxt = ran[(ran.index(index) + 1) % len(ran)]
            other, compiled = plan.devices[nxt], _built(builds.get(nxt))
            assert other is not None and compiled is not None
            jobs.append(self._on_device(forks[index].fork(run_id, other.id), run_id, other,
                                        compiled, deadline, user, 0, plan.principal,
                                        classes=failed))
            where.append((index, other))
        for (index, other), retry in zip(where, await asyncio.gather(*jobs), strict=True):
            merge_retry(results[index], retry, other.id)
            plan.retried.append(retry)

    async def _user_slot(self, plan: Plan, steps: StepLog, deadline: float) -> None:
        """Wait (status ``queued``, a running ``user_quota`` step) until the user's runs
        started, on every replica, leave room for this plan's under ``max_running``; then mark
        them running in the same transaction. Asks again every ``_QUOTA_POLL_S``: the runs
        that end may be on another replica."""
        user = plan.principal.user_id if plan.principal is not None else None
        step: Step | None = None
        loop = asyncio.get_running_loop()
        while True:
            async with self.placement.transaction() as session:
                quota = await self.placement.quota(session, user)
                if quota.may_start(len(plan.run_ids)):
                    if session is not None:
                        await session.execute(
                            update(Run).where(Run.id.in_(plan.run_ids))
                            .values(status=RunStatus.RUNNING.value)
                        )
                    break
            if step is None:
                step = await steps.begin("user_quota", max_running=quota.max_running,
                                         running=quota.running)
            if loop.time() >= deadline:
                await steps.end(step, "failed", error="timeout")
                raise _Abort("timeout", "the run's deadline passed while the user's quota "
                             f"({quota.max_running} running runs) was full")
            await asyncio.sleep(min(_QUOTA_POLL_S, max(deadline - loop.time(), 0.0)))
        if step is not None:
            await steps.end(step, "ok")

    def _compile_failed(
        self, run_id: str, device: DeviceView | None, compiled: CompiledTest
    ) -> dict[str, Any]:
        rounds = len(compiled.compile_rounds)
        if compiled.stop_reason == "compiled":
            detail = "the build succeeded but produced no APKs"
        else:
            detail = compile_failed_detail(max(rounds - 1, 0), compiled.stop_reason)
        result = pending_result(run_id, device, "compile_failed", detail)
        result.update(
            toolchain=compiled.toolchain,
            compile_rounds=compiled.compile_rounds,
            compile_output=compiled.output[-4000:],
        )
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
            raise _Abort("bridge_unavailable", detail)
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
        gw = _RecordingGateway(self.gateway, steps, self._reauth(plan.principal))
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
                    "fix", "ok", round=n - 1, diff=unified_diff(state["code"], code, _file_of(code))
                )
                state["fix_steps"].append(fix_step)
            state["code"] = code
            steps.progress("compiling", round=n, max_rounds=max_compiles)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Abort("timeout", f"the run's deadline passed before compile round {n}")
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
                    raise _Abort("bridge_unavailable", f"compile: bad result ({exc.message})") \
                        from exc
                raise _Abort(reason_for(exc, "build"), f"compile: {exc.message}") from exc
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
            toolchain=_judged_by(last) if last else bridge.caps.toolchain,
            app_apk=app,
            test_apk=test,
            code=loop_result.code,
            compile_rounds=[
                {"round": r.round, "ok": r.ok, "errors": [_error(e.to_dict()) for e in r.errors],
                 "fixer": r.fixer, "diff": r.diff,
                 **({"check": checks[i]} if i < len(checks) and checks[i] else {})}
                for i, r in enumerate(rounds)
            ],
            output=loop_result.output,
            bridge=bridge.name,
            bridge_id=bridge.id,
            shared=bridge.shared,
            stop_reason=loop_result.stop_reason,
            duration_ms=_ms_since(started),
        )

    async def _look_up(
        self,
        gw: _RecordingGateway,
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

    async def _on_device(
        self,
        steps: StepLog,
        run_id: str,
        device: DeviceView,
        compiled: CompiledTest,
        deadline: float,
        user: str = "",
        retries: int | None = None,
        principal: Principal | None = None,
        *,
        classes: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """One run on one device at a time: two runs installing and clearing the same app
        would spoil each other's evidence. Waiting counts against the run's deadline.
        ``classes``: run only these (``-e class A,B#m``; a shard, or a retry elsewhere)."""
        waited = None
        if self.scheduler.busy(device.id):
            waited = await steps.begin("device_busy", device=device.id)

        async def busy_elsewhere() -> None:
            nonlocal waited
            if waited is None:
                waited = await steps.begin("device_busy", device=device.id)
            steps.progress("waiting for the device (a run on another replica holds it)")

        turn = self.scheduler.turn(
            device.id, user, run_id, on_wait=lambda: steps.progress("waiting for the device"),
            on_shared_wait=busy_elsewhere,
        )
        try:
            async with asyncio.timeout_at(deadline):
                await turn.__aenter__()
        except RpcError as exc:  # the cluster's turn could not be taken (Redis away)
            if waited is not None:
                await steps.end(waited, "failed", detail=exc.message)
            return pending_result(run_id, device, "bridge_unavailable", exc.message)
        except TimeoutError:
            if waited is not None:
                await steps.end(waited, "failed", detail="busy with another run until the deadline")
            return pending_result(run_id, device, "timeout", f"{device.id} stayed busy with another run")
        except asyncio.CancelledError:
            if waited is not None:
                await asyncio.shield(steps.end(waited, "failed", detail="cancelled while waiting"))
            await self._note_cancel(steps, run_id)
            raise
        try:
            if waited is not None:
                await steps.end(waited, "ok")
            return await self._on_device_locked(
                steps, run_id, device, compiled, deadline,
                self.settings.retries if retries is None else retries, principal,
                as_owner=bool(user) and user == device.owner_id, classes=classes,
            )
        except asyncio.CancelledError:
            await self._note_cancel(steps, run_id)
            raise
        finally:
            await turn.__aexit__(None, None, None)

    async def _note_cancel(self, steps: StepLog, run_id: str) -> None:
        if run_id in self._cancelled:
            with contextlib.suppress(Exception):
                await asyncio.shield(steps.record("cancel", "ok", by=self._cancelled[run_id]))

    def _lapse(self, run_id: str, reason: str) -> None:
        """The caller's right to this run lapsed (a token or loan revoked or expired): a
        queued run is cancelled, a running one stopped now — PENDING ``access_revoked``, its
        device cleaned up as after any cancel."""
        self._revoked.setdefault(run_id, reason)
        self.cancel(run_id, by="access lapsed")

    def _reauth(self, principal: Principal | None) -> Reauth | None:
        """Each device step re-checks the caller's token, loan and scope when it runs."""
        store = self.store
        if principal is None or store is None:
            return None

        async def reauth(target: Target) -> None:
            await check_access(
                store, principal, target if isinstance(target, DeviceRef) else None
            )

        return reauth

    def _cancelled_result(self, run_id: str, device: DeviceView | None) -> dict[str, Any]:
        if run_id in self._revoked:
            return pending_result(run_id, device, "access_revoked", self._revoked[run_id])
        by = self._cancelled.get(run_id, "shutdown")
        return pending_result(run_id, device, "cancelled", f"cancelled by {by}")

    async def _on_device_locked(
        self,
        steps: StepLog,
        run_id: str,
        device: DeviceView,
        compiled: CompiledTest,
        deadline: float,
        retries: int = 0,
        principal: Principal | None = None,
        *,
        as_owner: bool = False,
        classes: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """One run on one device. ``as_owner``: the run's user owns the device, so its
        installs may grant runtime permissions (``-g``) and the bridge's ``full`` profile
        applies; a borrower's run gets neither (docs/security.md). ``classes``: run only
        these (``-e class A,B#m``)."""
        loop = asyncio.get_running_loop()
        gw = _RecordingGateway(self.gateway, steps, self._reauth(principal))
        target: Target = device.ref
        serial = device.serial
        timings: dict[str, int] = {}
        installed: list[str] = []  # what this run put on the device (and must remove)
        app_package: str | None = None
        app_new = False  # the app was not on the device before the run: its data may go
        instrument: InstrumentResult | None = None
        partial_output = ""
        abort: _Abort | None = None

        def remaining() -> float:
            left = deadline - loop.time()
            if left <= 0:
                raise _Abort("timeout", "the run's deadline passed")
            return left

        async def call(method: Method[P, R], params: dict[str, Any],
                       limit: float | None = None) -> R:
            budget = min(limit or self.settings.step_timeout_s, remaining())
            try:
                typed = method.parse_params(
                    {"serial": serial, **params, **({"as_owner": True} if as_owner else {})}
                )
                return await gw.call(
                    target, method, typed, timeout_s=budget + self.settings.rpc_grace_s,
                )
            except RpcError as exc:
                raise _Abort(reason_for(exc, "device"), f"{method.name}: {exc.message}") from exc

        assert compiled.app_apk is not None and compiled.test_apk is not None
        test_package: str | None = None
        retried: list[list[dict[str, Any]]] = []  # each retry's test records
        try:
            t = time.monotonic()
            await call(LOGCAT_CLEAR, {})
            steps.progress("installing")
            # What was installed is what the device says (its package list before and
            # after), never the APK's claim; what was there before is never removed.
            grant = {"grant_permissions": True} if as_owner else {}
            app = await call(
                INSTALL, {"apk": compiled.app_apk.data, **grant}, self.settings.compile_timeout_s,
            )
            app_package = app.package
            app_new = bool(app_package) and not app.existed
            if app_new:
                installed.append(app_package)
            test = await call(
                INSTALL, {"apk": compiled.test_apk.data, **grant}, self.settings.compile_timeout_s,
            )
            test_package = test.package
            if test_package and not test.existed:
                installed.append(test_package)
            timings["install_ms"] = _ms_since(t)
            if not test_package:
                raise _Abort("adb_unavailable", "the test APK's package is unknown after install")
            steps.progress("running")
            t = time.monotonic()
            args: dict[str, str] = {}
            test_class = test_class_of(compiled.code)
            if classes:
                args["class"] = ",".join(classes)
            elif test_class and compiled.toolchain is not None:
                args["class"] = test_class
            budget = remaining()
            try:
                instrument = await gw.call(
                    target,
                    INSTRUMENT,
                    INSTRUMENT.parse_params(
                        {"serial": serial, "package": test_package,
                         "runner": self.settings.runner, "args": args,
                         "timeout_s": round(budget, 1)}),
                    timeout_s=budget + self.settings.rpc_grace_s,
                    resume=ResumeContext(
                        device=ResumedDevice(
                            bridge_id=device.bridge_id, bridge_name=device.bridge_name,
                            owner_id=device.owner_id, serial=serial, info=dict(device.info)),
                        app_package=app_package, installed=list(installed), app_new=app_new,
                        toolchain=compiled.toolchain, builder=_builder_of(compiled),
                        compile_rounds=compiled.compile_rounds,
                        test_class=test_class_of(compiled.code), timings=dict(timings),
                        test_package=test_package, retries=retries,
                        deadline_unix=time.time() + budget,
                    ),
                )
            except RpcError as exc:
                partial_output = str((exc.data or {}).get("output") or "")
                if (exc.data or {}).get("reason") == INVALID_RESULT:
                    abort = _Abort("bridge_unavailable", f"instrument: bad result ({exc.message})")
                else:
                    abort = _Abort(reason_for(exc, "device"), f"instrument: {exc.message}")
            timings["run_ms"] = _ms_since(t)
            if instrument is not None and abort is None and retries > 0:
                t = time.monotonic()
                retried = await self._retry_failed(
                    gw, target, serial, test_package, instrument.output, retries, remaining
                )
                timings["retry_ms"] = _ms_since(t)
        except _Abort as exc:
            abort = exc
        except asyncio.CancelledError:
            # Cancelled (cancel(), shutdown, a client gone): leave nothing behind on the device.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(self._cleanup(
                        gw, target, serial, app_package if app_new else None, installed)),
                    self.settings.cleanup_timeout_s,
                )
            raise

        return await self._conclude(
            steps, gw, run_id, device, app_package=app_package, app_new=app_new,
            installed=installed,
            instrument=instrument, partial_output=partial_output, abort=abort,
            retried=retried, timings=timings, toolchain=compiled.toolchain,
            compile_rounds=compiled.compile_rounds, test_class=test_class_of(compiled.code),
        )

    async def _conclude(
        self,
        steps: StepLog,
        gw: _RecordingGateway,
        run_id: str,
        device: DeviceView,
        *,
        app_package: str | None,
        installed: Sequence[str],
        instrument: InstrumentResult | None,
        app_new: bool = False,
        partial_output: str,
        abort: _Abort | None,
        retried: list[list[dict[str, Any]]],
        timings: dict[str, int],
        toolchain: Any,
        compile_rounds: Any,
        test_class: str | None,
    ) -> dict[str, Any]:
        """After the instrumentation: logcat, cleanup, analysis — the run's result."""
        target: Target = device.ref
        serial = device.serial
        logcat = ""
        logcat_ok = False
        # Evidence is collected even after a failed or timed-out instrumentation: what the app
        # logged before it is still ground truth. Its own short budget, past the deadline too.
        steps.progress("collecting")
        t = time.monotonic()
        try:
            dumped = await gw.call(
                target, LOGCAT_DUMP, LogcatDumpParams(serial=serial, format="threadtime"),
                timeout_s=self.settings.step_timeout_s,
            )
            logcat = "\n".join(dumped.lines)
            logcat_ok = True
        except RpcError as exc:
            if abort is None:
                abort = _Abort(reason_for(exc, "device"), f"logcat: {exc.message}")
        timings["logcat_ms"] = _ms_since(t)

        steps.progress("cleaning")
        t = time.monotonic()
        await self._cleanup(gw, target, serial, app_package if app_new else None, installed)
        timings["cleanup_ms"] = _ms_since(t)

        output = instrument.output if instrument is not None else partial_output
        parsed = parse_instrumentation(output) if output else None
        if not logcat_ok:
            assert abort is not None
            result = pending_result(run_id, device, abort.reason_code, abort.detail)
        else:
            analysis = analyze(
                logcat,
                package=app_package or None,
                thresholds=self.settings.thresholds,
                instrumentation=parsed,
                completed=None if abort is None else False,
            )
            result = analysed_result(
                run_id, device, analysis, logcat, parsed,
                (abort.reason_code, abort.detail) if abort is not None else None,
            )
        result.update(
            toolchain=toolchain,
            compile_rounds=compile_rounds,
            test_class=test_class,
            package=app_package or None,
        )
        if parsed is not None:
            tests = [
                {"class": x.class_name, "name": x.name, "status": x.status, "stack": x.stack,
                 "attempts": 1}
                for x in parsed.tests
            ]
            _merge_retries(tests, retried)
            slices = slice_by_test(logcat.splitlines()) if logcat_ok else {}
            for test in tests:
                test["logcat"] = slices.get((str(test["class"]), str(test["name"])), "")
            result["tests"] = tests
            result["run_status"] = parsed.run_status
        result["timings"].update(timings)
        return result

    # -- resuming after a controller restart (recovery.py) -------------------------------------

    def resume(self, item: Resumable) -> Awaitable[None] | None:
        """Take over a dead controller's run whose instrumentation result its bridge may still
        hold: the request is adopted now (before the bridge is back), and the returned
        awaitable finishes the run — logcat, cleanup, verdict — once the result comes, or ends
        it PENDING ``controller_restarted`` when it cannot. None: not resumable here."""
        adopt = getattr(self.gateway, "adopt", None)
        if not callable(adopt) or self.store is None:
            return None
        if item.done:  # the tests ran and their result was recorded: finish with it
            recorded: asyncio.Future[dict[str, Any]] = (
                asyncio.get_running_loop().create_future())
            recorded.set_result(dict(item.detail["result"]))
            return asyncio.get_running_loop().create_task(self._resume(item, recorded))
        dev = item.context.device
        ref = DeviceRef(dev.bridge_id, dev.serial, dev.owner_id, dev.bridge_name)
        params = dict(item.detail.get("params") or {})
        budget = float(params.get("timeout_s") or self.settings.step_timeout_s)
        try:
            waiter = adopt(
                ref, item.request_id, INSTRUMENT.name, params,
                sent_session=item.bridge_session, timeout_s=budget + self.settings.rpc_grace_s,
            )
        except RpcError as exc:
            log.warning("run %s cannot be resumed: %s", item.run_id, exc.message)
            return None
        return asyncio.get_running_loop().create_task(self._resume(item, waiter))

    async def _resume(self, item: Resumable, waiter: Awaitable[dict[str, Any]]) -> None:
        """Finish a resumed run, holding its device's turn as the run did before the restart,
        so a new run on that device waits until this one has collected its logcat and cleaned
        up. After a restart the turn is free (resume() runs before any new run can queue); a
        survivor adopting a dead replica's run may first finish its own run on that device."""
        dev = item.context.device
        turn = self.scheduler.turn(f"{dev.bridge_name}~{dev.serial}", "", item.run_id)
        held = True
        try:
            await turn.__aenter__()
        except RpcError as exc:  # the cluster's turn could not be taken (Redis away)
            log.warning("run %s: finishing without the device's turn: %s", item.run_id,
                        exc.message)
            held = False
        try:
            await self._finish_resumed(item, waiter)
        finally:
            if held:
                await turn.__aexit__(None, None, None)

    async def _finish_resumed(self, item: Resumable, waiter: Awaitable[dict[str, Any]]) -> None:
        assert self.store is not None
        ctx = item.context
        dev = ctx.device
        steps = StepLog(self.store, [item.run_id], start_seq=item.next_seq)
        step = Step("rpc", item.step_seq, dict(item.detail))
        started = time.monotonic()
        instrument: InstrumentResult | None = None
        partial_output = ""
        abort: _Abort | None = None
        try:
            try:
                instrument = InstrumentResult.model_validate(await waiter)
            except RpcError as exc:
                if exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.CANCELLED):
                    # The result is not coming: the run ends as any other a restart cut.
                    reason = str((exc.data or {}).get("reason") or exc.code.value)
                    await self._give_up(item, f"its result was not recovered ({reason})")
                    return
                partial_output = str((exc.data or {}).get("output") or "")
                abort = _Abort(reason_for(exc, "device"), f"instrument: {exc.message}")
                await steps.end(step, "failed", ms=_ms_since(started), resumed=True,
                                error={"code": exc.code.value, "message": exc.message})
            except ValueError as exc:
                abort = _Abort("bridge_unavailable", f"instrument: bad result ({exc})")
                await steps.end(step, "failed", ms=_ms_since(started), resumed=True,
                                error=repr(exc)[:300])
            else:
                await steps.end(step, "ok", ms=_ms_since(started), resumed=True)
            device = next(
                (d for d in self.gateway.devices()
                 if d.bridge_id == dev.bridge_id and d.serial == dev.serial),
                DeviceView(dev.bridge_id, dev.bridge_name, dev.owner_id, dev.serial, "device",
                           dict(dev.info)),
            )
            timings = dict(ctx.timings)
            gw = _RecordingGateway(self.gateway, steps)
            retried: list[list[dict[str, Any]]] = []
            # A run whose retries may already have run before its controller died does not
            # retry again: its tests never run twice because of a takeover.
            retries = 0 if item.done else ctx.retries
            test_package = ctx.test_package or ""
            if instrument is not None and abort is None and retries > 0 and test_package:
                deadline_unix = ctx.deadline_unix

                def remaining() -> float:
                    left = deadline_unix - time.time()
                    if left <= 0:
                        raise _Abort("timeout", "the run's deadline passed")
                    return left

                t = time.monotonic()
                retried = await self._retry_failed(
                    gw, device.ref, device.serial, test_package, instrument.output, retries,
                    remaining,
                )
                timings["retry_ms"] = _ms_since(t)
            result = await self._conclude(
                steps, gw, item.run_id, device,
                app_package=ctx.app_package or None,
                app_new=ctx.app_new,
                installed=ctx.installed,
                instrument=instrument, partial_output=partial_output, abort=abort,
                retried=retried,
                timings=timings, toolchain=ctx.toolchain,
                compile_rounds=ctx.compile_rounds, test_class=ctx.test_class,
            )
            result["resumed"] = True
            result["builder"] = ctx.builder
            await self._finish([item.run_id], [result])
            log.info("run %s resumed after a controller restart: %s", item.run_id,
                     result["verification_status"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("resuming run %s failed", item.run_id)
            await self._give_up(item, f"resuming failed ({exc!r})"[:300])

    # -- continuing a dead replica's run that never reached its tests (recovery.py) ----------

    def continue_run(self, run: Run, next_seq: int) -> Awaitable[None] | None:
        """Take over a dead controller's run that never sent its instrumentation
        (:func:`~controller.executor.recovery.restartable`) and run it from the start here,
        on its device, once that device is reachable from this replica; None: cannot."""
        if self.store is None:
            return None
        record = run.request or {}
        try:
            request = ExecuteRequest.model_validate(
                {k: v for k, v in record.items() if k in ExecuteRequest.model_fields})
        except ValidationError:
            return None
        token_id = record.get("token_id")
        return asyncio.get_running_loop().create_task(self._continue(
            run.id, run.user_id, request, str(record["device_id"]), next_seq,
            token_id if isinstance(token_id, str) else None))

    async def _continue(self, run_id: str, user_id: str | None, request: ExecuteRequest,
                        device_id: str, next_seq: int, token_id: str | None) -> None:
        assert self.store is not None
        try:
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(RunStep).where(RunStep.run_id == run_id, RunStep.status == "running")
                    .values(status="failed", finished_at=utcnow()))
            device = await self._reachable(device_id)
            if device is None:
                await self._end_continued(run_id, f"its device {device_id} was not reachable "
                                          f"within {self.settings.continue_wait_s:g}s")
                return
            principal = None
            if user_id is not None:
                # The caller as the token they submitted with acts now (its scopes, its user's
                # rights), not as when the dead replica accepted the run; every step of the
                # continued run re-checks it again (check_access), like any run's.
                principal = await self._caller(token_id, user_id)
                try:
                    if principal is None:
                        raise RpcError(ErrorCode.FORBIDDEN, "the token was revoked",
                                       {"rule": ACCESS_REVOKED, "why": "token"})
                    await check_access(self.store, principal, device.ref)
                except RpcError as exc:
                    await self._end_continued(
                        run_id, f"no longer allowed ({(exc.data or {}).get('why') or exc.code.value})")
                    return
            steps = StepLog(self.store, [run_id], start_seq=next_seq)
            await steps.record("recovery", "ok", continued_by=self.instance,
                               detail="its controller stopped before its tests ran: "
                               "continued from the start")
            await self.run(Plan(request, principal, [run_id], [device], start_seq=next_seq + 1))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("continuing run %s failed", run_id)
            await self._end_continued(run_id, f"continuing failed ({exc!r})"[:300])

    async def _caller(self, token_id: str | None, user_id: str) -> Principal | None:
        """The principal of a run's recorded token (its user's), or None if the token is gone,
        revoked or not that user's, or the user is disabled (as authentication answers)."""
        if self.store is None or not token_id:
            return None
        async with self.store.session() as session:
            row = (await session.execute(
                select(Token, User).join(User, Token.owner_id == User.id)
                .where(Token.id == token_id, User.id == user_id)
            )).one_or_none()
        if row is None or row[0].revoked_at is not None or row[1].disabled_at is not None:
            return None
        token, user = row
        return principal_for(
            token_id=token.id, kind=token.kind, name=token.name, bridge_id=token.bridge_id,
            scopes=token.scopes, user_id=user.id, user_name=user.name,
            user_is_admin=user.is_admin,
        )

    async def _reachable(self, device_id: str) -> DeviceView | None:
        """The device once it is ready from here (its bridge reconnected to some replica),
        looked at every 0.25 s (no event tells it), for ``continue_wait_s``."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.settings.continue_wait_s
        while True:
            for device in await all_devices(self.gateway):
                if device.id == device_id and device.ready:
                    return device
            if loop.time() >= until:
                return None
            await asyncio.sleep(0.25)

    async def _end_continued(self, run_id: str, why: str) -> None:
        assert self.store is not None
        with contextlib.suppress(Exception):
            await end_run(self.store, run_id, why)

    async def _give_up(self, item: Resumable, why: str) -> None:
        assert self.store is not None
        with contextlib.suppress(Exception):
            recovered = await end_run(self.store, item.run_id, why)
            if recovered is not None and recovered.packages:
                await clean_up(self.gateway, self.store, [recovered],
                               wait_s=self.settings.cleanup_timeout_s * 4)

    async def _retry_failed(
        self,
        gw: _RecordingGateway,
        target: Target,
        serial: str,
        test_package: str,
        output: str,
        retries: int,
        remaining: Callable[[], float],
    ) -> list[list[dict[str, Any]]]:
        """Run the failed tests again (``-e class Cls#m,Cls#n``), up to ``retries`` times or
        until they pass; each attempt's test records. A failed retry ends the retries, never
        the run: the first attempt's results stand."""
        attempts: list[list[dict[str, Any]]] = []
        failing = _failed(parse_instrumentation(output).tests)
        for _ in range(retries):
            if not failing:
                break
            try:
                budget = remaining()
                rerun = await gw.call(
                    target,
                    INSTRUMENT,
                    INSTRUMENT.parse_params(
                        {"serial": serial, "package": test_package,
                         "runner": self.settings.runner,
                         "args": {"class": ",".join(f"{c}#{n}" for c, n in failing)},
                         "timeout_s": round(budget, 1)}),
                    timeout_s=budget + self.settings.rpc_grace_s,
                )
                again = parse_instrumentation(rerun.output)
            except (RpcError, _Abort):
                break
            records = [
                {"class": x.class_name, "name": x.name, "status": x.status, "stack": x.stack}
                for x in again.tests
            ]
            attempts.append(records)
            failing = _failed(again.tests)
        return attempts

    async def _cleanup(
        self,
        gw: _RecordingGateway,
        target: Target,
        serial: str,
        app_package: str | None,
        installed: Sequence[str],
    ) -> None:
        """Clear the app's data and uninstall what this run installed (docs/design.md §6).
        ``app_package`` only when the run installed it new, ``installed`` only what the run
        put there: a package the device had before the run is never cleared nor removed."""
        limit = self.settings.cleanup_timeout_s
        with contextlib.suppress(RpcError):
            if app_package:
                await gw.call(
                    target, SHELL, ShellParams(serial=serial, argv=["pm", "clear", app_package]),
                    timeout_s=limit, check=False,
                )
        for package in reversed(installed):  # the test package first: it targets the app
            with contextlib.suppress(RpcError):
                await gw.call(
                    target, UNINSTALL,
                    UNINSTALL.parse_params({"serial": serial, "package": package}),
                    timeout_s=limit, check=False,
                )

    # -- the store ---------------------------------------------------------------------------

    async def _mark(self, run_ids: Sequence[str], status: RunStatus) -> None:
        if self.store is None:
            return
        try:
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(Run).where(Run.id.in_(list(run_ids))).values(status=status.value)
                )
        except Exception:
            log.exception("could not mark runs %s %s", run_ids, status.value)

    async def _mark_cancelled(self, run_ids: Sequence[str]) -> None:
        if self.store is None:
            return
        with contextlib.suppress(Exception):
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(Run)
                    .where(Run.id.in_(list(run_ids)))
                    .values(status=RunStatus.CANCELLED.value, finished_at=utcnow())
                )

    async def _finish(self, run_ids: Sequence[str], results: Sequence[dict[str, Any]]) -> None:
        if self.store is None:
            return
        try:
            async with self.store.session() as session, session.begin():
                for run_id, result in zip(run_ids, results, strict=True):
                    cancelled = result.get("reason_code") in ("cancelled", "access_revoked")
                    await session.execute(
                        update(Run)
                        .where(Run.id == run_id)
                        .values(
                            status=(RunStatus.CANCELLED if cancelled else RunStatus.FINISHED).value,
                            verdict=result["verification_status"],
                            result=result,
                            finished_at=utcnow(),
                        )
                    )
                    for test in result.get("tests", []):
                        session.add(
                            TestResult(
                                run_id=run_id,
                                class_name=str(test.get("class") or "")[:255],
                                name=str(test.get("name") or "")[:255],
                                status=str(test.get("status") or "")[:32],
                                stack=test.get("stack"),
                            )
                        )
        except Exception:
            log.exception("could not store the results of runs %s", run_ids)


def _judged_by(result: CompileResult) -> str:
    """The toolchain a result names: ``kotlinc`` when the real compiler judged the test and
    the simulated toolchain built it (without an SDK); ``gradle`` or ``simulated`` otherwise."""
    if result.checked_by == "kotlinc" and result.toolchain == "simulated":
        return "kotlinc"
    return result.toolchain
