"""``/v1/users``: accounts, for admins (docs/security.md, "Accounts"), and each user's quotas
(docs/sandbox.md, "Quotas").

- ``GET /v1/users`` → ``[{"id", "name", "is_admin", "disabled", "disabled_at", "created_at",
  "tokens"}]`` (``tokens``: live tokens)
- ``POST /v1/users/{name}/disable`` → the user; every token of theirs is refused from the next
  request on, as a revoked one (401), their dashboard sessions close, their bridges are
  disconnected (4401), and the app's revocation hooks run for each token — what revoking it
  would end ends (streams, runs). Their tokens are not revoked: re-enabling restores them.
- ``POST /v1/users/{name}/enable`` → the user.
- ``GET``/``PUT /v1/users/{user}/limits``: ``max_running``: the most of the user's runs
  started at once (compiling, waiting for or using a device) — more wait, ``queued``, until
  one ends; ``max_queued``: the most runs accepted and not yet started — a request past it is
  refused ``busy`` (HTTP 429) with the limit. ``null`` is no limit (the default). Admins set
  them; a user may read their own. ``{user}`` is a user's name or id.

An admin cannot disable themselves, nor the bootstrap admin (``admin``): the configuration
owns that account. Changes are audited (``user.disable``, ``user.enable``, ``user.limits``).
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, or_, select

from controller.api.refusals import audited_refusal
from controller.auth.authorization import Principal, now
from controller.auth.http import Admin, UserPrincipal
from controller.auth.tokens import ADMIN_USER
from controller.services import services_of
from controller.store import Store, Token, User, retrying
from protocol.errors import ErrorCode, RpcError

__all__ = ["LimitsIn", "LimitsOut", "UserOut", "router", "set_disabled"]

router = APIRouter(prefix="/v1/users", tags=["users"])

MAX_LIMIT = 10_000


class UserOut(BaseModel):
    id: str
    name: str
    is_admin: bool
    disabled: bool
    disabled_at: datetime | None
    created_at: datetime
    tokens: int


async def _out(store: Store, user: User) -> UserOut:
    async with store.session() as session:
        count = (
            await session.execute(
                select(func.count(Token.id)).where(
                    Token.owner_id == user.id, Token.revoked_at.is_(None)
                )
            )
        ).scalar_one()
    return UserOut(
        id=user.id, name=user.name, is_admin=user.is_admin, disabled=user.disabled_at is not None,
        disabled_at=user.disabled_at, created_at=user.created_at, tokens=int(count),
    )


@router.get("", response_model=list[UserOut])
async def list_users(principal: Admin, request: Request) -> list[UserOut]:
    store: Store = services_of(request).store
    async with store.session() as session:
        users = list((await session.execute(select(User).order_by(User.name))).scalars())
    return [await _out(store, u) for u in users]


async def set_disabled(request: Request, principal: Principal, name: str, disabled: bool) -> UserOut:
    """Disable or re-enable ``name``; on disabling, run the revocation hooks of its tokens."""
    store: Store = services_of(request).store
    if disabled and (name == principal.user_name or name == ADMIN_USER):
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "you cannot disable yourself, nor the bootstrap admin",
            {"rule": "cannot_disable"},
        )
    tokens: list[Token] = []

    async def write() -> User:
        async with store.session() as session, session.begin():
            user = (
                await session.execute(select(User).where(User.name == name))
            ).scalar_one_or_none()
            if user is None:
                raise RpcError(ErrorCode.NOT_FOUND, f"no user {name[:64]!r}")
            user.disabled_at = (user.disabled_at or now()) if disabled else None
            tokens[:] = list(
                (
                    await session.execute(
                        select(Token).where(Token.owner_id == user.id, Token.revoked_at.is_(None))
                    )
                ).scalars()
            )
            return user

    user = await retrying(write, what="user")
    if disabled:
        for token in tokens:
            for hook in request.app.state.revocation_hooks:
                await hook(token)
    return await _out(store, user)


@router.post("/{name}/disable", response_model=UserOut)
async def disable(name: str, principal: Admin, request: Request) -> UserOut:
    audit = services_of(request).audit
    async with audited_refusal(audit, principal, "user.disable", user=name[:64]):
        out = await set_disabled(request, principal, name, True)
    await audit.record(principal, "user.disable", detail={"user": out.name, "tokens": out.tokens})
    return out


@router.post("/{name}/enable", response_model=UserOut)
async def enable(name: str, principal: Admin, request: Request) -> UserOut:
    audit = services_of(request).audit
    async with audited_refusal(audit, principal, "user.enable", user=name[:64]):
        out = await set_disabled(request, principal, name, False)
    await audit.record(principal, "user.enable", detail={"user": out.name})
    return out


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
    async with services_of(request).store.session() as session:
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
    audit = services_of(request).audit
    if not principal.is_admin:
        await audit.record(principal, "user.limits", outcome="refused",
                           detail={"user": user[:64], "code": "forbidden"})
        raise RpcError(ErrorCode.FORBIDDEN, "only an admin sets a user's limits",
                       {"rule": "admin_only"})
    row = await _user(request, user)
    async with services_of(request).store.session() as session, session.begin():
        stored = await session.get(User, row.id)
        assert stored is not None
        stored.max_running = body.max_running
        stored.max_queued = body.max_queued
    await audit.record(principal, "user.limits",
                       detail={"user": row.name, "max_running": body.max_running,
                               "max_queued": body.max_queued})
    return LimitsOut(user=row.name, max_running=body.max_running, max_queued=body.max_queued)
