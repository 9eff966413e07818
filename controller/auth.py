"""Who is calling, and may they do this: tokens, principals and the one authorization check.

Tokens (DESIGN.md §6) are random 256-bit secrets, ``secrets.token_urlsafe(32)`` behind a
prefix that names their kind (``dw_b_`` bridge, ``dw_u_`` user, ``dw_a_`` admin) so a leaked
one is recognisable by secret scanners and by eye. Only their SHA-256 is stored: a fast hash
is right here because the secret has 256 bits of entropy; there is nothing to brute-force.

A token travels in ``Authorization: Bearer …`` only. A request carrying a token-like query
parameter is refused outright, so the mistake surfaces at once instead of leaking the
secret into access logs that happen to work.

:func:`authorize` is THE authorization check: every device call, from REST, MCP, the web
dashboard and the executor, goes through it. Today: admins may do anything, a bridge's owner
anything with its devices. Lending (grants) extends it, here and nowhere else.

Exception tree::

    Unauthenticated       no, malformed, unknown or revoked credentials (HTTP 401)
    protocol.errors.RpcError(FORBIDDEN | NOT_FOUND | CONFLICT | BAD_REQUEST)
                          authenticated but not allowed, or a bad token request
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated

from fastapi import Depends
from fastapi.requests import HTTPConnection
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controller.store import Bridge, Store, Token, TokenKind, User, utcnow
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "ADMIN_USER",
    "NAME_PATTERN",
    "QUERY_TOKEN_PARAMS",
    "TOKEN_PREFIXES",
    "Action",
    "Admin",
    "Authenticated",
    "BridgePrincipal",
    "DeviceRef",
    "IssuedToken",
    "Principal",
    "TokenRecord",
    "Unauthenticated",
    "UserPrincipal",
    "authenticate",
    "authorize",
    "create_token",
    "current_admin",
    "current_bridge",
    "current_principal",
    "current_user",
    "ensure_bootstrap_admin",
    "generate_token",
    "hash_token",
    "list_tokens",
    "parse_bearer",
    "revoke_token",
]

log = logging.getLogger("droidwire.controller.auth")

TOKEN_PREFIXES = {
    TokenKind.BRIDGE: "dw_b_",
    TokenKind.USER: "dw_u_",
    TokenKind.ADMIN: "dw_a_",
}
TOKEN_BYTES = 32  # 256 bits
# Query parameters that look like someone put a secret in a URL.
QUERY_TOKEN_PARAMS = frozenset({"token", "access_token", "api_key", "apikey", "auth"})
# Names of users and bridges: no "~" (it separates BRIDGE~SERIAL), no spaces, no slashes.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)
ADMIN_USER = "admin"
BOOTSTRAP_TOKEN_NAME = "bootstrap"
# last_used_at is refreshed at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)
# Upper bound on a presented token: anything longer is not one of ours.
MAX_TOKEN_CHARS = 256


class Unauthenticated(Exception):
    """No valid credentials: HTTP 401, or a refused WebSocket handshake."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)


