"""Reads by key, coalesced (controller.store.batched): keys asked for while a read is under way
share the next read; none is answered by a read that started before it was asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from controller.store.batched import BatchedReads


class Table:
    """A fake store: ``fetch`` records the keys of each read and waits for ``release``."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.reads: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail: Exception | None = None

    async def fetch(self, keys: Sequence[str]) -> dict[str, int]:
        self.reads.append(list(keys))
        snapshot = {k: self.rows[k] for k in keys if k in self.rows}  # read when it starts
        await self.release.wait()
        failure, self.fail = self.fail, None  # one read fails
        if failure is not None:
            raise failure
        return snapshot


async def test_keys_asked_together_share_one_read() -> None:
    table = Table()
    table.rows = {f"k{i}": i for i in range(50)}
    reads = BatchedReads(table.fetch)
    got = await asyncio.gather(*(reads.get(f"k{i}") for i in range(60)), reads.get("k3"))
    assert got == [*range(50), *[None] * 10, 3]
    assert len(table.reads) == 1 and sorted(table.reads[0]) == sorted(f"k{i}" for i in range(60))


async def test_a_read_takes_at_most_max_keys() -> None:
    table = Table()
    reads = BatchedReads(table.fetch, max_keys=7)
    await asyncio.gather(*(reads.get(f"k{i}") for i in range(20)))
    assert [len(r) for r in table.reads] == [7, 7, 6]


async def test_a_key_asked_during_a_read_gets_the_next_read() -> None:
    """Freshness: a row changed before the ask (a token revoked) is seen changed, even though
    a read that started before the change was still under way when it was asked."""
    table = Table()
    table.rows = {"a": 1}
    reads = BatchedReads(table.fetch)
    table.release.clear()
    first = asyncio.ensure_future(reads.get("a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert table.reads == [["a"]]  # under way, with the old row
    del table.rows["a"]  # changed (committed) now
    second = asyncio.ensure_future(reads.get("a"))
    await asyncio.sleep(0)
    table.release.set()
    assert await first == 1
    assert await second is None
    assert table.reads == [["a"], ["a"]]


async def test_a_failed_read_fails_its_waiters_only_and_the_next_read_goes_on() -> None:
    table = Table()
    table.rows = {"a": 1, "b": 2}
    reads = BatchedReads(table.fetch)
    table.release.clear()
    first = asyncio.ensure_future(reads.get("a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    second = asyncio.ensure_future(reads.get("b"))
    await asyncio.sleep(0)
    table.fail = RuntimeError("database is locked")
    table.release.set()
    with pytest.raises(RuntimeError, match="locked"):
        await first
    assert await second == 2  # its own read, after the failed one
    assert table.reads == [["a"], ["b"]]


async def test_a_waiter_that_gives_up_does_not_stop_the_others() -> None:
    table = Table()
    table.rows = {"a": 1, "b": 2}
    reads = BatchedReads(table.fetch)
    table.release.clear()
    gone = asyncio.ensure_future(reads.get("a"))
    stays = asyncio.ensure_future(reads.get("b"))
    await asyncio.sleep(0)
    gone.cancel()
    table.release.set()
    assert await stays == 2
    assert gone.cancelled()
    assert await reads.get("a") == 1  # and the reader is ready for more


async def test_waiters_never_hang_when_the_reader_is_cancelled() -> None:
    table = Table()
    reads = BatchedReads(table.fetch, wake_at_once=1)
    table.release.clear()
    waiter = asyncio.ensure_future(reads.get("a"))
    later = asyncio.ensure_future(reads.get("b"))
    await asyncio.sleep(0)
    assert reads._reader is not None
    reads._reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert later.cancelled()


async def test_a_large_read_wakes_its_waiters_a_few_per_turn_of_the_loop() -> None:
    table = Table()
    table.rows = {f"k{i}": i for i in range(40)}
    reads = BatchedReads(table.fetch, wake_at_once=8)
    waiters = [asyncio.ensure_future(reads.get(f"k{i}")) for i in range(40)]
    turns = 0
    while not all(w.done() for w in waiters):
        await asyncio.sleep(0)
        turns += 1
        assert sum(w.done() for w in waiters) <= 8 * turns
    assert [w.result() for w in waiters] == list(range(40))
