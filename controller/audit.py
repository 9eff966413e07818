"""The audit log writer: who did what to which device, when, and how it ended (docs/design.md §6).

Every device call and every change of credentials is recorded through :class:`AuditLog`.
Entries are append-only rows in ``audit_log``; ``detail`` holds small structured facts (a
method name, a rule that refused), never a secret and never a payload.

An entry is one row of a plain ``INSERT``, committed with the other small writes asked for at
the same moment (:class:`controller.store.GroupedWrites`): no ORM unit of work on the event loop
for each one. An audited call is on the path of what the caller sees next — a tunnel's stream
relays the device's first bytes right after its ``OPEN`` is audited (docs/tunnel.md) — and an
ORM session's flush took about a millisecond and a half of the loop there (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import insert, select

from controller.auth.authorization import Principal
from controller.store import AuditEntry, Store, retrying

__all__ = ["AuditLog"]

OK = "ok"
_APPEND = insert(AuditEntry)  # one statement object: writes of it at once go as one executemany


class AuditLog:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(
        self,
        principal: Principal | None,
        action: str,
        *,
        device: str | None = None,
        outcome: str = OK,
        detail: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> None:
        """Append one entry. ``principal`` None is the controller itself (e.g. a scheduler),
        or, with ``actor``, someone not authenticated (a refused sign-in: ``anonymous``)."""
        row = {
            "actor": principal.actor if principal else (actor or "controller"),
            "actor_token_id": principal.token_id if principal else None,
            "action": action,
            "device": device,
            "outcome": outcome,
            "detail": dict(detail or {}),
        }

        async def append() -> None:
            await self.store.writes.execute(_APPEND, [row])

        # A busy SQLite database (another writer holds the lock) is retried, not a 500.
        await retrying(append, what="audit entry")

    async def recent(self, *, limit: int = 100, device: str | None = None) -> list[AuditEntry]:
        """The newest entries first (for admins and tests)."""
        query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if device is not None:
            query = query.where(AuditEntry.device == device)
        async with self.store.session() as session:
            return list((await session.execute(query)).scalars())
