"""What the hub writes as bridges come and go: last seen times, and the devices they report.

Last seen (``bridges.last_seen_at``) and last used (``tokens.last_used_at``) are bookkeeping,
and they used to be written on every bridge handshake: a burst of handshakes (5,000 bridges
back after a controller restart) became a burst of write transactions, which on SQLite
queued behind its one write lock until some failed with ``database is locked``, and which
cost most of a handshake's CPU (docs/benchmarks.md). They now go through
:class:`SeenRecorder` (``store.seen``), a write-behind: noting a time is a dict assignment,
and a background task writes whatever was noted, the latest time per row, in **one**
transaction at most every :data:`SEEN_FLUSH_INTERVAL_S`, and once more when the store
closes. A write that fails (the database busy or away) is kept for the next flush; nothing
of it ever reaches the handshake. The cost: the stored times lag by up to the interval, and
a controller killed with ``-9`` loses the last interval's (the hub's own view of a live
bridge, which the API shows, is never behind).

Devices are upserted by ``(bridge, serial)`` with the inventory's latest facts (model,
release, SDK, …) so lending, history and the dashboard can name a device whose bridge is away.
Only one live session exists per bridge, so two writers for one bridge do not race; a lost
race with a replica's stale session still ends in a consistent row (the unique constraint).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from controller.store.models import Bridge, Device, Token, utcnow
from controller.store.retry import retrying

if TYPE_CHECKING:
    from controller.store.store import Store

__all__ = [
    "SEEN_FLUSH_INTERVAL_S",
    "SeenRecorder",
    "bridge_seen",
    "devices_seen",
    "known_devices",
]

log = logging.getLogger("droidwire.controller.store.seen")

# How far the stored last-seen / last-used times may lag: the write-behind's flush period.
SEEN_FLUSH_INTERVAL_S = 2.0
# Rows per statement of a flush (all in its one transaction).
FLUSH_ROWS_PER_STATEMENT = 250


class SeenRecorder:
    """Write-behind for ``bridges.last_seen_at`` and ``tokens.last_used_at`` (see above).

    ``bridge()`` and ``token()`` only note a time (the latest per id wins) and make sure a
    flush is due within ``interval_s``; the flusher task runs while there is something to
    write and ends when there is not. :meth:`flush` writes now; :meth:`close` writes what is
    left and stops (the store calls it before disposing of its engine). A stored time never
    moves back: the update only applies where it is newer, so a replica that flushes late
    does not undo another's.
    """

    def __init__(self, engine: AsyncEngine, *, interval_s: float = SEEN_FLUSH_INTERVAL_S) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self._bridges: dict[str, datetime] = {}
        self._tokens: dict[str, datetime] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one flush at a time: the periodic one and close()'s
        self._closed = False

    @property
    def pending(self) -> int:
        """How many rows wait for the next flush."""
        return len(self._bridges) + len(self._tokens)

    def bridge(self, bridge_id: str, at: datetime) -> None:
        """Bridge ``bridge_id`` was seen at ``at`` (its connection opened or ended)."""
        self._note(self._bridges, bridge_id, at)

    def token(self, token_id: str, at: datetime) -> None:
        """Token ``token_id`` authenticated a request or handshake at ``at``."""
        self._note(self._tokens, token_id, at)

    def _note(self, pending: dict[str, datetime], key: str, at: datetime) -> None:
        if self._closed:
            log.debug("seen recorder closed: %s at %s not recorded", key, at)
            return
        _keep_latest(pending, key, at)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_periodically(), name="store-seen-flush"
            )

    async def _flush_periodically(self) -> None:
        while self.pending:
            await asyncio.sleep(self.interval_s)
            await self.flush()

    async def flush(self) -> None:
        """Write every noted time now, in one transaction; on failure keep them for later."""
        async with self._lock:
            bridges, self._bridges = self._bridges, {}
            tokens, self._tokens = self._tokens, {}
            if not bridges and not tokens:
                return
            try:
                await retrying(lambda: self._write(bridges, tokens), what="last-seen flush")
            except BaseException as exc:
                # Kept for the next flush (rewriting rows that did commit is harmless: a
                # time only moves forward). A cancellation goes on; a store error stays here.
                for key, at in bridges.items():
                    _keep_latest(self._bridges, key, at)
                for key, at in tokens.items():
                    _keep_latest(self._tokens, key, at)
                if not isinstance(exc, SQLAlchemyError | OSError):
                    raise
                log.warning("last seen/used times of %d rows not written yet: %s",
                            len(bridges) + len(tokens), exc)

    async def _write(self, bridges: dict[str, datetime], tokens: dict[str, datetime]) -> None:
        async with self.engine.begin() as conn:  # Core: executemany, one transaction
            for statement, times in ((_forward(Bridge.__table__, "last_seen_at"), bridges),
                                     (_forward(Token.__table__, "last_used_at"), tokens)):
                rows = _rows(times)
                # In slices: binding the rows is the event loop's work, and a flush during a
                # reconnect storm holds thousands (up to 18 ms of the loop in one step with
                # 5,000 bridges, docs/benchmarks.md); between slices it waits for the driver.
                for start in range(0, len(rows), FLUSH_ROWS_PER_STATEMENT):
                    await conn.execute(statement, rows[start:start + FLUSH_ROWS_PER_STATEMENT])

    async def close(self) -> None:
        """Stop the flusher and write what is left (the last chance before the engine goes)."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush()
        if self.pending:
            log.warning("%d last seen/used times lost at shutdown", self.pending)


