"""``/v1/tokens``: issue, list and revoke tokens (DESIGN.md §9).

``POST`` returns the secret once; nothing can show it again (only its hash is kept).
Revoking a token runs the app's revocation hooks, so the hub can drop a bridge session that
was opened with it at once rather than at its next reconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from controller import auth
from controller.audit import AuditLog
from controller.auth import NAME_PATTERN, Principal, UserPrincipal
from controller.store import TokenKind
from protocol.errors import RpcError

__all__ = ["TokenCreate", "TokenCreated", "TokenInfo", "router"]

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@asynccontextmanager
async def _audited_refusal(
    audit: AuditLog, principal: Principal, action: str, **detail: str
) -> AsyncIterator[None]:
    """A refused credential change is written to the audit log too, with its error code."""
    try:
        yield
    except RpcError as exc:
        await audit.record(principal, action, outcome=exc.code.value, detail=detail)
        raise


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["bridge", "user"]
    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)


class TokenCreated(BaseModel):
    id: str
    token: str = Field(description="the secret; shown once, never stored")
    kind: str
    name: str


class TokenInfo(BaseModel):
    id: str
    kind: str
    name: str
    owner: str
    bridge_id: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked: bool


@router.post("", status_code=201, response_model=TokenCreated)
async def create_token(
    body: TokenCreate, principal: UserPrincipal, request: Request
) -> TokenCreated:
    """Issue a token; a ``user`` token for a new name creates that user (admins only)."""
    state = request.app.state
    async with _audited_refusal(
        state.audit, principal, "token.create", kind=body.kind, name=body.name
    ):
        issued = await auth.create_token(state.store, principal, TokenKind(body.kind), body.name)
    await state.audit.record(
        principal,
        "token.create",
        detail={"token_id": issued.id, "kind": body.kind, "name": body.name},
    )
    return TokenCreated(id=issued.id, token=issued.secret, kind=issued.kind.value, name=issued.name)


@router.get("", response_model=list[TokenInfo])
async def list_tokens(principal: UserPrincipal, request: Request) -> list[TokenInfo]:
    """Every token for an admin, the caller's own otherwise. Never a secret."""
    records = await auth.list_tokens(request.app.state.store, principal)
    return [
        TokenInfo(
            id=r.id,
            kind=r.kind,
            name=r.name,
            owner=r.owner,
            bridge_id=r.bridge_id,
            created_at=r.created_at,
            last_used_at=r.last_used_at,
            revoked_at=r.revoked_at,
            revoked=r.revoked_at is not None,
        )
        for r in records
    ]


@router.delete("/{token_id}", status_code=204)
async def revoke_token(token_id: str, principal: UserPrincipal, request: Request) -> Response:
    """Revoke a token (idempotent). It stops authenticating at once."""
    state = request.app.state
    async with _audited_refusal(state.audit, principal, "token.revoke", token_id=token_id):
        token = await auth.revoke_token(state.store, principal, token_id)
    await state.audit.record(
        principal,
        "token.revoke",
        detail={"token_id": token.id, "kind": token.kind, "name": token.name},
    )
    for hook in state.revocation_hooks:
        await hook(token)
    return Response(status_code=204)
