"""What a bridge handshake asks of the store: one read, no write (docs/benchmarks.md, issue 9).

Last used / last seen times are written behind (``store.seen``), revocation still refuses
the next handshake (on this replica or any other: there is no cache), and a burst of
handshakes while SQLite's write lock is taken gets every bridge its ``welcome``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update
from websockets.exceptions import InvalidStatus

from controller.hub import BridgeState
from controller.store import Bridge, Store, Token, known_devices, utcnow
from protocol.closecodes import CloseCode
from tests.controller.test_hub_support import (
    WAIT_S,
    FakeBridge,
    InLoopController,
    fast_settings,
    in_loop_controller,
)

BURST = 40  # concurrent handshakes: more than the store's connection pool holds


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[InLoopController]:
    async with in_loop_controller(tmp_path, fast_settings(grace_period_s=WAIT_S * 3)) as c:
        yield c


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """Every SQL statement the store's engine runs meanwhile."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.lstrip().split(None, 1)[0].upper() + " " + statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", record)


def writes(seen: list[str]) -> list[str]:
    return [s for s in seen if s.split(None, 1)[0] in ("INSERT", "UPDATE", "DELETE")]


async def stored_times(store: Store, name: str) -> tuple[datetime | None, datetime | None]:
    """(bridges.last_seen_at, tokens.last_used_at) of bridge ``name`` and its token."""
    async with store.session() as session:
        row = (
            await session.execute(
                select(Bridge.last_seen_at, Token.last_used_at)
                .join(Token, Token.bridge_id == Bridge.id)
                .where(Bridge.name == name)
            )
        ).one()
    return row.last_seen_at, row.last_used_at


async def wait_until(predicate: Any) -> None:
    """Wait (bounded) for a condition on the hub's state, which has no event to wait on."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():  # noqa: ASYNC110 - polling hub state, yielding to the loop
            await asyncio.sleep(0.001)


async def test_a_handshake_writes_nothing_and_its_times_are_written_behind(
    controller: InLoopController,
) -> None:
    store = controller.hub.store
    bridge = FakeBridge(controller.url, await controller.bridge_token("pi"), devices=[])
    await store.seen.flush()
    with statements(store) as seen:
        await bridge.connect()  # returns at welcome
    assert writes(seen) == []
    assert [s for s in seen if s.startswith("SELECT")], "the token is still read"
    assert await stored_times(store, "pi") == (None, None)

    await store.seen.flush()
    entry = controller.hub.entries()[0]
    last_seen, last_used = await stored_times(store, "pi")
    assert last_seen == entry.last_seen_at
    assert last_used is not None and last_used <= utcnow()
    await bridge.close()


async def test_the_last_seen_time_of_a_bridge_that_left_is_written_at_shutdown(
    tmp_path: Path,
) -> None:
    async with in_loop_controller(tmp_path) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("pi"), devices=[])
        await bridge.connect()
        await controller.hub.store.seen.flush()
        entry = controller.hub.entries()[0]
        connected_at = entry.last_seen_at
        await bridge.close()
        await wait_until(lambda: entry.state is not BridgeState.CONNECTED)
        left_at = entry.last_seen_at
        assert connected_at is not None and left_at is not None and left_at > connected_at
        assert (await stored_times(controller.hub.store, "pi"))[0] == connected_at
    async with Store(f"sqlite:///{tmp_path / 'controller.db'}") as store:
        assert (await stored_times(store, "pi"))[0] == left_at


async def test_a_revoked_token_is_refused_at_the_next_handshake(
    controller: InLoopController,
) -> None:
    bridge = FakeBridge(controller.url, await controller.bridge_token("pi"), devices=[])
    await bridge.connect()
    tokens = (await controller.http.get("/v1/tokens")).json()
    token_id = next(t["id"] for t in tokens if t["kind"] == "bridge")
    assert (await controller.http.delete(f"/v1/tokens/{token_id}")).status_code == 204
    await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
    assert bridge.close_code == CloseCode.UNAUTHORIZED
    with pytest.raises(InvalidStatus) as refused:
        await bridge.connect()
    assert refused.value.response.status_code == 401


async def test_a_revocation_by_another_replica_refuses_the_next_handshake_here(
    controller: InLoopController, tmp_path: Path
) -> None:
    """No cache between the store and a handshake: a token revoked in the database by
    someone else (another replica, with no hook run here) is refused at once."""
    token = await controller.bridge_token("pi")
    bridge = FakeBridge(controller.url, token, devices=[])
    await bridge.connect()
    await bridge.close()
    async with Store(f"sqlite:///{tmp_path / 'controller.db'}") as other_replica:
        async with other_replica.session() as session, session.begin():
            await session.execute(
                update(Token).where(Token.bridge_id.is_not(None)).values(revoked_at=utcnow())
            )
    with pytest.raises(InvalidStatus) as refused:
        await FakeBridge(controller.url, token, devices=[]).connect()
    assert refused.value.response.status_code == 401


async def test_a_burst_of_handshakes_while_the_database_is_write_locked_all_get_welcome(
    controller: InLoopController, tmp_path: Path
) -> None:
    """A handshake that needed the write lock would wait for it (the busy timeout) holding one
    of the store's few pooled connections, and so would each hello's inventory write: a burst
    larger than the pool would queue behind them and time out, or fail with HTTP 500 once
    the pool gave up. None may; the inventories are stored once the lock is free."""
    tokens = [await controller.bridge_token(f"pi-{i}") for i in range(BURST)]
    bridges = [FakeBridge(controller.url, t) for t in tokens]  # each with one device
    holder = sqlite3.connect(tmp_path / "controller.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another writer holds SQLite's one write lock
        await asyncio.gather(*(b.connect() for b in bridges))  # each up to its welcome
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store = controller.hub.store
    ids = [e.id for e in controller.hub.entries()]
    assert len(ids) == BURST
    async with asyncio.timeout(WAIT_S * 3):
        for bridge_id in ids:
            while not await known_devices(store, bridge_id):  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # polling the store: the write has no event
    await store.seen.flush()
    assert store.seen.pending == 0
    for bridge in bridges:
        await bridge.close()
