"""The run's step log: every RPC, fixer round and refusal, stored as it happens.

A :class:`StepLog` writes :class:`controller.store.RunStep` rows for one or several runs
(a compile shared by the runs of a fan-out is logged in each of them) and tells an optional
progress listener. A step is written when it starts (status ``running``) and updated when it
ends (``ok``, ``failed``, ``refused``, ``skipped``), so ``GET /v1/runs/{id}`` shows a run
that is still going. A store failure never fails the run: it is logged and the run goes on.
The writes go through the store's group commit (:mod:`controller.store.grouped`): the steps
of runs going on at once share transactions, and each write still returns once committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, insert, update

from controller.store import RunStep, Store, new_id, utcnow

__all__ = ["Progress", "Step", "StepLog", "StepStatus"]

log = logging.getLogger("droidwire.controller.executor")

StepStatus = str  # running | ok | failed | refused | skipped
# Detail values are cut so one step never holds a megabyte of compiler output.
MAX_DETAIL_TEXT = 4000


@dataclass(frozen=True, slots=True)
class Progress:
    """What a live view shows: ``stage`` (``compiling``, ``installing``, ``running``,
    ``collecting``, ``cleaning``, ``done``), with the compile round when compiling."""

    run_ids: tuple[str, ...]
    stage: str
    device: str | None = None
    round: int | None = None
    max_rounds: int | None = None
    detail: str | None = None


ProgressListener = Callable[[Progress], None]

# Core statements, one per kind of write, so the group commit sends a batch's rows of each
# as one executemany (controller.store.grouped); bound names differ from the columns'.
_BEGIN = insert(RunStep)
_END = (
    update(RunStep)
    .where(RunStep.run_id == bindparam("step_run"), RunStep.seq == bindparam("step_seq"))
    .values(status=bindparam("step_status"), detail=bindparam("step_detail"),
            finished_at=bindparam("step_finished_at"))
)


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_DETAIL_TEXT else value[:MAX_DETAIL_TEXT] + "…"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {str(k): _clip(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clip(v) for v in list(value)[:200]]
    return value


@dataclass(slots=True)
class Step:
    kind: str
    seq: int
    detail: dict[str, Any] = field(default_factory=dict)
    status: StepStatus = "running"


class StepLog:
    """Steps of the runs ``run_ids``; ``store`` None keeps them in memory only."""

    def __init__(
        self,
        store: Store | None,
        run_ids: Sequence[str],
        *,
        listener: ProgressListener | None = None,
        device: str | None = None,
        start_seq: int = 0,
    ) -> None:
        self.store = store
        self.run_ids = tuple(run_ids)
        self.listener = listener
        self.device = device
        self.steps: list[Step] = []
        self._seq = start_seq

    def fork(self, run_id: str, device: str | None) -> StepLog:
        """The log of one run of a fan-out, numbering on from here."""
        child = StepLog(
            self.store, [run_id], listener=self.listener, device=device, start_seq=self._seq
        )
        return child

    def progress(self, stage: str, **kw: Any) -> None:
        if self.listener is None:
            return
        try:
            self.listener(Progress(self.run_ids, stage, device=self.device, **kw))
        except Exception:  # a broken progress view must not break the run
            log.exception("progress listener failed")

    async def begin(self, kind: str, **detail: Any) -> Step:
        step = Step(kind, self._seq, _clip(detail))
        self._seq += 1
        self.steps.append(step)
        await self._write(step, new=True)
        return step

    async def end(self, step: Step, status: StepStatus, **detail: Any) -> None:
        step.status = status
        step.detail.update(_clip(detail))
        await self._write(step, new=False)

    async def record(self, kind: str, status: StepStatus, **detail: Any) -> Step:
        """A step that starts and ends at once (a refusal, a skip, a fixer round)."""
        step = Step(kind, self._seq, _clip(detail), status)
        self._seq += 1
        self.steps.append(step)
        await self._write(step, new=True, finished=True)
        return step

    async def _write(self, step: Step, *, new: bool, finished: bool = False) -> None:
        if self.store is None:
            return
        now = utcnow()
        detail = dict(step.detail)
        try:
            if new:
                await self.store.writes.execute(_BEGIN, [
                    {"id": new_id(), "run_id": run_id, "seq": step.seq, "kind": step.kind,
                     "status": step.status, "detail": detail, "created_at": now,
                     "finished_at": now if finished else None}
                    for run_id in self.run_ids
                ])
            else:
                await self.store.writes.execute(_END, [
                    {"step_run": run_id, "step_seq": step.seq, "step_status": step.status,
                     "step_detail": detail, "step_finished_at": now}
                    for run_id in self.run_ids
                ])
        except Exception:  # the store is the record, not the run: keep going
            log.exception("could not store step %s of runs %s", step.kind, self.run_ids)
