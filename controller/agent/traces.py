"""Traces and the agent's step log: every agent call, refused or not, is recorded.

A trace is a :class:`controller.store.Run` row whose ``request.kind`` is ``"agent"`` (so
``GET /v1/runs/{trace_id}`` shows it with its steps, like a sandbox run) plus its steps as
:class:`controller.store.RunStep` rows written through the executor's
:class:`~controller.executor.steps.StepLog` as they happen. One trace per tool call (``state``,
``ui``, ``screenshot``, ``actions``) or per instruction (``act``).

Evidence frames (PNG) are not put in the database: they stay in a bounded in-memory
:class:`FrameStore` (the last :data:`KEEP_TRACES` traces of this controller process) and the
steps link them by path (``/v1/agent/traces/{trace_id}/frames/{name}``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import update

from controller.executor.steps import Step, StepLog
from controller.store import Run, RunStatus, Store, new_id, utcnow

__all__ = ["KEEP_BYTES", "KEEP_TRACES", "FrameStore", "Trace", "TraceStore", "frame_path"]

log = logging.getLogger("droidwire.controller.agent")

KEEP_TRACES = 64
#: Bytes of frames kept at most (a real device's PNG is 1-3 MB): the oldest traces go first.
KEEP_BYTES = 256 * 1024 * 1024
FRAME_KEYS = ("at_action_png", "settled_png", "composite_png")


def frame_path(trace_id: str, name: str) -> str:
    return f"/v1/agent/traces/{trace_id}/frames/{name}"


@dataclass(slots=True)
class _Frames:
    user_id: str | None
    pngs: dict[str, bytes] = field(default_factory=dict)


class FrameStore:
    """PNG frames by trace, the newest :data:`KEEP_TRACES` traces only."""

    def __init__(self, keep: int = KEEP_TRACES, *, max_bytes: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.max_bytes = max_bytes
        self.bytes = 0
        self._traces: OrderedDict[str, _Frames] = OrderedDict()

    def put(self, trace_id: str, user_id: str | None, name: str, png: bytes) -> str:
        entry = self._traces.get(trace_id)
        if entry is None:
            entry = self._traces[trace_id] = _Frames(user_id)
        self.bytes += len(png) - len(entry.pngs.get(name, b""))
        entry.pngs[name] = png
        while len(self._traces) > 1 and (
            len(self._traces) > self.keep or self.bytes > self.max_bytes
        ):
            _, dropped = self._traces.popitem(last=False)
            self.bytes -= sum(len(p) for p in dropped.pngs.values())
        return frame_path(trace_id, name)

    def get(self, trace_id: str, name: str) -> tuple[str | None, bytes] | None:
        entry = self._traces.get(trace_id)
        if entry is None or name not in entry.pngs:
            return None
        return entry.user_id, entry.pngs[name]


class Trace:
    """One trace: its id, its step log, its frames."""

    def __init__(
        self, store: Store | None, frames: FrameStore, trace_id: str, user_id: str | None
    ) -> None:
        self.id = trace_id
        self.store = store
        self.frames = frames
        self.user_id = user_id
        self.log = StepLog(store, [trace_id])

    @property
    def steps(self) -> list[Step]:
        return self.log.steps

    async def record(self, kind: str, status: str, **detail: Any) -> Step:
        return await self.log.record(kind, status, **detail)

    def keep_frames(self, seq: int, result: dict[str, Any]) -> dict[str, str]:
        """Move the result's PNGs into the frame store; return their links by name."""
        links: dict[str, str] = {}
        for key in FRAME_KEYS:
            png = result.pop(key, None)
            if isinstance(png, bytes) and png:
                name = f"{seq}-{key.removesuffix('_png')}.png"
                links[key.removesuffix("_png")] = self.frames.put(self.id, self.user_id, name, png)
        return links

    def steps_json(self) -> list[dict[str, Any]]:
        return [
            {"seq": s.seq, "kind": s.kind, "status": s.status, **s.detail} for s in self.log.steps
        ]

    async def finish(self, *, ok: bool, summary: str, **result: Any) -> None:
        if self.store is None:
            return
        try:
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(Run)
                    .where(Run.id == self.id)
                    .values(
                        status=RunStatus.FINISHED.value,
                        result={"ok": ok, "summary": summary[:500], **result},
                        finished_at=utcnow(),
                    )
                )
        except Exception:  # the trace is a record: a store failure never fails the call
            log.exception("could not finish trace %s", self.id)


class TraceStore:
    """Opens traces (``store`` None: steps in memory only, for tests and tools)."""

    def __init__(self, store: Store | None, frames: FrameStore | None = None) -> None:
        self.store = store
        self.frames = frames or FrameStore()

    async def open(self, *, user_id: str | None, device: str, tool: str, **request: Any) -> Trace:
        trace_id = new_id()
        if self.store is not None:
            try:
                async with self.store.session() as session, session.begin():
                    session.add(
                        Run(
                            id=trace_id,
                            user_id=user_id,
                            status=RunStatus.RUNNING.value,
                            request={"kind": "agent", "tool": tool, "device_id": device, **request},
                            created_at=utcnow(),
                        )
                    )
            except Exception:
                log.exception("could not store trace %s", trace_id)
        return Trace(self.store, self.frames, trace_id, user_id)
