"""Schema creation and upgrade: idempotent, matching the models, safe for replicas racing."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, select

from controller.store import Base, Store, User, head_revision
from controller.store.store import PG_MIGRATION_LOCK_KEY
from tests.conftest import TIME_SCALE
from tests.controller.conftest import _plain_pg_url

TABLES = {
    "users",
    "tokens",
    "bridges",
    "devices",
    "grants",
    "runs",
    "run_steps",
    "test_results",
    "frames",
    "web_sessions",
    "audit_log",
    "alembic_version",
}
# How long a migration must stay blocked while another holder has the lock. A blocked
# migration stays blocked however slow the machine: this can only make the test weaker.
BLOCKED_FOR_S = 0.3 * TIME_SCALE
SUBPROCESS_TIMEOUT_S = 60 * TIME_SCALE
REPO_ROOT = Path(__file__).resolve().parents[3]


def _table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _diff(connection: Connection) -> list[object]:
    return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))


async def test_migrate_creates_the_schema_at_head(db_url: str) -> None:
    async with Store(db_url) as store:
        assert await store.current_revision() is None
        await store.migrate()
        assert await store.current_revision() == head_revision()
        async with store.engine.connect() as conn:
            assert await conn.run_sync(_table_names) >= TABLES


async def test_migrations_match_the_models(db_url: str) -> None:
    async with Store(db_url) as store:
        await store.migrate()
        async with store.engine.connect() as conn:
            assert await conn.run_sync(_diff) == []


async def test_migrate_is_idempotent_and_keeps_data(db_url: str) -> None:
    async with Store(db_url) as store:
        await store.migrate()
        async with store.session() as session, session.begin():
            session.add(User(name="kept"))
    async with Store(db_url) as again:
        await again.migrate()
        await again.migrate()
        assert await again.current_revision() == head_revision()
        async with again.session() as session:
            names = (await session.execute(select(User.name))).scalars().all()
        assert names == ["kept"]


async def test_concurrent_migrations_in_one_process(db_url: str) -> None:
    stores = [Store(db_url) for _ in range(4)]
    try:
        await asyncio.gather(*(s.migrate() for s in stores))
        for store in stores:
            assert await store.current_revision() == head_revision()
    finally:
        await asyncio.gather(*(s.close() for s in stores))


_MIGRATE_SCRIPT = """
import asyncio, sys
from controller.store import Store

async def main(url):
    async with Store(url) as store:
        await store.migrate()
        print(await store.current_revision())

asyncio.run(main(sys.argv[1]))
"""


async def test_replicas_starting_together_do_not_race(db_url: str) -> None:
    """Separate processes migrate one empty database at once: all succeed, schema at head."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _MIGRATE_SCRIPT,
            db_url,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outputs = await asyncio.wait_for(
        asyncio.gather(*(p.communicate() for p in procs)), SUBPROCESS_TIMEOUT_S
    )
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == head_revision()
    async with Store(db_url) as store:
        async with store.engine.connect() as conn:
            assert await conn.run_sync(_diff) == []


async def _assert_blocked_then_completes(
    store: Store, release: Callable[[], Awaitable[None]]
) -> None:
    task = asyncio.create_task(store.migrate())
    done, _ = await asyncio.wait({task}, timeout=BLOCKED_FOR_S)
    assert not done, "migration ran while another holder had the lock"
    await release()
    await asyncio.wait_for(task, SUBPROCESS_TIMEOUT_S)
    assert await store.current_revision() == head_revision()


async def test_sqlite_migration_waits_for_the_file_lock(sqlite_url: str) -> None:
    async with Store(sqlite_url) as store:
        fd = os.open(store._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)

            async def release() -> None:
                fcntl.flock(fd, fcntl.LOCK_UN)

            await _assert_blocked_then_completes(store, release)
        finally:
            os.close(fd)


async def test_postgres_migration_waits_for_the_advisory_lock(pg_url: str) -> None:
    holder = await asyncpg.connect(_plain_pg_url(pg_url))
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", PG_MIGRATION_LOCK_KEY)

        async def release() -> None:
            await holder.execute("SELECT pg_advisory_unlock($1)", PG_MIGRATION_LOCK_KEY)

        async with Store(pg_url) as store:
            await _assert_blocked_then_completes(store, release)
    finally:
        await holder.close()


async def test_a_migration_that_cannot_get_the_lock_times_out(sqlite_url: str) -> None:
    from controller.store import MigrationLockTimeout

    async with Store(sqlite_url, migrate_timeout=BLOCKED_FOR_S) as store:
        fd = os.open(store._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with pytest.raises(MigrationLockTimeout):
                await store.migrate()
        finally:
            os.close(fd)
        # The lock is free again: a later start migrates normally.
        store.migrate_timeout = SUBPROCESS_TIMEOUT_S
        await store.migrate()
        assert await store.current_revision() == head_revision()
