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

The executor is cut along its seams: this module holds the run lifecycle (plan, queue, fan out,
cancel); :mod:`~controller.executor.build` the compile → fix loop,
:mod:`~controller.executor.device_steps` the work on a device and the result's assembly,
:mod:`~controller.executor.takeover` finishing a dead controller's runs,
:mod:`~controller.executor.recording` every RPC as a step of the log, and
:mod:`~controller.executor.base` the settings and state they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controller.auth import Action, Principal, authorize
from controller.executor.base import (
    DEFAULT_RUNNER,
    QUOTA_POLL_S,
    Abort,
    ExecutorSettings,
    Plan,
    builder_of,
    built,
    lent_to,
    reason_for,
)
from controller.executor.build import compile_failed_detail
from controller.executor.cache import CompiledTest
from controller.executor.gateway import (
    DeviceView,
    all_devices,
)
from controller.executor.placement import order_by_load, with_store_labels
from controller.executor.recording import ms_since, small_detail
from controller.executor.request import ExecuteRequest
from controller.executor.results import RunResult, pending_result
from controller.executor.selection import select_devices
from controller.executor.sharding import (
    Units,
    discover_units,
    merge_results,
    merge_retry,
    split,
    unit_durations,
)
from controller.executor.steps import ProgressListener, Step, StepLog
from controller.executor.takeover import Takeover
from controller.hub.inventory import serial_refusal
from controller.store import (
    Bridge,
    Device,
    Run,
    RunStatus,
    User,
    new_id,
)
from protocol.errors import RpcError

__all__ = [
    "DEFAULT_RUNNER",
    "ExecutorSettings",
    "Plan",
    "SandboxExecutor",
    "compile_failed_detail",
    "reason_for",
]

log = logging.getLogger("droidwire.controller.executor")

P = TypeVar("P", bound=BaseModel)

R = TypeVar("R", bound=BaseModel)


async def _value(value: RunResult) -> RunResult:
    return value


async def _raise_cancelled() -> list[RunResult]:
    raise asyncio.CancelledError


