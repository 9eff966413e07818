from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

import controller.store.store as store_module
from controller.store import Bridge, Store, User, bridge_seen, devices_seen, known_devices
from tests.conftest import TIME_SCALE

WAIT_S = 10 * TIME_SCALE

T1 = datetime(2030, 1, 1, tzinfo=UTC)
T2 = datetime(2030, 1, 2, tzinfo=UTC)


async def test_devices_are_upserted_per_bridge_and_serial(db_url: str) -> None:
    async with Store(db_url) as store:
        await store.migrate()
        async with store.session() as session, session.begin():
            owner = User(name="o")
            session.add(owner)
            await session.flush()
            a, b = Bridge(name="a", owner_id=owner.id), Bridge(name="b", owner_id=owner.id)
            session.add_all([a, b])
        first = await devices_seen(
            store, a.id, {"emulator-5554": {"sdk": 33}, "10.0.0.2:5555": {}}, at=T1
        )
        again = await devices_seen(store, a.id, {"emulator-5554": {"sdk": 34}}, at=T2)
        other = await devices_seen(store, b.id, {"emulator-5554": {"sdk": 30}}, at=T2)
        assert again["emulator-5554"] == first["emulator-5554"] != other["emulator-5554"]

        devices = {d.serial: d for d in await known_devices(store, a.id)}
        assert set(devices) == {"emulator-5554", "10.0.0.2:5555"}
        updated = devices["emulator-5554"]
        assert (updated.last_info, updated.first_seen_at, updated.last_seen_at) == (
            {"sdk": 34},
            T1,
            T2,
        )

        await bridge_seen(store, a.id, at=T2)
        async with store.session() as session:
            bridge = await session.get(Bridge, a.id)
        assert bridge is not None and bridge.last_seen_at == T2


async def _bridges(store: Store, n: int) -> list[str]:
    async with store.session() as session, session.begin():
        owner = User(name="o")
        session.add(owner)
        await session.flush()
        bridges = [Bridge(name=f"b{i}", owner_id=owner.id) for i in range(n)]
        session.add_all(bridges)
    return [b.id for b in bridges]


async def test_the_recorder_writes_the_latest_times_in_one_flush_and_never_back(
    db_url: str,
) -> None:
    async with Store(db_url) as store:
        await store.migrate()
        a, b = await _bridges(store, 2)
        store.seen.bridge(a, T1)
        store.seen.bridge(a, T2)
        store.seen.bridge(b, T2)
        store.seen.bridge(b, T1)  # older than what is noted: ignored
        assert store.seen.pending == 2
        await store.seen.flush()
        assert store.seen.pending == 0
        store.seen.bridge(a, T1)  # older than what is stored: the row keeps T2
        await store.seen.flush()
        async with store.session() as session:
            rows = {x.id: x.last_seen_at for x in (await session.execute(select(Bridge))).scalars()}
        assert rows == {a: T2, b: T2}


async def test_waiting_inventory_writes_leave_connections_for_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many hellos at once while SQLite's write lock is taken: their inventory writes wait in
    line, not on the connection pool, so a read (a handshake's token lookup) still gets a
    connection at once instead of after a writer gives up."""
    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 600_000)  # writers wait long
    path = tmp_path / "controller.db"
    async with Store(f"sqlite:///{path}") as store:
        await store.migrate()
        ids = await _bridges(store, 20)  # more than the pool's 5 + 10 connections
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            writes = [
                asyncio.create_task(devices_seen(store, bridge_id, {"emulator-5554": {}}))
                for bridge_id in ids
            ]
            async with asyncio.timeout(WAIT_S):
                # The first inventory write holds a connection, waiting for the lock.
                while store.engine.pool.checkedout() == 0:  # noqa: ASYNC110 - pool state
                    await asyncio.sleep(0.001)
                async with store.session() as session:
                    assert len((await session.execute(select(Bridge.id))).all()) == 20
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(*writes)
        for bridge_id in ids:
            assert [d.serial for d in await known_devices(store, bridge_id)] == ["emulator-5554"]
