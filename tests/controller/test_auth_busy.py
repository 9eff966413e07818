"""A valid token authenticates even while the database refuses writes (SQLite "locked")."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import controller.store.store as store_module
from controller.auth import authenticate, create_token, ensure_bootstrap_admin
from controller.store import Store, Token, TokenKind

BOOTSTRAP = "bootstrap-secret-0123456789"


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    # Waiting 5 s for a lock that this test holds on purpose would only slow the suite down.
    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 50)
    async with Store(f"sqlite:///{tmp_path / 'controller.db'}") as store:
        await store.migrate()
        await ensure_bootstrap_admin(store, BOOTSTRAP)
        yield store


async def test_a_locked_database_does_not_refuse_a_valid_token(store: Store, tmp_path: Path) -> None:
    admin = await authenticate(store, f"Bearer {BOOTSTRAP}")
    issued = await create_token(store, admin, TokenKind.BRIDGE, "pi-1")
    holder = sqlite3.connect(tmp_path / "controller.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another writer holds the database
        principal = await authenticate(store, f"Bearer {issued.secret}")
        assert principal.token_id == issued.id
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The skipped bookkeeping is recorded on a later call, once the database is free.
    await authenticate(store, f"Bearer {issued.secret}")
    async with store.session() as session:
        token = await session.get(Token, issued.id)
    assert token is not None and token.last_used_at is not None