def _forward(table: Any, column: str) -> Any:
    """``UPDATE table SET column = :at WHERE id = :row_id`` where that moves it forward."""
    stored = table.c[column]
    return (
        update(table)
        .where(table.c.id == bindparam("row_id"))
        .where(or_(stored.is_(None), stored < bindparam("at")))
        .values({column: bindparam("at")})
    )


def _rows(times: dict[str, datetime]) -> list[dict[str, Any]]:
    # In id order: two replicas flushing the same rows take their row locks in one order.
    return [{"row_id": key, "at": at} for key, at in sorted(times.items())]


def _keep_latest(pending: dict[str, datetime], key: str, at: datetime) -> None:
    previous = pending.get(key)
    if previous is None or at > previous:
        pending[key] = at


async def bridge_seen(store: Store, bridge_id: str, *, at: datetime | None = None) -> None:
    """Write ``bridges.last_seen_at`` now (the hub notes it in ``store.seen`` instead)."""
    store.seen.bridge(bridge_id, at or utcnow())
    await store.seen.flush()


async def devices_seen(
    store: Store,
    bridge_id: str,
    inventory: Mapping[str, Mapping[str, Any]],
    *,
    at: datetime | None = None,
) -> dict[str, str]:
    """Record ``{serial: info}`` as seen now; returns ``{serial: device id}``.

    The transaction reads before it writes, so on SQLite it can meet a stale snapshot
    (``database is locked`` at once, see :mod:`controller.store.retry`): it is retried whole.
    It waits for ``store.background_writes`` first: after a controller restart every bridge
    says hello at once, and their inventories queue here, not on the connection pool.
    """
    now = at or utcnow()
    async with store.background_writes:
        return await retrying(
            lambda: _upsert_devices(store, bridge_id, inventory, now), what="device inventory"
        )


async def _upsert_devices(
    store: Store, bridge_id: str, inventory: Mapping[str, Mapping[str, Any]], now: datetime
) -> dict[str, str]:
    ids: dict[str, str] = {}
    async with store.session() as session, session.begin():
        existing = {
            d.serial: d
            for d in (
                await session.execute(
                    select(Device).where(
                        Device.bridge_id == bridge_id, Device.serial.in_(list(inventory))
                    )
                )
            ).scalars()
        }
        for serial, info in inventory.items():
            device = existing.get(serial)
            if device is None:
                device = Device(bridge_id=bridge_id, serial=serial, first_seen_at=now)
                session.add(device)
            device.last_info = dict(info)
            device.last_seen_at = now
            await session.flush()
            ids[serial] = device.id
    return ids


async def known_devices(store: Store, bridge_id: str) -> list[Device]:
    """Every device this bridge ever reported, oldest first."""
    async with store.session() as session:
        query = select(Device).where(Device.bridge_id == bridge_id).order_by(Device.first_seen_at)
        return list((await session.execute(query)).scalars())
