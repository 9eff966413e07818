"""A busy database (SQLite "locked": another writer holds it) neither refuses a valid token
nor loses its bookkeeping, and a busy write is retried rather than failed."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

import controller.store.store as store_module
from controller.auth import authenticate, create_token, ensure_bootstrap_admin
from controller.store import Store, Token, TokenKind, is_busy, retrying

BOOTSTRAP = "bootstrap-secret-0123456789"


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    # Waiting 5 s for a lock that this test holds on purpose would only slow the suite down.
    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 50)
    async with Store(f"sqlite:///{tmp_path / 'controller.db'}") as store:
        await store.migrate()
        await ensure_bootstrap_admin(store, BOOTSTRAP)
        yield store


@contextmanager
def write_locked(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding SQLite's write lock (readers still read: WAL)."""
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield holder
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def last_used(store: Store, token_id: str) -> object:
    async with store.session() as session:
        token = await session.get(Token, token_id)
    assert token is not None
    return token.last_used_at


async def test_a_locked_database_does_not_refuse_a_valid_token(store: Store, tmp_path: Path) -> None:
    admin = await authenticate(store, f"Bearer {BOOTSTRAP}")
    issued = await create_token(store, admin, TokenKind.BRIDGE, "pi-1")
    await store.seen.flush()
    with write_locked(tmp_path / "controller.db"):
        principal = await authenticate(store, f"Bearer {issued.secret}")
        assert principal.token_id == issued.id
        # The flush meets the lock, retries, gives up for now: the time is kept, not lost.
        await store.seen.flush()
        assert store.seen.pending == 1
    assert await last_used(store, issued.id) is None
    await store.seen.flush()
    assert store.seen.pending == 0
    assert await last_used(store, issued.id) is not None


async def test_a_busy_write_is_retried_until_the_lock_is_free(
    store: Store, tmp_path: Path
) -> None:
    holder = sqlite3.connect(tmp_path / "controller.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    attempts: list[bool] = []

    async def write() -> None:
        attempts.append(True)
        if len(attempts) == 2:
            holder.execute("ROLLBACK")  # the other writer is done before the second attempt
        admin = await authenticate(store, f"Bearer {BOOTSTRAP}")
        await create_token(store, admin, TokenKind.USER, "alice")

    try:
        await retrying(write)
    finally:
        holder.close()
    assert len(attempts) == 2


async def test_a_write_that_stays_busy_fails_as_busy(store: Store, tmp_path: Path) -> None:
    admin = await authenticate(store, f"Bearer {BOOTSTRAP}")
    attempts: list[bool] = []

    async def write() -> None:
        attempts.append(True)
        await create_token(store, admin, TokenKind.USER, "bob")

    with write_locked(tmp_path / "controller.db"), pytest.raises(OperationalError) as caught:
        await retrying(write, retries=2)
    assert is_busy(caught.value)
    assert len(attempts) == 3
