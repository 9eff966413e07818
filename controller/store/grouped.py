"""Small writes, committed together: the writes asked for while a commit is under way go in the
next one (group commit).

A sandbox run writes a row of its step log when each step starts and updates it when the step
ends, about seventeen single-row transactions per run (docs/sandbox.md). Each was a pooled
connection's checkout and ping, ``BEGIN``, the statement, ``COMMIT`` and the database's flush
of its log: measured per run, about half of a controller replica's CPU and of PostgreSQL's
(docs/benchmarks.md, "Where a run's CPU goes"). Runs that go on at once — a fan-out's
devices, a fleet's — now share those transactions: :class:`GroupedWrites` sends the writes
waiting for it in **one** transaction, consecutive writes of the same statement as one
``executemany``.

What a writer is told is what it was: ``await writes.execute(...)`` returns once its rows are
committed, and raises the error of its own rows only. A batch that fails is written again one
write per transaction, so one bad row (a run deleted meanwhile) fails its own write and no
other. Writes are committed in the order they were asked for. A write whose caller is
cancelled meanwhile is still committed (its step did begin): the caller only stops waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.base import Executable

__all__ = ["GroupedWrites"]

log = logging.getLogger("droidwire.controller.store")

#: Rows per transaction: a large backlog (a fan-out to hundreds of devices) is written in
#: several, none of which holds the database's write lock for long.
MAX_ROWS = 100


@dataclass(slots=True)
class _Write:
    statement: Executable
    rows: list[dict[str, Any]]
    done: asyncio.Future[None]


class GroupedWrites:
    """``await writes.execute(statement, rows)``: ``statement`` executed for each of ``rows``
    (bound parameters by name), committed in one transaction with the writes waiting at the
    same moment. One transaction at a time per instance."""

    def __init__(self, engine: AsyncEngine, *, max_rows: int = MAX_ROWS) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        self.engine = engine
        self.max_rows = max_rows
        self._waiting: deque[_Write] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.transactions = 0  # committed or tried (tests, metrics)

    async def execute(self, statement: Executable,
                      rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (tests): start afresh
            self._loop, self._waiting, self._writer = loop, deque(), None
        write = _Write(statement, [dict(r) for r in rows], loop.create_future())
        self._waiting.append(write)
        if self._writer is None:
            self._writer = loop.create_task(self._write(), name="droidwire-grouped-writes")
        try:
            # The caller may be cancelled; the write is not: it is committed all the same.
            await asyncio.shield(write.done)
        except asyncio.CancelledError:
            write.done.add_done_callback(_retrieved)  # no one waits for its outcome now
            raise

    async def close(self) -> None:
        """Wait for the writes asked for so far (the store calls it before its engine goes)."""
        writer = self._writer
        if writer is not None and self._loop is asyncio.get_running_loop():
            await asyncio.wait([writer])

    async def _write(self) -> None:
        batch: list[_Write] = []
        try:
            while self._waiting:
                batch, size = [], 0
                while self._waiting and (not batch or
                                         size + len(self._waiting[0].rows) <= self.max_rows):
                    write = self._waiting.popleft()
                    batch.append(write)
                    size += len(write.rows)
                try:
                    await self._commit(batch)
                except Exception as exc:
                    if len(batch) == 1:
                        _settle(batch[0], exc)
                        continue
                    log.debug("a grouped write failed (%r); writing them one by one", exc)
                    for write in batch:
                        try:
                            await self._commit([write])
                        except Exception as one:  # its own error, no one else's
                            _settle(write, one)
                        else:
                            _settle(write, None)
                    continue
                for write in batch:
                    _settle(write, None)
        finally:
            # In the same step as the last look at the queue: a write from now on starts a
            # new writer. Cancelled (a loop closing): whoever waits fails, never hangs.
            self._writer = None
            waiting, self._waiting = self._waiting, deque()
            for write in [*batch, *waiting]:
                if not write.done.done():
                    write.done.cancel()

    async def _commit(self, batch: list[_Write]) -> None:
        self.transactions += 1
        async with self.engine.begin() as conn:
            i = 0
            while i < len(batch):
                statement, rows = batch[i].statement, list(batch[i].rows)
                i += 1
                while i < len(batch) and batch[i].statement is statement:
                    rows += batch[i].rows
                    i += 1
                await conn.execute(statement, rows if len(rows) > 1 else rows[0])


def _retrieved(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()


def _settle(write: _Write, exc: Exception | None) -> None:
    if write.done.done():
        return
    if exc is None:
        write.done.set_result(None)
    else:
        write.done.set_exception(exc)
