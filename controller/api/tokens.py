"""``/v1/tokens``: issue, list, rotate and revoke tokens (docs/design.md §9).

``POST`` returns the secret once; nothing can show it again (only its hash is kept).
Revoking a token runs the app's revocation hooks, so the hub can drop a bridge session that
was opened with it at once rather than at its next reconnect. Rotating one is a revocation
plus a new token with the same kind, name, owner and scopes, in one transaction: the new
secret is shown once, the old one stops working at once (hooks included).

``scopes`` (user tokens): omitted, the new token has the caller's own (an unrestricted
caller makes an unrestricted token); given, they must be among the caller's. An empty list
in a listing means unrestricted. See :class:`controller.auth.Scope`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from controller import auth
from controller.api.refusals import audited_refusal
from controller.auth.authorization import Scope
from controller.auth.http import UserPrincipal
from controller.auth.tokens import NAME_PATTERN
from controller.services import services_of
from controller.store import TokenKind

__all__ = ["TokenCreate", "TokenCreated", "TokenInfo", "router"]

MAX_SCOPES = len(Scope)

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["bridge", "user"]
    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    scopes: list[Scope] | None = Field(
        default=None,
        max_length=MAX_SCOPES * 2,
        description="user tokens only; omitted: the caller's own scopes",
    )

    @field_validator("scopes")
    @classmethod
    def _distinct(cls, value: list[Scope] | None) -> list[Scope] | None:
        return None if value is None else sorted(set(value))


class TokenCreated(BaseModel):
    id: str
    token: str = Field(description="the secret; shown once, never stored")
    kind: str
    name: str
    scopes: list[str] = Field(default_factory=list, description="empty: unrestricted")
    replaces: str | None = Field(default=None, description="rotation: the token revoked")


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
    scopes: list[str] = Field(description="empty: unrestricted")


@router.post("", status_code=201, response_model=TokenCreated)
async def create_token(
    body: TokenCreate, principal: UserPrincipal, request: Request
) -> TokenCreated:
    """Issue a token; a ``user`` token for a new name creates that user (admins only)."""
    services = services_of(request)
    async with audited_refusal(
        services.audit, principal, "token.create", kind=body.kind, name=body.name
    ):
        issued = await auth.create_token(
            services.store,
            principal,
            TokenKind(body.kind),
            body.name,
            scopes=None if body.scopes is None else [s.value for s in body.scopes],
            max_bridges=services.config.max_bridges_per_user,
        )
    await services.audit.record(
        principal,
        "token.create",
        detail={
            "token_id": issued.id,
            "kind": body.kind,
            "name": body.name,
            "scopes": list(issued.scopes),
        },
    )
    return _created(issued)


def _created(issued: auth.IssuedToken) -> TokenCreated:
    return TokenCreated(
        id=issued.id,
        token=issued.secret,
        kind=issued.kind.value,
        name=issued.name,
        scopes=list(issued.scopes),
        replaces=issued.replaces,
    )


@router.get("", response_model=list[TokenInfo])
async def list_tokens(principal: UserPrincipal, request: Request) -> list[TokenInfo]:
    """Every token for an admin, the caller's own otherwise. Never a secret."""
    records = await auth.list_tokens(services_of(request).store, principal)
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
            scopes=list(r.scopes),
        )
        for r in records
    ]


@router.delete("/{token_id}", status_code=204)
async def revoke_token(token_id: str, principal: UserPrincipal, request: Request) -> Response:
    """Revoke a token (idempotent). It stops authenticating at once."""
    services = services_of(request)
    async with audited_refusal(services.audit, principal, "token.revoke", token_id=token_id):
        token = await auth.revoke_token(services.store, principal, token_id)
    await services.audit.record(
        principal,
        "token.revoke",
        detail={"token_id": token.id, "kind": token.kind, "name": token.name},
    )
    for hook in request.app.state.revocation_hooks:
        await hook(token)
    return Response(status_code=204)


@router.post("/{token_id}/rotate", status_code=201, response_model=TokenCreated)
async def rotate_token(token_id: str, principal: UserPrincipal, request: Request) -> TokenCreated:
    """Replace a token by a new secret (same kind, name, owner, scopes); shown once.

    The old secret stops working at once: a bridge connected with it is dropped, and
    reconnects only with the new one.
    """
    services = services_of(request)
    async with audited_refusal(services.audit, principal, "token.rotate", token_id=token_id):
        issued, old = await auth.rotate_token(services.store, principal, token_id)
    await services.audit.record(
        principal,
        "token.rotate",
        detail={"token_id": issued.id, "replaces": old.id, "kind": old.kind, "name": old.name},
    )
    for hook in request.app.state.revocation_hooks:
        await hook(old)
    return _created(issued)
