"""Restart recovery: no run stays ``running`` after the controller that ran it is gone.

A sandbox run lives in its controller's memory (its compile loop, its place in a device's
queue, the RPC it waits for). When that process dies — ``kill -9``, a crash, a host reboot —
its runs' rows still say ``queued`` or ``running``. At start-up the controller ends every such
run whose controller process is gone: a PENDING result, ``reason_code``
``controller_restarted``, summary ``Inconclusive: controller_restarted (…)`` naming the step
that was under way, status ``finished``, and its unfinished steps closed as ``failed``.

The cleanup a dead run owed is still done: the packages its steps installed and did not
uninstall are listed in the run's ``recovery`` step, and :func:`clean_up` uninstalls them
once the device's bridge is back (the bridge's policy lets it: it installed them).

Resuming: the bridge keeps the result of an RPC in flight and re-sends it when the new
controller's ``welcome`` lists its request id (docs/design.md §3). The executor records, in a
run's ``device.instrument`` step, the request id and the bridge session it went out on; a run
cut during that step is handed to ``resume`` (``SandboxExecutor.resume``), which adopts the
request before the bridge is back and finishes the run — logcat, cleanup, verdict — with the
held result. The request is never sent again: a bridge that restarted (another session) or no
longer holds the result makes it fail, and the run ends PENDING as above, cleanup included.
Everything else (the fix loop, the device queue) died with the process: those runs end.

Each run's request record names its controller process (``controller``: the executor's
``instance``). A single controller ends every run not its own. In a cluster, replicas share
the database: a run is recovered only when its replica is no longer alive (``alive``), by the
survivor that noticed the death or a replica starting up. Either first *takes* the run: one
conditional UPDATE renames its controller only while it still names the dead one, so exactly
one process ends or resumes it. A resumed run's result reaches its adopter whichever replica
the bridge reconnects to: the wait is shared in Redis from the moment the request is sent,
listed in any replica's ``welcome`` and relayed to the waiter (``controller.cluster``,
docs/cluster.md "How the held result finds the adopter").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select, update

from controller.executor.gateway import Gateway, all_devices
from controller.executor.results import pending_result
from controller.executor.steps import StepLog
from controller.store import Run, RunStatus, RunStep, Store, utcnow
from protocol.errors import RpcError
from protocol.methods import INSTALL, INSTRUMENT, UNINSTALL

__all__ = [
    "REASON",
    "Recovered",
    "Restart",
    "Resumable",
    "clean_up",
    "end_run",
    "recover_runs",
    "restartable",
]

log = logging.getLogger("droidwire.controller.executor.recovery")

REASON = "controller_restarted"

Alive = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Recovered:
    """A run ended by recovery, and the cleanup it still owes its device."""

    run_id: str
    device: str | None  # BRIDGE~SERIAL
    packages: list[str] = field(default_factory=list)  # to uninstall, test package first
    next_seq: int = 0  # the run's next step number
    resumed: Awaitable[None] | None = None  # not ended: resuming (await it, in the background)
    user_id: str | None = None  # whose run it was (the device's owner may clean up as owner)


class ResumedDevice(BaseModel):
    """The device a resumed run is on, as its instrument step recorded it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    bridge_id: str
    bridge_name: str
    owner_id: str
    serial: str
    info: dict[str, Any] = Field(default_factory=dict)  # DeviceInfo fields


