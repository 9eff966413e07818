"""The store: one async engine, its sessions, and schema migrations under a lock.

Several replicas may start at once against one database (docs/design.md §7); only one may run
Alembic at a time. PostgreSQL: a transaction-scoped advisory lock, released by the commit
that also commits the DDL (PostgreSQL's DDL is transactional), so a replica that waited finds
the schema at head and does nothing. SQLite: an exclusive ``flock`` on a file next to the
database, which also excludes two stores within one process (``flock`` locks belong to the
open file, not the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import StaticPool

from controller.store.grouped import GroupedWrites
from controller.store.seen import SeenRecorder
from controller.store.url import is_sqlite, to_async_url

__all__ = ["MIGRATIONS_DIR", "MigrationLockTimeout", "Store", "head_revision"]

log = logging.getLogger("droidwire.controller.store")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# pg_advisory_xact_lock takes a bigint; any constant shared by all replicas will do.
PG_MIGRATION_LOCK_KEY = 0x6477_6D69_6772  # "dwmigr"
DEFAULT_MIGRATE_TIMEOUT = 120.0
SQLITE_BUSY_TIMEOUT_MS = 5000
# Background write transactions at once on PostgreSQL (SQLite: one), out of the pool's 5 + 10.
BACKGROUND_WRITERS = 4


# Alembic keeps its migration context in module globals (``alembic.context``, ``alembic.op``),
# so two migrations interleaving on one event loop would trample each other even on different
# databases: one lock per loop serialises them within this process.
_ALEMBIC_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _alembic_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _ALEMBIC_LOCKS.get(loop)
    if lock is None:
        lock = _ALEMBIC_LOCKS[loop] = asyncio.Lock()
    return lock


class MigrationLockTimeout(TimeoutError):
    """Another process held the migration lock for longer than we were willing to wait."""


def _alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "no migrations found"
    return head


def _upgrade(connection: Connection) -> None:
    command.upgrade(_alembic_config(connection), "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


class Store:
    """The controller's database. ``async with Store(url) as store: await store.migrate()``."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        migrate_timeout: float = DEFAULT_MIGRATE_TIMEOUT,
    ) -> None:
        self.url: URL = to_async_url(url)
        self.migrate_timeout = migrate_timeout
        self._memory = is_sqlite(self.url) and self.url.database in (None, "", ":memory:")
        options: dict[str, Any] = {"echo": echo}
        if is_sqlite(self.url):
            if self._memory:
                # One shared connection, or every session would see its own empty database.
                options["poolclass"] = StaticPool
            else:
                path = Path(self.url.database or "").expanduser()
                path.parent.mkdir(parents=True, exist_ok=True)
                self._lock_path = path.with_name(path.name + ".migrate.lock")
        else:
            options["pool_pre_ping"] = True
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        if is_sqlite(self.url):
            event.listen(self.engine.sync_engine, "connect", _sqlite_on_connect)
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self.engine, expire_on_commit=False
        )
        # Last seen / last used times, written behind (never on a handshake's path).
        self.seen = SeenRecorder(self.engine)
        # Small writes of work going on at once (a run's steps), committed together.
        self.writes = GroupedWrites(self.engine)
        # Background writes (device inventories on hello) take a connection only through this
        # gate: SQLite has one writer at a time anyway, and thousands of bridges saying hello
        # at once must not hold every pooled connection waiting for its lock, starving the
        # one read each handshake needs.
        self.background_writes = asyncio.Semaphore(
            1 if is_sqlite(self.url) else BACKGROUND_WRITERS
        )

    def __repr__(self) -> str:
        return f"Store({self.url.render_as_string(hide_password=True)!r})"

    @property
    def dialect(self) -> str:
        return self.url.get_backend_name()

    def session(self) -> AsyncSession:
        return self.sessions()

    async def migrate(self) -> None:
        """Create or upgrade the schema to head; safe to call from many replicas at once."""
        try:
            async with asyncio.timeout(self.migrate_timeout), _alembic_lock():
                if is_sqlite(self.url):
                    async with self._sqlite_lock(), self.engine.begin() as conn:
                        await conn.run_sync(_upgrade)
                else:
                    async with self.engine.begin() as conn:
                        await conn.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"),
                            {"key": PG_MIGRATION_LOCK_KEY},
                        )
                        await conn.run_sync(_upgrade)
        except TimeoutError as exc:
            raise MigrationLockTimeout(
                f"schema migration did not finish within {self.migrate_timeout:g} s "
                "(another controller holding the migration lock?)"
            ) from exc
        log.info("store %r at schema revision %s", self, head_revision())

    async def current_revision(self) -> str | None:
        async with self.engine.connect() as conn:
            return await conn.run_sync(_current)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        """Write the grouped writes under way and the last seen/used times still pending,
        then let the connections go."""
        await self.writes.close()
        await self.seen.close()
        await self.engine.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _sqlite_lock(self) -> AsyncIterator[None]:
        if self._memory:
            yield
            return
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        waiter = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
        try:
            await asyncio.shield(waiter)
        except BaseException:
            # The thread may still be waiting: close the file when it returns, which
            # releases the lock if it was taken after we gave up.
            waiter.add_done_callback(lambda _: os.close(fd))
            raise
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
    finally:
        cursor.close()
