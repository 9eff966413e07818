"""Traces and the agent's step log: every agent call, refused or not, is recorded.

A trace is a :class:`controller.store.Run` row whose ``request.kind`` is ``"agent"`` (so
``GET /v1/runs/{trace_id}`` shows it with its steps, like a sandbox run) plus its steps as
:class:`controller.store.RunStep` rows written through the executor's
:class:`~controller.executor.steps.StepLog` as they happen. One trace per tool call (``state``,
``ui``, ``screenshot``, ``actions``) or per instruction (``act``).

Evidence frames (PNG) live in the store too, as :class:`controller.store.Frame` rows
(:class:`DbFrameStore`), so they outlive a controller restart and every replica of a cluster
serves them; the steps link them by path (``/v1/agent/traces/{trace_id}/frames/{name}``).
Retention: the frames of the newest ``keep`` traces (default :data:`KEEP_TRACES`) and at most
``max_bytes`` of PNG (default :data:`KEEP_BYTES`); beyond either bound the traces whose last
frame is oldest lose all their frames, never the trace being written. A frame larger than
``max_bytes`` on its own is not kept. The bound is enforced after each insert, in a
transaction of its own: replicas writing at once may exceed it briefly, by the frames written
concurrently, until the next insert. Without a store (tests, tools), :class:`MemoryFrameStore`
keeps the same bounds in this process's memory.

Keeping a frame never fails the agent call: a frame that could not be kept (too large, the
store failing) is logged, has no link, and the step says why under ``frames_not_kept``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controller.config import DEFAULT_AGENT_FRAME_BYTES, DEFAULT_AGENT_FRAME_TRACES
from controller.executor.steps import Step, StepLog
from controller.store import Frame, Run, RunStatus, Store, new_id, utcnow

__all__ = [
    "KEEP_BYTES",
    "KEEP_TRACES",
    "DbFrameStore",
    "FrameNotKept",
    "FrameStore",
    "MemoryFrameStore",
    "StoredFrame",
    "Trace",
    "TraceStore",
    "frame_path",
]

log = logging.getLogger("droidwire.controller.agent")

KEEP_TRACES = DEFAULT_AGENT_FRAME_TRACES
#: Bytes of frames kept at most (a real device's PNG is 1-3 MB): the oldest traces go first.
KEEP_BYTES = DEFAULT_AGENT_FRAME_BYTES
FRAME_KEYS = ("at_action_png", "settled_png", "composite_png", "screenshot_png")


def frame_path(trace_id: str, name: str) -> str:
    return f"/v1/agent/traces/{trace_id}/frames/{name}"


class FrameNotKept(Exception):
    """A frame the store declined (not a failure of the store): ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StoredFrame:
    """A kept frame: its trace's owner (None: admins only), the PNG, and its SHA-256 (hex)."""

    user_id: str | None
    png: bytes
    sha256: str


class FrameStore(Protocol):
    """Where a trace's frames are kept, bounded by traces (``keep``) and bytes (``max_bytes``)."""

    keep: int
    max_bytes: int

    async def put(self, trace_id: str, user_id: str | None, name: str, png: bytes) -> None:
        """Keep ``png``; raise :class:`FrameNotKept` if it may not be, anything on failure."""
        ...

    async def get(self, trace_id: str, name: str) -> StoredFrame | None: ...


def _check_size(png: bytes, max_bytes: int) -> None:
    if len(png) > max_bytes:
        raise FrameNotKept(f"{len(png)} bytes, more than the {max_bytes} bytes kept in all")


def _to_drop(
    newest_first: list[tuple[str, int]], current: str, keep: int, max_bytes: int
) -> list[str]:
    """The traces to drop: beyond the first that would break a bound, newest first, all go.

    ``newest_first`` is ``(trace_id, bytes)`` per trace; ``current`` is always kept.
    """
    ordered = sorted(newest_first, key=lambda entry: entry[0] != current)  # stable
    count = total = 0
    for i, (_, size) in enumerate(ordered):
        count, total = count + 1, total + size
        if i > 0 and (count > keep or total > max_bytes):
            return [trace_id for trace_id, _ in ordered[i:]]
    return []


@dataclass(slots=True)
class _Frames:
    user_id: str | None
    pngs: dict[str, StoredFrame] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(len(f.png) for f in self.pngs.values())