class ResumeContext(BaseModel):
    """What a run needs to be finished by another controller process after its tests ran:
    written with its instrument step (``detail["resume"]``), read back by :func:`resumable`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    device: ResumedDevice
    app_package: str | None = None
    installed: list[str] = Field(default_factory=list)  # what the run put on the device
    app_new: bool = False  # the app was not on the device before: its data may be cleared
    toolchain: str | None = None
    builder: dict[str, Any] | None = None  # {"id", "name", "shared"} of the build bridge
    compile_rounds: list[dict[str, Any]] = Field(default_factory=list)
    test_class: str | None = None
    timings: dict[str, int] = Field(default_factory=dict)  # phases so far, ms
    # What a resumed run needs to retry failed tests within the budget.
    test_package: str | None = None
    retries: int = 0
    deadline_unix: float = 0.0


@dataclass(frozen=True, slots=True)
class Resumable:
    """A dead controller's run waiting for its instrumentation's result, which the bridge
    may still hold: the request id and bridge session the executor recorded in its step."""

    run_id: str
    step_seq: int  # the instrument step
    detail: dict[str, Any]  # that step's detail (request_id, bridge_session, params, resume)
    next_seq: int
    done: bool = False  # the instrumentation ended and its result is in ``detail["result"]``

    @property
    def request_id(self) -> str:
        return str(self.detail["request_id"])

    @property
    def bridge_session(self) -> str:
        return str(self.detail["bridge_session"])

    @property
    def context(self) -> ResumeContext:
        return ResumeContext.model_validate(self.detail["resume"])


Resume = Callable[[Resumable], Awaitable[None] | None]
#: ``restart(run, next_seq)``: continue a dead controller's run from the start here, or None.
Restart = Callable[[Run, int], Awaitable[None] | None]


def restartable(run: Run, steps: Sequence[RunStep]) -> bool:
    """Whether the run can start over on another controller without its tests running twice
    on a device: no instrumentation was ever sent for it, it names its one device, and its
    whole request was kept (not prebuilt APKs, which are never stored; not a sharded run)."""
    request = run.request or {}
    if not isinstance(request.get("test_code"), str) or not isinstance(
            request.get("device_id"), str):
        return False
    if request.get("apks") is not None or "classes" in request or request.get("kind"):
        return False
    return not any(s.kind == "rpc" and (s.detail or {}).get("method") == INSTRUMENT.name
                   for s in steps)


def resumable(run: Run, steps: Sequence[RunStep]) -> Resumable | None:
    """The run, if its step under way is an instrumentation a restarted controller can wait
    for again (its request id and bridge session recorded), else None."""
    if run.status != RunStatus.RUNNING.value:
        return None
    instruments = [s for s in steps
                   if s.kind == "rpc" and (s.detail or {}).get("method") == INSTRUMENT.name]
    open_steps = [s for s in steps if s.status == "running"]
    done = False
    if open_steps and open_steps[-1] in instruments:
        step = open_steps[-1]  # the tests run (or ran) on the device: wait for their result
    elif len(instruments) == 1 and instruments[0].status == "ok" and isinstance(
            (instruments[0].detail or {}).get("result"), dict):
        step, done = instruments[0], True  # they ran, their result recorded: finish the run
    else:
        return None
    detail = step.detail or {}
    if not (isinstance(detail.get("request_id"), str) and isinstance(
            detail.get("bridge_session"), str)):
        return None
    try:
        ResumeContext.model_validate(detail.get("resume"))
    except ValidationError:
        return None
    return Resumable(run.id, step.seq, dict(detail), max(s.seq for s in steps) + 1, done)


async def recover_runs(
    store: Store, *, instance: str, alive: Alive | None = None, resume: Resume | None = None,
    restart: Restart | None = None,
) -> list[Recovered]:
    """End the runs left ``queued``/``running`` by controller processes that are gone.
    ``instance`` is this process (its runs are left alone); ``alive(instance)`` says whether
    another replica is still up (None: no other replica exists). ``resume(item)`` takes over a
    run waiting for a result its bridge may still hold: it returns what finishes the run (the
    run is then not ended here, ``Recovered.resumed``), or None (ended as any other).
    ``restart(run, next_seq)`` continues a run that never reached its instrumentation
    (:func:`restartable`) from the start, the same way."""
    ended: list[Recovered] = []
    async with store.session() as session:
        runs = (
            await session.execute(
                select(Run).where(Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]))
            )
        ).scalars().all()
    for run in runs:
        owner = str((run.request or {}).get("controller") or "")
        if owner == instance:
            continue
        if alive is not None and owner and await alive(owner):
            continue
        if not await _take(store, run, owner, instance):
            continue  # another replica took it over first
        if resume is not None or restart is not None:
            async with store.session() as session:
                steps = (await session.execute(
                    select(RunStep).where(RunStep.run_id == run.id).order_by(RunStep.seq)
                )).scalars().all()
            item = resumable(run, steps)
            resumed = resume(item) if item is not None and resume is not None else None
            if resumed is not None:
                log.warning("run %s: waiting for the result its bridge holds", run.id)
                ended.append(Recovered(run.id, None, [], item.next_seq if item else 0, resumed))
                continue
            if restart is not None and restartable(run, steps):
                next_seq = max((s.seq for s in steps), default=-1) + 1
                continued = restart(run, next_seq)
                if continued is not None:
                    log.warning("run %s: continued here from the start", run.id)
                    ended.append(Recovered(run.id, None, [], next_seq, continued))
                    continue
        ended.append(await _end(store, run))
    if ended:
        log.warning("recovered %d runs a gone controller left unfinished: %s ended, %s resuming",
                    len(ended), [r.run_id for r in ended if r.resumed is None],
                    [r.run_id for r in ended if r.resumed is not None])
    return ended


async def _take(store: Store, run: Run, owner: str, instance: str) -> bool:
    """Make ``run`` this process's own, if it still names ``owner``: one conditional UPDATE,
    so of two replicas recovering a dead one's runs at once, exactly one ends or resumes it."""
    named = Run.request["controller"].as_string()
    async with store.session() as session, session.begin():
        taken = await session.execute(
            update(Run)
            .where(
                Run.id == run.id,
                Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]),
                (named == owner) if owner else named.is_(None),
            )
            .values(request={**(run.request or {}), "controller": instance})
            .execution_options(synchronize_session=False)
        )
    return bool(taken.rowcount)  # type: ignore[attr-defined]


def _owed(steps: Sequence[RunStep]) -> list[str]:
    """Packages the run's steps installed and did not uninstall, the last installed first."""
    installed: list[str] = []
    for s in steps:
        detail = s.detail or {}
        if s.kind != "rpc" or s.status != "ok":
            continue
        if detail.get("method") == INSTALL.name and detail.get("package"):
            installed.append(str(detail["package"]))
        elif detail.get("method") == UNINSTALL.name:
            package = (detail.get("params") or {}).get("package")
            if package in installed:
                installed.remove(package)
    return list(reversed(installed))


