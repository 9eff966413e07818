"""Small writes committed together (controller.store.grouped): the writes waiting while a
commit is under way share the next transaction; each writer hears of its own rows only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from controller.store.grouped import GroupedWrites
from controller.store.store import Store

META = MetaData()
ROWS = Table("grouped_rows", META, Column("id", Integer, primary_key=True),
             Column("value", String(16), nullable=False))
PUT = insert(ROWS)
SET = update(ROWS).where(ROWS.c.id == bindparam("row_id")).values(value=bindparam("row_value"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'grouped.db'}")
    async with s.engine.begin() as conn:
        await conn.run_sync(META.create_all)
    try:
        yield s
    finally:
        await s.close()


async def rows(store: Store) -> dict[int, str]:
    async with store.engine.connect() as conn:
        return {r.id: r.value for r in await conn.execute(select(ROWS))}


async def test_writes_waiting_together_share_a_transaction(store: Store) -> None:
    writes = GroupedWrites(store.engine)
    await writes.execute(PUT, [{"id": 0, "value": "first"}])
    assert writes.transactions == 1 and await rows(store) == {0: "first"}
    # Ten writers at once: one transaction for all of them.
    await asyncio.gather(*(writes.execute(PUT, [{"id": i, "value": f"v{i}"}])
                           for i in range(1, 11)))
    assert writes.transactions == 2
    # Writers arriving while a commit is under way share the next one.
    first = asyncio.create_task(writes.execute(PUT, [{"id": 11, "value": "a"}]))
    await asyncio.sleep(0)  # its write is queued first: the writer takes it alone
    await asyncio.gather(first, *(writes.execute(PUT, [{"id": i, "value": "b"}])
                                  for i in range(12, 16)))
    assert writes.transactions == 4
    assert len(await rows(store)) == 16


async def test_writes_are_committed_in_the_order_asked(store: Store) -> None:
    writes = GroupedWrites(store.engine)
    await asyncio.gather(
        writes.execute(PUT, [{"id": 1, "value": "a"}]),
        writes.execute(PUT, [{"id": 2, "value": "b"}]),
        writes.execute(SET, [{"row_id": 1, "row_value": "a2"}]),
        writes.execute(SET, [{"row_id": 1, "row_value": "a3"}, {"row_id": 2, "row_value": "b2"}]),
        writes.execute(PUT, [{"id": 3, "value": "c"}]),
    )
    assert await rows(store) == {1: "a3", 2: "b2", 3: "c"}


async def test_a_bad_write_fails_alone(store: Store) -> None:
    writes = GroupedWrites(store.engine)
    await writes.execute(PUT, [{"id": 1, "value": "there"}])
    got = await asyncio.gather(
        writes.execute(PUT, [{"id": 2, "value": "x"}]),
        writes.execute(PUT, [{"id": 3, "value": "y"}]),
        writes.execute(PUT, [{"id": 1, "value": "duplicate"}]),  # the primary key is taken
        writes.execute(PUT, [{"id": 4, "value": "z"}]),
        return_exceptions=True,
    )
    assert got[0] is None and got[1] is None and got[3] is None
    assert isinstance(got[2], IntegrityError)
    assert await rows(store) == {1: "there", 2: "x", 3: "y", 4: "z"}


async def test_a_cancelled_writer_still_has_its_rows_written(store: Store) -> None:
    writes = GroupedWrites(store.engine)
    first = asyncio.create_task(writes.execute(PUT, [{"id": 1, "value": "a"}]))
    waiting = asyncio.create_task(writes.execute(PUT, [{"id": 2, "value": "b"}]))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await first
    await writes.close()
    assert await rows(store) == {1: "a", 2: "b"}


async def test_large_backlogs_are_cut_into_transactions(store: Store) -> None:
    writes = GroupedWrites(store.engine, max_rows=4)
    await asyncio.gather(*(writes.execute(PUT, [{"id": i, "value": "v"}]) for i in range(13)))
    assert len(await rows(store)) == 13
    assert writes.transactions == 4  # 4 + 4 + 4 + 1 rows
    await writes.execute(PUT, [])  # nothing to write: no transaction
    assert writes.transactions == 4