class SandboxExecutor(Takeover):
    """Runs sandbox requests against the devices a :class:`Gateway` reaches."""


    # -- public ------------------------------------------------------------------------------

    async def execute(
        self,
        request: ExecuteRequest,
        *,
        principal: Principal | None = None,
        listener: ProgressListener | None = None,
    ) -> list[RunResult]:
        """Plan and run ``request``; one result per device (at least one). Never raises."""
        plan = await self.plan(request, principal)
        return await self.run(plan, listener=listener)

    def submit(
        self,
        plan: Plan,
        *,
        listener: ProgressListener | None = None,
        then: Callable[[list[RunResult]], Awaitable[None]] | None = None,
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
        abort: Abort | None = None
        devices: list[DeviceView | None]
        refusals: list[dict[str, Any]] = []
        if request.skipped:
            devices, abort = [None], Abort("skipped", "the test body could not be generated")
        else:
            me = principal.user_id if principal is not None else None
            names = await self._owner_names(request.selectors)
            lent = lent_to(principal)
            usable, refusals = await self._usable_when_back(request, principal, me, names, lent)
            usable = await with_store_labels(self.store, usable)
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

    async def run(self, plan: Plan, *, listener: ProgressListener | None = None) -> list[RunResult]:
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
        total = ms_since(started)
        for result in results:
            result.timings.setdefault("total_ms", total)
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

    async def _usable_when_back(
        self,
        request: ExecuteRequest,
        principal: Principal | None,
        me: str | None,
        names: Mapping[str, str],
        lent: Callable[[DeviceView], bool] | None,
    ) -> tuple[list[DeviceView], list[dict[str, Any]]]:
        """:meth:`_usable_devices`, once a device the request may use is ready: when every
        device matching its selectors is on a bridge that dropped less than the grace period
        ago (a blip: it is expected back), the request waits for one to return — at most
        ``reconnect_wait_s`` and the request's own timeout — instead of being refused at once
        as ``bridge_unavailable``. Looked at every 0.2 s (the registry has no event for it)."""
        loop = asyncio.get_running_loop()
        limit = min(self.settings.reconnect_wait_s,
                    request.timeout_s or self.settings.default_timeout_s)
        until = loop.time() + limit
        while True:
            usable, refusals = await self._usable_devices(principal)
            named = select_devices(request.selectors or ["all"], usable, only_ready=False,
                                   me=me, owner_names=names, lent=lent)
            if not named or any(d.ready for d in named) or loop.time() >= until:
                return usable, refusals
            back_soon = {b.id for b in self.gateway.bridges() if b.reconnecting}
            if not any(d.bridge_id in back_soon for d in named):
                return usable, refusals
            await asyncio.sleep(0.2)

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
                        {"device": device.id, "code": exc.code.value, **small_detail(exc.data)}
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
    ) -> Abort:
        named = select_devices(selectors or ["all"], usable, only_ready=False, me=me,
                               owner_names=owner_names, lent=lent)
        if not named:
            what = ", ".join(selectors) or "any device"
            return Abort("no_device", f"no device matches {what}")
        if all(d.state == "paused" for d in named):
            return Abort("device_paused",
                          f"{named[0].id} is paused: its owner has paused sharing on its bridge")
        if all(d.state == "disconnected" for d in named):
            return Abort("bridge_unavailable", f"the bridge of {named[0].id} is not connected")
        return Abort("adb_unavailable", f"{named[0].id} is {named[0].state}")

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

    async def _run(self, plan: Plan, steps: StepLog, deadline: float) -> list[RunResult]:
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
            except Abort as abort:
                return [
                    pending_result(run_id, device, abort.reason_code, abort.detail)
                    for run_id, device in zip(plan.run_ids, plan.devices, strict=True)
                ]
        compile_started = time.monotonic()
        # One compile per builder: a builder every device may take APKs from when there is
        # one, else one per group of devices (see _build_groups).
        builds: dict[int, CompiledTest | Abort] = {}
        for builder, group in await self._build_groups(plan):
            try:
                outcome: CompiledTest | Abort = await self._compiled(
                    plan, steps, deadline, builder, [plan.devices[i] for i in group]
                )
            except Abort as abort:
                outcome = abort
            for i in group:
                builds[i] = outcome
        compile_ms = ms_since(compile_started)
        loop = asyncio.get_running_loop()
        user = plan.principal.user_id if plan.principal is not None else ""
        jobs: list[asyncio.Future[RunResult]] = []
        forks: dict[int, StepLog] = {}  # the runs that went to their device, by index
        for i, (run_id, device) in enumerate(zip(plan.run_ids, plan.devices, strict=True)):
            compiled = builds[i]
            if isinstance(compiled, Abort):
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
        results: list[RunResult] = []
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
                results[-1].builder = builder_of(build)
        for result in results:
            result.timings["compile_ms"] = compile_ms
        if plan.shards is not None:
            await self._retry_elsewhere(plan, forks, results, builds, deadline, user)
        return results

    async def _retry_elsewhere(
        self,
        plan: Plan,
        forks: Mapping[int, StepLog],
        results: list[RunResult],
        builds: Mapping[int, CompiledTest | Abort],
        deadline: float,
        user: str,
    ) -> None:
        """Sharded: each shard's failed or erring tests run again, alone, on the next shard's
        device (once); their outcome is folded into the shard's result. The retry installs
        that device's own build (from a builder allowed for it, like its shard's run)."""
        ran = [i for i in sorted(forks) if built(builds.get(i)) is not None]
        if len(ran) < 2:
            return
        jobs: list[Awaitable[RunResult]] = []
        where: list[tuple[int, DeviceView]] = []
        for index in ran:
            run_id, result = plan.run_ids[index], results[index]
            failed = [f"{t['class']}#{t['name']}" for t in result.tests
                      if t.get("status") in ("failed", "error") and t.get("name") != "null"]
            if not failed or run_id in self._cancelled:
                continue
            nxt = ran[(ran.index(index) + 1) % len(ran)]
            other, compiled = plan.devices[nxt], built(builds.get(nxt))
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
        them running in the same transaction. Asks again every ``QUOTA_POLL_S``: the runs
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
                raise Abort("timeout", "the run's deadline passed while the user's quota "
                             f"({quota.max_running} running runs) was full")
            await asyncio.sleep(min(QUOTA_POLL_S, max(deadline - loop.time(), 0.0)))
        if step is not None:
            await steps.end(step, "ok")

    def _lapse(self, run_id: str, reason: str) -> None:
        """The caller's right to this run lapsed (a token or loan revoked or expired): a
        queued run is cancelled, a running one stopped now — PENDING ``access_revoked``, its
        device cleaned up as after any cancel."""
        self._revoked.setdefault(run_id, reason)
        self.cancel(run_id, by="access lapsed")