async def end_run(store: Store, run_id: str, why: str) -> Recovered | None:
    """End one run PENDING ``controller_restarted`` (a resumption that failed), if still
    unfinished; None if it is not."""
    async with store.session() as session:
        run = await session.get(Run, run_id)
    if run is None or run.status not in (RunStatus.QUEUED.value, RunStatus.RUNNING.value):
        return None
    return await _end(store, run, why)


async def _end(store: Store, run: Run, why: str | None = None) -> Recovered:
    async with store.session() as session, session.begin():
        steps = (
            await session.execute(
                select(RunStep).where(RunStep.run_id == run.id).order_by(RunStep.seq)
            )
        ).scalars().all()
        open_steps = [s for s in steps if s.status == "running"]
        where = _describe(open_steps[-1]) if open_steps else f"while {run.status}"
        if why:
            where = f"{where}; {why}"
        device: dict[str, Any] | None = None
        device_id = (run.request or {}).get("device_id")
        if device_id:
            device = {"id": device_id}
        result = pending_result(run.id, None, REASON, f"the controller stopped {where}")
        result.device = device
        now = utcnow()
        await session.execute(
            update(RunStep)
            .where(RunStep.run_id == run.id, RunStep.status == "running")
            .values(status="failed", finished_at=now)
        )
        seq = max((s.seq for s in steps), default=-1) + 1
        owed = _owed(steps) if device_id else []
        detail: dict[str, Any] = {"reason": REASON, "detail": f"the controller stopped {where}"}
        if owed:
            detail["cleanup"] = {"device": device_id, "packages": owed}
        session.add(
            RunStep(
                run_id=run.id,
                seq=seq,
                kind="recovery",
                status="failed",
                detail=detail,
                created_at=now,
                finished_at=now,
            )
        )
        # Only a row still unfinished is ended: a replica finishing it meanwhile wins.
        await session.execute(
            update(Run)
            .where(
                Run.id == run.id,
                Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]),
            )
            .values(
                status=RunStatus.FINISHED.value,
                verdict=result.verification_status,
                result=result.to_json(),
                finished_at=now,
            )
        )


    return Recovered(run.id, str(device_id) if device_id else None, owed, seq + 1,
                     user_id=run.user_id)


async def clean_up(
    gateway: Gateway,
    store: Store | None,
    owed: Sequence[Recovered],
    *,
    wait_s: float,
    poll_s: float = 0.25,
    call_timeout_s: float = 30.0,
    turn: Callable[[str, str], AbstractAsyncContextManager[None]] | None = None,
) -> None:
    """Uninstall what recovered runs left on their devices, each once its device is ready
    again (its bridge reconnected), for at most ``wait_s``; a step in each run says how it
    went. The hub has no "device ready" event, so its registry is looked at every ``poll_s``.
    ``turn(device_id, run_id)``: the device's turn, held while uninstalling, so the cleanup
    never pulls the app from under a run using the device (one continued on a survivor).
    """
    pending = [r for r in owed if r.device and r.packages]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while pending:
        ready = {d.id: d for d in await all_devices(gateway) if d.ready}  # any replica's
        for item in [r for r in pending if r.device in ready]:
            pending.remove(item)
            device = ready[str(item.device)]
            removed, failed = [], []
            async with (turn(device.id, item.run_id) if turn is not None
                        else contextlib.nullcontext()):
                for package in item.packages:
                    try:
                        # The run's own packages (device-learned, new to the device: the steps
                        # record no other); the bridge may have restarted and forgotten them,
                        # so the owner's own run cleans up as the owner (docs/security.md).
                        mine = item.user_id is not None and item.user_id == device.owner_id
                        params = UNINSTALL.parse_params(
                            {"serial": device.serial, "package": package,
                             **({"as_owner": True} if mine else {})})
                        await gateway.call(
                            device.ref, UNINSTALL, params, timeout_s=call_timeout_s
                        )
                        removed.append(package)
                    except RpcError as exc:
                        failed.append(f"{package}: {exc.code.value}")
            await _note(store, item, "ok" if not failed else "failed",
                        device=item.device, removed=removed, failed=failed)
        if not pending:
            return
        if loop.time() >= deadline:
            for item in pending:
                await _note(store, item, "failed", device=item.device,
                            detail="the device did not come back", packages=item.packages)
            return
        await asyncio.sleep(poll_s)


async def _note(store: Store | None, item: Recovered, status: str, **detail: Any) -> None:
    with contextlib.suppress(Exception):
        await StepLog(store, [item.run_id], start_seq=item.next_seq).record(
            "cleanup", status, **detail
        )


def _describe(step: RunStep) -> str:
    detail = step.detail or {}
    if step.kind == "rpc" and detail.get("method"):
        return f"during {detail['method']}"
    return f"during {step.kind}"
