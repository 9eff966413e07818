"""Reads by key, coalesced: the keys asked for while a read is under way go in the next one.

After a controller restart thousands of bridges authenticate at once, each with one indexed
read of its token. One query per handshake is five hops to the database driver's worker
thread and back (SQLite: aiosqlite) and one pooled connection, per bridge — the event loop of
the controller spent its storm there (docs/benchmarks.md, "The reconnect storm"). A
:class:`BatchedReads` sends the keys waiting for it as one ``IN (…)`` query instead (at most
``max_keys``), and answers every waiter from its rows.

Freshness is what it was: a key is only ever answered by a read that *started after* it was
asked for (the one under way when it arrives is not used for it), so a row changed and
committed before the ask (a revoked token) is seen as changed. Nothing is cached.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from controller.store.store import Store

__all__ = ["BatchedReads", "ReadsPerStore"]

log = logging.getLogger("droidwire.controller.store")

R = TypeVar("R")

#: Keys per query: far below every backend's limit of bound parameters (SQLite: 32,766), and
#: few enough that turning its rows into results is a short turn of the event loop.
MAX_KEYS = 100
#: Waiters answered per turn of the event loop.
WAKE_AT_ONCE = 8


class BatchedReads(Generic[R]):
    """``await reads.get(key)``: the row ``fetch`` found for ``key``, or None.

    ``fetch(keys)`` reads the rows of up to ``max_keys`` distinct keys at once and returns
    them by key (a key without a row: absent). One fetch runs at a time per instance; a
    failed fetch fails exactly the waiters it was for, with its exception."""

    def __init__(
        self,
        fetch: Callable[[Sequence[str]], Awaitable[dict[str, R]]],
        *,
        max_keys: int = MAX_KEYS,
        wake_at_once: int = WAKE_AT_ONCE,
    ) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self._fetch = fetch
        self.max_keys = max_keys
        self.wake_at_once = max(1, wake_at_once)
        self._waiting: dict[str, list[asyncio.Future[R | None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fetches = 0  # queries made (tests, metrics)

    async def get(self, key: str) -> R | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (tests): start afresh
            self._loop, self._waiting, self._reader = loop, {}, None
        future: asyncio.Future[R | None] = loop.create_future()
        self._waiting.setdefault(key, []).append(future)
        if self._reader is None:
            self._reader = loop.create_task(self._read(), name="droidwire-batched-reads")
            self._reader.add_done_callback(self._ended)
        return await future

    def _ended(self, reader: asyncio.Task[None]) -> None:
        """The reader was cancelled before it ran (a loop's close; else :meth:`_read` let go
        itself): whoever waits fails instead of hanging, and the next ask starts a new one."""
        if self._reader is reader:
            self._reader = None
            waiting, self._waiting = self._waiting, {}
            _settle(waiting, None)

    async def _read(self) -> None:
        batch: dict[str, list[asyncio.Future[R | None]]] = {}
        try:
            while self._waiting:
                keys = list(self._waiting)[: self.max_keys]
                batch = {key: self._waiting.pop(key) for key in keys}
                live = [k for k, futures in batch.items() if not all(f.done() for f in futures)]
                if not live:
                    continue  # every one of them gave up (cancelled) meanwhile
                try:
                    self.fetches += 1
                    rows = await self._fetch(live)
                except Exception as exc:  # the store's error is each of these waiters' error
                    _settle(batch, exc)
                    continue
                woken = 0
                for key, futures in batch.items():
                    row = rows.get(key)
                    for future in futures:
                        if not future.done():
                            future.set_result(row)
                            woken += 1
                    if woken >= self.wake_at_once:
                        # What each waiter does next (a handshake: the rest of it) runs in
                        # the next turn of the event loop: a few at a time, so a large read
                        # does not become one long turn (timers late, the loop's delay up).
                        woken = 0
                        await asyncio.sleep(0)
        finally:
            # In the same step as the last look at the waiting keys: an ask from now on
            # starts a new reader. Cancelled (a loop closing): whoever waits fails, never hangs.
            self._reader = None
            waiting, self._waiting = self._waiting, {}
            _settle(batch, None)
            _settle(waiting, None)



class ReadsPerStore(Generic[R]):
    """One :class:`BatchedReads` per store, made at its first read: ``await reads.get(store,
    key)`` with ``fetch(store, keys)``. It does not keep a store alive (tests make many)."""

    def __init__(self, fetch: Callable[[Store, Sequence[str]], Awaitable[dict[str, R]]]) -> None:
        self._fetch = fetch
        self._reads: weakref.WeakKeyDictionary[Store, BatchedReads[R]] = (
            weakref.WeakKeyDictionary())

    async def get(self, store: Store, key: str) -> R | None:
        return await self.of(store).get(key)

    def of(self, store: Store) -> BatchedReads[R]:
        """The store's reads (made now if it has none yet)."""
        reads = self._reads.get(store)
        if reads is None:
            reads = self._reads[store] = BatchedReads(self._bound(weakref.ref(store)))
        return reads

    def _bound(self, ref: weakref.ref[Store]
               ) -> Callable[[Sequence[str]], Awaitable[dict[str, R]]]:
        """``fetch`` for the store ``ref`` points to, without a strong reference to it (the
        map's value would otherwise keep its own key alive)."""
        async def fetch(keys: Sequence[str]) -> dict[str, R]:
            store = ref()
            return {} if store is None else await self._fetch(store, keys)
        return fetch


def _settle(batch: dict[str, list[asyncio.Future[R | None]]], exc: Exception | None) -> None:
    """Every waiter of ``batch`` not answered yet fails with ``exc`` (None: is cancelled)."""
    for futures in batch.values():
        for future in futures:
            if not future.done():
                if exc is None:
                    future.cancel()
                else:
                    future.set_exception(exc)