class Action(StrEnum):
    VIEW = "view"  # see it in a list, read its state
    USE = "use"  # shell, logcat, install, run tests, screenshots, input
    LEND = "lend"  # grant it to someone else (owner and admin only, never a borrower)


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: a token, and the user it acts for."""

    token_id: str
    kind: TokenKind
    name: str  # the token's name: the user's, or the bridge's
    user_id: str
    user_name: str
    is_admin: bool
    bridge_id: str | None = None
    scopes: tuple[str, ...] = ()

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return f"bridge:{self.name}" if self.kind is TokenKind.BRIDGE else self.user_name


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device as authorization sees it: which bridge it hangs off, and whose that is."""

    bridge_id: str
    serial: str
    owner_id: str
    bridge_name: str | None = None

    @classmethod
    def on_bridge(cls, bridge: Principal, serial: str) -> DeviceRef:
        """A device reported by the bridge authenticated as ``bridge``: its owner is ours."""
        if bridge.kind is not TokenKind.BRIDGE or bridge.bridge_id is None:
            raise ValueError("not a bridge principal")
        return cls(bridge.bridge_id, serial, bridge.user_id, bridge.name)

    def __str__(self) -> str:
        return f"{self.bridge_name or self.bridge_id}~{self.serial}"


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just created: the secret appears here once and is never stored."""

    id: str
    kind: TokenKind
    name: str
    secret: str = ""

    def __repr__(self) -> str:
        return f"IssuedToken(id={self.id!r}, kind={self.kind.value!r}, name={self.name!r})"


def generate_token(kind: TokenKind) -> str:
    return TOKEN_PREFIXES[kind] + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_bearer(header: str | None) -> str:
    """The token in an ``Authorization`` header value, or :class:`Unauthenticated`."""
    if not header:
        raise Unauthenticated("missing Authorization: Bearer header")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    if len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        raise Unauthenticated("malformed token")
    return token


async def authenticate(store: Store, header: str | None) -> Principal:
    """Resolve an ``Authorization`` header to a :class:`Principal` (or raise Unauthenticated).

    The lookup is by the SHA-256 of the presented secret, so there is no secret comparison to
    time; unknown and revoked tokens get the same answer.
    """
    digest = hash_token(parse_bearer(header))
    async with store.session() as session:
        row = (
            await session.execute(
                select(Token, User)
                .join(User, Token.owner_id == User.id)
                .where(Token.hash == digest)
            )
        ).one_or_none()
        if row is None or row.Token.revoked_at is not None:
            raise Unauthenticated("invalid or revoked token")
        token, user = row.Token, row.User
        now = utcnow()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            await session.execute(
                update(Token).where(Token.id == token.id).values(last_used_at=now)
            )
            await session.commit()
    return Principal(
        token_id=token.id,
        kind=TokenKind(token.kind),
        name=token.name,
        user_id=user.id,
        user_name=user.name,
        is_admin=user.is_admin,
        bridge_id=token.bridge_id,
        scopes=tuple(token.scopes or ()),
    )


async def ensure_bootstrap_admin(store: Store, secret: str) -> None:
    """Make ``secret`` a live admin token (idempotent; replicas may race, one row wins).

    A changed bootstrap token replaces the previous one: the old is revoked.
    """
    digest = hash_token(secret)
    for attempt in (1, 2):
        try:
            async with store.session() as session, session.begin():
                admin = await _user_by_name(session, ADMIN_USER)
                if admin is None:
                    admin = User(name=ADMIN_USER, is_admin=True)
                    session.add(admin)
                    await session.flush()
                elif not admin.is_admin:
                    admin.is_admin = True
                existing = (
                    await session.execute(select(Token).where(Token.hash == digest))
                ).scalar_one_or_none()
                if existing is not None and existing.revoked_at is None:
                    return
                await session.execute(
                    update(Token)
                    .where(
                        Token.kind == TokenKind.ADMIN.value,
                        Token.name == BOOTSTRAP_TOKEN_NAME,
                        Token.revoked_at.is_(None),
                    )
                    .values(revoked_at=utcnow())
                )
                if existing is not None:
                    # Revoked earlier through the API, configured again: the operator wins.
                    existing.revoked_at = None
                else:
                    session.add(
                        Token(
                            kind=TokenKind.ADMIN.value,
                            name=BOOTSTRAP_TOKEN_NAME,
                            hash=digest,
                            owner_id=admin.id,
                        )
                    )
            log.info("bootstrap admin token installed")
            return
        except IntegrityError:
            if attempt == 2:
                raise
            # Another replica inserted the same rows at the same moment; re-read them.


async def authorize(
    principal: Principal, device: DeviceRef, action: Action, *, store: Store
) -> None:
    """THE authorization check for every device call; raises :class:`RpcError` on refusal.

    A caller who may not even see the device gets ``not_found`` (its existence is not
    disclosed); one who sees it but may not do this gets ``forbidden``. ``store`` is where
    grants will be looked up when lending lands.
    """
    del store  # grants: next step (issue 8)
    if principal.kind is TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "a bridge token only connects a bridge",
            {"rule": "bridge_token"},
        )
    if principal.is_admin or principal.user_id == device.owner_id:
        return
    raise RpcError(ErrorCode.NOT_FOUND, f"no device {device.serial!r}")


# --- token management --------------------------------------------------------------------


async def create_token(
    store: Store, principal: Principal, kind: TokenKind, name: str
) -> IssuedToken:
    """Issue a ``user`` or ``bridge`` token named ``name`` on behalf of ``principal``.

    user: an admin may name anyone (a new name creates that user); a user may only add
    tokens for themselves. bridge: a new name creates a bridge owned by the caller; an
    existing bridge gets an extra token (rotation) if the caller owns it or is an admin.
    """
    if kind not in (TokenKind.USER, TokenKind.BRIDGE):
        raise RpcError(ErrorCode.BAD_REQUEST, "kind must be 'bridge' or 'user'")
    if not _NAME_RE.match(name):
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            "a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            {"field": "name"},
        )
    secret = generate_token(kind)
    try:
        async with store.session() as session, session.begin():
            bridge_id: str | None = None
            if kind is TokenKind.USER:
                user = await _user_by_name(session, name)
                if not principal.is_admin and (user is None or user.id != principal.user_id):
                    raise RpcError(
                        ErrorCode.FORBIDDEN,
                        "only an admin can create tokens for other users",
                        {"rule": "token_for_other_user"},
                    )
                if user is None:
                    user = User(name=name, is_admin=False)
                    session.add(user)
                    await session.flush()
                owner_id = user.id
            else:
                bridge = (
                    await session.execute(select(Bridge).where(Bridge.name == name))
                ).scalar_one_or_none()
                if bridge is None:
                    bridge = Bridge(name=name, owner_id=principal.user_id)
                    session.add(bridge)
                    await session.flush()
                elif bridge.owner_id != principal.user_id and not principal.is_admin:
                    raise RpcError(
                        ErrorCode.CONFLICT,
                        f"bridge name {name!r} is taken",
                        {"field": "name"},
                    )
                owner_id, bridge_id = bridge.owner_id, bridge.id
            token = Token(
                kind=kind.value,
                name=name,
                hash=hash_token(secret),
                owner_id=owner_id,
                bridge_id=bridge_id,
            )
            session.add(token)
            await session.flush()
            token_id = token.id
    except IntegrityError as exc:
        # Two callers created the same new user or bridge name at the same moment.
        raise RpcError(
            ErrorCode.CONFLICT, f"{kind.value} {name!r} was just created; retry"
        ) from exc
    return IssuedToken(id=token_id, kind=kind, name=name, secret=secret)


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    kind: str
    name: str
    owner: str
    bridge_id: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


async def list_tokens(store: Store, principal: Principal) -> list[TokenRecord]:
    """Every token an admin can see, or the caller's own; never a secret (none is stored)."""
    query = select(Token, User.name).join(User, Token.owner_id == User.id)
    if not principal.is_admin:
        query = query.where(Token.owner_id == principal.user_id)
    async with store.session() as session:
        rows = (await session.execute(query.order_by(Token.created_at, Token.id))).all()
    return [
        TokenRecord(
            id=t.id,
            kind=t.kind,
            name=t.name,
            owner=owner,
            bridge_id=t.bridge_id,
            created_at=t.created_at,
            last_used_at=t.last_used_at,
            revoked_at=t.revoked_at,
        )
        for t, owner in rows
    ]


