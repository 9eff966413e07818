"""Restart recovery: no run stays ``running`` after the controller that ran it is gone.

A sandbox run lives in its controller's memory (its compile loop, its place in a device's
queue, the RPC it waits for). When that process dies — ``kill -9``, a crash, a host reboot —
its runs' rows still say ``queued`` or ``running``. At start-up the controller ends every such
run whose controller process is gone: a PENDING result, ``reason_code``
``controller_restarted``, summary ``Inconclusive: controller_restarted (…)`` naming the step
that was under way, status ``finished``, and its unfinished steps closed as ``failed``.

Why not resume: the bridge does keep the result of an RPC in flight and re-sends it when the
controller still waits for that request id (DESIGN.md §3), but the rest of the run — the
fix loop's state, the device's queue, the cleanup owed — died with the process. Ending the
run says so honestly; re-running it is one ``droidwire run`` away. The bridge drops the held
result when the new controller's ``welcome`` does not list it.

Each run's request record names its controller process (``controller``: the executor's
``instance``). A single controller ends every run not its own. In a cluster, replicas share
the database: a run is ended only when its replica is no longer alive (``alive``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select, update

from controller.executor.results import pending_result
from controller.store import Run, RunStatus, RunStep, Store, utcnow

__all__ = ["REASON", "recover_runs"]

log = logging.getLogger("droidwire.controller.executor.recovery")

REASON = "controller_restarted"

Alive = Callable[[str], Awaitable[bool]]


async def recover_runs(store: Store, *, instance: str, alive: Alive | None = None) -> list[str]:
    """End the runs left ``queued``/``running`` by controller processes that are gone; their
    ids. ``instance`` is this process (its runs are left alone); ``alive(instance)`` says
    whether another replica is still up (None: no other replica exists)."""
    ended: list[str] = []
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
        await _end(store, run)
        ended.append(run.id)
    if ended:
        log.warning("ended %d runs left unfinished by a controller restart: %s",
                    len(ended), ended)
    return ended


async def _end(store: Store, run: Run) -> None:
    async with store.session() as session, session.begin():
        open_steps = (
            await session.execute(
                select(RunStep)
                .where(RunStep.run_id == run.id, RunStep.status == "running")
                .order_by(RunStep.seq)
            )
        ).scalars().all()
        where = _describe(open_steps[-1]) if open_steps else f"while {run.status}"
        device: dict[str, Any] | None = None
        device_id = (run.request or {}).get("device_id")
        if device_id:
            device = {"id": device_id}
        result = pending_result(run.id, None, REASON, f"the controller stopped {where}")
        result["device"] = device
        now = utcnow()
        await session.execute(
            update(RunStep)
            .where(RunStep.run_id == run.id, RunStep.status == "running")
            .values(status="failed", finished_at=now)
        )
        seq = max((s.seq for s in open_steps), default=-1)
        last = (
            await session.execute(
                select(RunStep.seq).where(RunStep.run_id == run.id).order_by(RunStep.seq.desc())
            )
        ).scalars().first()
        session.add(
            RunStep(
                run_id=run.id,
                seq=max(seq, last if last is not None else -1) + 1,
                kind="recovery",
                status="failed",
                detail={"reason": REASON, "detail": f"the controller stopped {where}"},
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
                verdict=result["verification_status"],
                result=result,
                finished_at=now,
            )
        )


def _describe(step: RunStep) -> str:
    detail = step.detail or {}
    if step.kind == "rpc" and detail.get("method"):
        return f"during {detail['method']}"
    return f"during {step.kind}"
