"""Retrying a write that met a busy SQLite database, instead of failing the request.

SQLite has one writer at a time. Every connection waits up to ``busy_timeout`` for the write
lock (:data:`controller.store.store.SQLITE_BUSY_TIMEOUT_MS`), but two cases still end in
``sqlite3.OperationalError: database is locked``: the wait ran out (the lock holder's
transaction spans event-loop turns, so a loaded loop stretches it), and the case the busy
handler never waits for — a transaction that read first and then wants to write after
another connection committed (its snapshot is stale, SQLITE_BUSY_SNAPSHOT, see
https://www.sqlite.org/wal.html §"Sometimes Queries Return SQLITE_BUSY In WAL Mode").
Both go away if the *whole transaction* runs again, which is what :func:`retrying` does, a
bounded number of times with jittered backoff. PostgreSQL does not report either; its
errors pass through untouched.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError

__all__ = ["BUSY_RETRIES", "is_busy", "retrying"]

log = logging.getLogger("droidwire.controller.store")

T = TypeVar("T")

# Attempts after the first, and the base of the backoff between them (doubled each time,
# full jitter): the lock holder is usually done within a few event-loop turns.
BUSY_RETRIES = 3
BUSY_BACKOFF_S = 0.05
_BUSY_MESSAGES = ("database is locked", "database table is locked", "database is busy")


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite refusing a statement because another writer holds the lock."""
    if not isinstance(exc, OperationalError):
        return False
    text = str(exc.orig if exc.orig is not None else exc).lower()
    return any(message in text for message in _BUSY_MESSAGES)


async def retrying(
    transaction: Callable[[], Awaitable[T]],
    *,
    retries: int = BUSY_RETRIES,
    what: str = "store write",
) -> T:
    """Run ``transaction()`` (a whole transaction: it must start and commit its own session),
    again after a busy SQLite database, up to ``retries`` more times; the last error is
    raised as is. Any other error is raised at once."""
    attempt = 0
    while True:
        try:
            return await transaction()
        except OperationalError as exc:
            if attempt >= retries or not is_busy(exc):
                raise
            attempt += 1
            delay = random.uniform(0, BUSY_BACKOFF_S * 2 ** (attempt - 1))
            log.debug("%s: database busy, retry %d/%d in %.3f s", what, attempt, retries, delay)
            await asyncio.sleep(delay)