async def revoke_token(store: Store, principal: Principal, token_id: str) -> Token:
    """Revoke a token the caller can see (idempotent); returns it as revoked."""
    async with store.session() as session, session.begin():
        token = await session.get(Token, token_id)
        if token is None or not (principal.is_admin or token.owner_id == principal.user_id):
            raise RpcError(ErrorCode.NOT_FOUND, f"no token {token_id!r}")
        if token.revoked_at is None:
            token.revoked_at = utcnow()
        return token


async def _user_by_name(session: AsyncSession, name: str) -> User | None:
    return (await session.execute(select(User).where(User.name == name))).scalar_one_or_none()


# --- FastAPI dependencies ----------------------------------------------------------------


async def current_principal(connection: HTTPConnection) -> Principal:
    """Authenticate an HTTP request or WebSocket handshake from its Authorization header."""
    leaked = QUERY_TOKEN_PARAMS.intersection(k.lower() for k in connection.query_params)
    if leaked:
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            "tokens go in the 'Authorization: Bearer' header, never in a URL "
            "(if that was a real token, revoke it: URLs end up in logs)",
            {"rule": "token_in_url", "parameters": sorted(leaked)},
        )
    principal = await authenticate(
        connection.app.state.store, connection.headers.get("authorization")
    )
    connection.state.principal = principal
    return principal


Authenticated = Annotated[Principal, Depends(current_principal)]


async def current_user(principal: Authenticated) -> Principal:
    """A user or admin token: bridge tokens only open the bridge endpoint."""
    if principal.kind is TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "a bridge token only connects a bridge",
            {"rule": "bridge_token"},
        )
    return principal


UserPrincipal = Annotated[Principal, Depends(current_user)]


async def current_admin(principal: UserPrincipal) -> Principal:
    if not principal.is_admin:
        raise RpcError(ErrorCode.FORBIDDEN, "admins only", {"rule": "admin_only"})
    return principal


Admin = Annotated[Principal, Depends(current_admin)]


async def current_bridge(principal: Authenticated) -> Principal:
    """A bridge token, for ``/v1/bridge``: refused (HTTP 401/403) before the WebSocket opens."""
    if principal.kind is not TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "only a bridge token can connect a bridge (create one: droidwire token create --kind bridge NAME)",
            {"rule": "not_a_bridge_token"},
        )
    return principal


BridgePrincipal = Annotated[Principal, Depends(current_bridge)]
