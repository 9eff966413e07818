"""``/v1/users/{user}/limits``: a user's quotas (docs/sandbox.md, "Quotas").

``max_running``: the most of the user's runs started at once (compiling, waiting for or using
a device) — more wait, ``queued``, until one ends; ``max_queued``: the most runs accepted and
not yet started — a request past it is refused ``busy`` (HTTP 429) with the limit. ``null`` is
no limit (the default). Admins set them; a user may read their own. ``{user}`` is a user's
name or id.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import or_, select

from controller.auth import UserPrincipal
from controller.store import User
from protocol.errors import ErrorCode, RpcError

__all__ = ["LimitsIn", "LimitsOut", "router"]

router = APIRouter(prefix="/v1/users", tags=["users"])

MAX_LIMIT = 10_000


class LimitsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_running: int | None = Field(default=None, ge=1, le=MAX_LIMIT, strict=True,
                                    description="runs started at once; null: no limit")
    max_queued: int | None = Field(default=None, ge=0, le=MAX_LIMIT, strict=True,
                                   description="runs waiting to start; null: no limit")


class LimitsOut(LimitsIn):
    user: str


async def _user(request: Request, name: str) -> User:
    if not name or len(name) > 64:
        raise RpcError(ErrorCode.BAD_REQUEST, "a user is a name or an id (1-64 chars)")
    async with request.app.state.store.session() as session:
        found: User | None = (await session.execute(
            select(User).where(or_(User.name == name, User.id == name))
        )).scalars().first()
    if found is None:
        raise RpcError(ErrorCode.NOT_FOUND, "no such user")
    return found


@router.get("/{user}/limits", response_model=LimitsOut)
async def get_limits(user: str, principal: UserPrincipal, request: Request) -> LimitsOut:
    """A user's quotas: an admin reads anyone's, a user their own."""
    row = await _user(request, user) if principal.is_admin or user in (
        principal.user_id, principal.user_name) else None
    if row is None:
        raise RpcError(ErrorCode.NOT_FOUND, "no such user")
    return LimitsOut(user=row.name, max_running=row.max_running, max_queued=row.max_queued)


@router.put("/{user}/limits", response_model=LimitsOut)
async def put_limits(
    user: str, body: LimitsIn, principal: UserPrincipal, request: Request
) -> LimitsOut:
    """Set a user's quotas (admins only); both fields replace what was set."""
    audit = request.app.state.audit
    if not principal.is_admin:
        await audit.record(principal, "user.limits", outcome="refused",
                           detail={"user": user[:64], "code": "forbidden"})
        raise RpcError(ErrorCode.FORBIDDEN, "only an admin sets a user's limits",
                       {"rule": "admin_only"})
    row = await _user(request, user)
    async with request.app.state.store.session() as session, session.begin():
        stored = await session.get(User, row.id)
        assert stored is not None
        stored.max_running = body.max_running
        stored.max_queued = body.max_queued
    await audit.record(principal, "user.limits",
                       detail={"user": row.name, "max_running": body.max_running,
                               "max_queued": body.max_queued})
    return LimitsOut(user=row.name, max_running=body.max_running, max_queued=body.max_queued)
