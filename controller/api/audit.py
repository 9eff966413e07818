"""``GET /v1/audit``: the audit log, readable (docs/security.md, "The audit log").

Newest first, filtered by ``user`` (the actor's name), ``device`` (``BRIDGE~SERIAL``, or a bare
serial on any bridge), ``action`` (exact, or a prefix ending in ``*``: ``grant.*``),
``outcome``, and a time range (``since`` inclusive, ``until`` exclusive). Pages are cursor
based: ``next`` is the id to pass as ``before`` for the following page (None on the last),
so entries appended meanwhile never shift a page.

Who reads what: an admin every entry; anyone else the entries about devices on bridges they
own (whoever acted) and the entries of their own acts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from sqlalchemy import ColumnElement, and_, or_, select

from controller.auth.http import UserPrincipal
from controller.services import services_of
from controller.store import AuditEntry, Bridge
from protocol.errors import ErrorCode, RpcError

__all__ = ["AuditOut", "AuditPage", "router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"])

MAX_PAGE = 500


class AuditOut(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    device: str | None
    outcome: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    entries: list[AuditOut]
    next: int | None


def _when(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise RpcError(
            ErrorCode.BAD_REQUEST, f"{name}: not an ISO 8601 time: {text[:64]!r}"
        ) from exc
    if when.tzinfo is None:
        raise RpcError(ErrorCode.BAD_REQUEST, f"{name}: give a time zone (e.g. a trailing Z)")
    return when


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@router.get("", response_model=AuditPage)
async def get_audit(
    principal: UserPrincipal,
    request: Request,
    user: Annotated[str | None, Query(max_length=64)] = None,
    device: Annotated[str | None, Query(max_length=255)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    outcome: Annotated[str | None, Query(max_length=32)] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    until: Annotated[str | None, Query(max_length=64)] = None,
    before: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[str, Query(max_length=8)] = "100",
) -> AuditPage:
    """A page of audit entries, newest first (see the module's docstring)."""
    try:
        size = int(limit)
        cursor = None if before is None else int(before)
    except ValueError as exc:
        raise RpcError(ErrorCode.BAD_REQUEST, "limit and before are integers") from exc
    if not 1 <= size <= MAX_PAGE:
        raise RpcError(ErrorCode.BAD_REQUEST, f"limit is 1 to {MAX_PAGE}")
    start, end = _when(since, "since"), _when(until, "until")
    where: list[ColumnElement[bool]] = []
    if user is not None:
        where.append(AuditEntry.actor == user)
    if device is not None:
        if "~" in device:
            where.append(AuditEntry.device == device)
        else:
            where.append(AuditEntry.device.like(f"%~{_escape(device)}", escape="\\"))
    if action is not None:
        if action.endswith("*"):
            where.append(AuditEntry.action.like(f"{_escape(action[:-1])}%", escape="\\"))
        else:
            where.append(AuditEntry.action == action)
    if outcome is not None:
        where.append(AuditEntry.outcome == outcome)
    if start is not None:
        where.append(AuditEntry.at >= start)
    if end is not None:
        where.append(AuditEntry.at < end)
    if cursor is not None:
        where.append(AuditEntry.id < cursor)
    store = services_of(request).store
    async with store.session() as session:
        if not principal.is_admin:
            owned = (
                await session.execute(select(Bridge.name).where(Bridge.owner_id == principal.user_id))
            ).scalars()
            mine: list[ColumnElement[bool]] = [AuditEntry.actor == principal.user_name]
            mine += [
                AuditEntry.device.like(f"{_escape(name)}~%", escape="\\") for name in owned
            ]
            where.append(or_(*mine))
        query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(size + 1)
        if where:
            query = query.where(and_(*where))
        rows = list((await session.execute(query)).scalars())
    more = len(rows) > size
    rows = rows[:size]
    return AuditPage(
        entries=[
            AuditOut(
                id=r.id, at=r.at, actor=r.actor, action=r.action, device=r.device,
                outcome=r.outcome, detail=dict(r.detail or {}),
            )
            for r in rows
        ],
        next=rows[-1].id if more and rows else None,
    )