class MemoryFrameStore:
    """Frames in this process's memory, the newest :data:`KEEP_TRACES` traces only."""

    def __init__(self, keep: int = KEEP_TRACES, *, max_bytes: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.max_bytes = max_bytes
        self.bytes = 0
        self._traces: OrderedDict[str, _Frames] = OrderedDict()

    async def put(self, trace_id: str, user_id: str | None, name: str, png: bytes) -> None:
        _check_size(png, self.max_bytes)
        entry = self._traces.get(trace_id)
        if entry is None:
            entry = self._traces[trace_id] = _Frames(user_id)
        self._traces.move_to_end(trace_id)
        old = entry.pngs.get(name)
        self.bytes += len(png) - (len(old.png) if old else 0)
        entry.pngs[name] = StoredFrame(user_id, png, hashlib.sha256(png).hexdigest())
        sizes = [(t, e.bytes) for t, e in reversed(self._traces.items())]
        for dropped in _to_drop(sizes, trace_id, self.keep, self.max_bytes):
            self.bytes -= self._traces.pop(dropped).bytes

    async def get(self, trace_id: str, name: str) -> StoredFrame | None:
        entry = self._traces.get(trace_id)
        return None if entry is None else entry.pngs.get(name)


class DbFrameStore:
    """Frames as :class:`controller.store.Frame` rows, shared by every replica on the store.

    One transaction inserts the frame; another then deletes the frames of the traces beyond
    the bounds (:func:`_to_drop`, traces ordered by their newest frame). A failure of the
    second is logged only: the frame is kept, and the next insert prunes again. The database
    drivers are asynchronous (asyncpg; aiosqlite in its thread) and the hash runs in a thread,
    so a multi-megabyte PNG does not hold the event loop.
    """

    def __init__(
        self, store: Store, keep: int = KEEP_TRACES, *, max_bytes: int = KEEP_BYTES
    ) -> None:
        self.store = store
        self.keep = keep
        self.max_bytes = max_bytes

    async def put(self, trace_id: str, user_id: str | None, name: str, png: bytes) -> None:
        _check_size(png, self.max_bytes)
        digest = await asyncio.to_thread(lambda: hashlib.sha256(png).hexdigest())
        async with self.store.session() as session:
            async with session.begin():  # Core, not the ORM: no session keeps the bytes
                await session.execute(
                    insert(Frame).values(
                        id=new_id(),
                        run_id=trace_id,
                        name=name,
                        user_id=user_id,
                        size=len(png),
                        sha256=digest,
                        created_at=utcnow(),
                        png=png,
                    )
                )
            try:
                async with session.begin():
                    await self._prune(session, trace_id)
            except Exception:  # the frame is kept; the next insert prunes again
                log.warning("could not prune agent frames after trace %s", trace_id, exc_info=True)

    async def _prune(self, session: AsyncSession, current: str) -> None:
        newest = func.max(Frame.created_at)
        rows = (
            await session.execute(
                select(Frame.run_id, func.sum(Frame.size))
                .group_by(Frame.run_id)
                .order_by(newest.desc(), Frame.run_id.desc())
            )
        ).all()
        dropped = _to_drop([(r[0], int(r[1])) for r in rows], current, self.keep, self.max_bytes)
        if dropped:
            await session.execute(delete(Frame).where(Frame.run_id.in_(dropped)))
            log.debug("dropped the frames of %d old agent traces", len(dropped))

    async def get(self, trace_id: str, name: str) -> StoredFrame | None:
        async with self.store.session() as session:
            row = (
                await session.execute(
                    select(Frame.user_id, Frame.png, Frame.sha256).where(
                        Frame.run_id == trace_id, Frame.name == name
                    )
                )
            ).first()
        return None if row is None else StoredFrame(row[0], bytes(row[1]), row[2])


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

    async def keep_frames(self, seq: int, result: dict[str, Any]) -> dict[str, Any]:
        """Keep the result's PNGs; return the step's detail about them: ``frames`` (links by
        name) and, if any could not be kept, ``frames_not_kept`` (the reason by name).

        Never raises for a frame: the call goes on without it (module docstring)."""
        links: dict[str, str] = {}
        missing: dict[str, str] = {}
        for key in FRAME_KEYS:
            png = result.get(key)
            if not (isinstance(png, bytes) and png):
                continue
            kind = key.removesuffix("_png")
            name = f"{seq}-{kind}.png"
            try:
                await self.frames.put(self.id, self.user_id, name, png)
            except FrameNotKept as exc:
                log.warning("trace %s: frame %s not kept: %s", self.id, name, exc.reason)
                missing[kind] = exc.reason
            except Exception:
                log.exception("trace %s: could not store frame %s", self.id, name)
                missing[kind] = "the store failed"
            else:
                links[kind] = frame_path(self.id, name)
        return {"frames": links, "frames_not_kept": missing} if missing else {"frames": links}

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
        if frames is None:
            frames = MemoryFrameStore() if store is None else DbFrameStore(store)
        self.frames: FrameStore = frames

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
