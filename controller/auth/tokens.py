"""Tokens: issuing, hashing, looking up, rotating and revoking them.

Tokens (docs/design.md §6) are random 256-bit secrets, ``secrets.token_urlsafe(32)`` behind a
prefix that names their kind (``dw_b_`` bridge, ``dw_u_`` user, ``dw_a_`` admin) so a leaked
one is recognisable by secret scanners and by eye. Only their SHA-256 is stored: a fast hash
is right here because the secret has 256 bits of entropy; there is nothing to brute-force.

A token travels in ``Authorization: Bearer …`` only. A request carrying a token-like query
parameter is refused outright, so the mistake surfaces at once instead of leaking the
secret into access logs that happen to work.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controller.auth.authorization import ALL_SCOPES, Principal, Scope, effective_scopes
from controller.store import Bridge, Store, Token, TokenKind, User, utcnow
from controller.store.batched import ReadsPerStore
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "ADMIN_USER", "BOOTSTRAP_TOKEN_NAME", "NAME_PATTERN", "TOKEN_PREFIXES", "IssuedToken",
    "TokenRecord", "Unauthenticated", "authenticate", "create_token", "ensure_bootstrap_admin",
    "generate_token", "hash_token", "is_row_id", "list_tokens", "parse_bearer", "principal_for",
    "revoke_token", "rotate_token",
]

log = logging.getLogger("droidwire.controller.auth")

TOKEN_PREFIXES = {
    TokenKind.BRIDGE: "dw_b_",
    TokenKind.USER: "dw_u_",
    TokenKind.ADMIN: "dw_a_",
}
TOKEN_BYTES = 32  # 256 bits
# Query parameters that look like someone put a secret in a URL.
# Names of users and bridges: no "~" (it separates BRIDGE~SERIAL), no spaces, no slashes.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)
_ID_RE = re.compile(r"[0-9a-f]{32}")
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



@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just created: the secret appears here once and is never stored."""

    id: str
    kind: TokenKind
    name: str
    secret: str = ""
    scopes: tuple[str, ...] = ()
    replaces: str | None = None  # rotation: the id of the token this one replaced

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


def principal_for(
    *,
    token_id: str,
    kind: str,
    name: str,
    bridge_id: str | None,
    scopes: Iterable[str] | None,
    user_id: str,
    user_name: str,
    user_is_admin: bool,
) -> Principal:
    """The caller a live token acts as (a Bearer header, or a dashboard session's token)."""
    held = tuple(scopes or ())
    return Principal(
        token_id=token_id,
        kind=TokenKind(kind),
        name=name,
        user_id=user_id,
        user_name=user_name,
        # A scoped token of an admin acts as an admin only if it holds the admin scope.
        is_admin=user_is_admin and Scope.ADMIN in effective_scopes(held),
        bridge_id=bridge_id,
        scopes=held,
    )


async def authenticate(store: Store, header: str | None) -> Principal:
    """Resolve an ``Authorization`` header to a :class:`Principal` (or raise Unauthenticated).

    The lookup is by the SHA-256 of the presented secret, so there is no secret comparison to
    time; unknown and revoked tokens get the same answer. It is one indexed read (the token
    joined to its user by primary key) and nothing else: no cache, so a revocation committed
    by any replica refuses the very next request or handshake. ``last_used_at`` is noted in
    the store's write-behind (:class:`controller.store.SeenRecorder`), never written here, so
    a busy database cannot fail, or slow down, an authentication (bridges reconnecting by the
    thousand after a restart all come through here).
    """
    digest = hash_token(parse_bearer(header))
    row = await _TOKEN_READS.get(store, digest)
    if row is None or row.revoked_at is not None or row.disabled_at is not None:
        # A disabled user's tokens answer as revoked ones do (docs/security.md, "Accounts").
        raise Unauthenticated("invalid or revoked token")
    principal = principal_for(
        token_id=row.id,
        kind=row.kind,
        name=row.name,
        bridge_id=row.bridge_id,
        scopes=row.scopes,
        user_id=row.user_id,
        user_name=row.user_name,
        user_is_admin=row.is_admin,
    )
    at = utcnow()
    if row.last_used_at is None or at - row.last_used_at >= LAST_USED_RESOLUTION:
        store.seen.token(principal.token_id, at)
    return principal


async def _tokens_by_hash(store: Store, digests: Sequence[str]) -> dict[str, Any]:
    """The rows of the tokens with these hashes, in one indexed read (authentications that
    wait at the same moment — a reconnect storm — share it: :mod:`controller.store.batched`)."""
    async with store.engine.connect() as conn:
        result = await conn.execute(_TOKENS_BY_HASH, {"digests": list(digests)})
        return {row.hash: row for row in result}


# Lookups coalesced per store (one reader at a time each; nothing cached).
_TOKEN_READS: ReadsPerStore[Any] = ReadsPerStore(_tokens_by_hash)

# Core, not ORM: the handshake needs these columns, not Token and User objects in a session.
_TOKENS_BY_HASH = (
    select(
        Token.hash,
        Token.id,
        Token.kind,
        Token.name,
        Token.bridge_id,
        Token.scopes,
        Token.revoked_at,
        Token.last_used_at,
        User.id.label("user_id"),
        User.name.label("user_name"),
        User.is_admin,
        User.disabled_at,
    )
    .join(User, Token.owner_id == User.id)
    .where(Token.hash.in_(bindparam("digests", expanding=True)))
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



# --- token management --------------------------------------------------------------------


def _no_escalation(principal: Principal, scopes: Iterable[str], what: str) -> None:
    """A token may only mint, rotate or revoke tokens whose powers it holds itself."""
    if not effective_scopes(scopes) <= principal.allowed:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            f"this token cannot {what} a token with more scopes than its own",
            {"rule": "scope_escalation"},
        )


def _normalize_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    out: set[str] = set()
    for name in scopes:
        try:
            out.add(Scope(name).value)
        except ValueError as exc:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"unknown scope {str(name)[:64]!r}; known: {', '.join(s.value for s in Scope)}",
                {"field": "scopes"},
            ) from exc
    return tuple(sorted(out))


async def _check_bridge_quota(session: AsyncSession, user_id: str, limit: int) -> None:
    """A user's bridges with a live token, against ``limit`` (docs/security.md)."""
    owned = (await session.execute(
        select(func.count(func.distinct(Bridge.id)))
        .join(Token, Token.bridge_id == Bridge.id)
        .where(Bridge.owner_id == user_id, Token.revoked_at.is_(None))
    )).scalar_one()
    if owned >= limit:
        raise RpcError(
            ErrorCode.CONFLICT,
            f"a user may own at most {limit} bridges; revoke the tokens of one you no longer "
            "use, or ask an admin to raise the limit",
            {"rule": "bridge_quota", "limit": limit},
        )


async def create_token(
    store: Store,
    principal: Principal,
    kind: TokenKind,
    name: str,
    *,
    scopes: Sequence[str] | None = None,
    max_bridges: int | None = None,
) -> IssuedToken:
    """Issue a ``user`` or ``bridge`` token named ``name`` on behalf of ``principal``.

    ``max_bridges``: a non-admin may own at most this many bridges with a live token; a new
    bridge beyond it is refused ``conflict`` (rule ``bridge_quota``).

    user: an admin may name anyone (a new name creates that user); a user may only add
    tokens for themselves. bridge: a new name creates a bridge owned by the caller; an
    existing bridge gets an extra token (rotation) if the caller owns it or is an admin.

    scopes (user tokens only): None gives the caller's own (unrestricted for an unrestricted
    caller); never more than the caller holds. A bridge token counts as unrestricted.
    """
    if kind not in (TokenKind.USER, TokenKind.BRIDGE):
        raise RpcError(ErrorCode.BAD_REQUEST, "kind must be 'bridge' or 'user'")
    if kind is TokenKind.BRIDGE:
        if scopes:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                "a bridge token has no scopes: it only connects a bridge",
                {"field": "scopes"},
            )
        stored: tuple[str, ...] = ()
    else:
        stored = _normalize_scopes(principal.scopes if scopes is None else scopes)
        if scopes is not None and not stored:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                "an empty scope list would be unrestricted: omit scopes for that",
                {"field": "scopes"},
            )
    _no_escalation(principal, stored, "create")
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
                    if max_bridges is not None and not principal.is_admin:
                        await _check_bridge_quota(session, principal.user_id, max_bridges)
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
                scopes=list(stored),
            )
            session.add(token)
            await session.flush()
            token_id = token.id
    except IntegrityError as exc:
        # Two callers created the same new user or bridge name at the same moment.
        raise RpcError(
            ErrorCode.CONFLICT, f"{kind.value} {name!r} was just created; retry"
        ) from exc
    return IssuedToken(id=token_id, kind=kind, name=name, secret=secret, scopes=stored)


async def rotate_token(
    store: Store, principal: Principal, token_id: str
) -> tuple[IssuedToken, Token]:
    """Replace a live token by a new secret with the same kind, name, owner and scopes.

    The old token is revoked in the same transaction: from the commit on, the old secret
    authenticates nothing. Returns the new token (secret included, shown once) and the old
    one as revoked (for the revocation hooks, e.g. dropping a bridge connected with it).
    A token the caller cannot see is ``not_found``; a revoked one ``conflict``; the
    bootstrap token is the operator's configuration and is changed there (``conflict``).
    """
    if not is_row_id(token_id):
        raise RpcError(ErrorCode.NOT_FOUND, f"no token {token_id[:64]!r}")
    async with store.session() as session, session.begin():
        old = await session.get(Token, token_id)
        if old is None or not (principal.is_admin or old.owner_id == principal.user_id):
            raise RpcError(ErrorCode.NOT_FOUND, f"no token {token_id!r}")
        kind = TokenKind(old.kind)
        if kind is TokenKind.ADMIN and old.name == BOOTSTRAP_TOKEN_NAME:
            raise RpcError(
                ErrorCode.CONFLICT,
                "the bootstrap token comes from the controller's configuration: change it there",
                {"rule": "bootstrap_token"},
            )
        _no_escalation(principal, () if kind is not TokenKind.USER else old.scopes, "rotate")
        # Conditional, so two rotations racing on one token cannot both succeed.
        revoked = await session.execute(
            update(Token)
            .where(Token.id == old.id, Token.revoked_at.is_(None))
            .values(revoked_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if revoked.rowcount != 1:  # type: ignore[attr-defined]
            raise RpcError(ErrorCode.CONFLICT, f"token {token_id!r} is revoked: create a new one")
        secret = generate_token(kind)
        new = Token(
            kind=old.kind,
            name=old.name,
            hash=hash_token(secret),
            owner_id=old.owner_id,
            bridge_id=old.bridge_id,
            scopes=list(old.scopes or ()),
        )
        session.add(new)
        await session.flush()
        await session.refresh(old)
        issued = IssuedToken(
            id=new.id,
            kind=kind,
            name=new.name,
            secret=secret,
            scopes=tuple(new.scopes),
            replaces=old.id,
        )
    return issued, old


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
    scopes: tuple[str, ...] = ()


async def list_tokens(store: Store, principal: Principal) -> list[TokenRecord]:
    """Every token an admin can see, or the caller's own; never a secret (none is stored)."""
    query = select(Token, User.name).join(User, Token.owner_id == User.id)
    if not principal.is_admin:
        query = query.where(Token.owner_id == principal.user_id)
    async with store.session() as session:
        rows: Sequence[Any] = (
            await session.execute(query.order_by(Token.created_at, Token.id))
        ).all()
    if principal.allowed != ALL_SCOPES:
        # A scoped token sees only the tokens it could rotate or revoke itself (no more
        # powers than its own): a runs:read token never learns its user's other tokens.
        rows = [
            (t, owner) for t, owner in rows
            if t.kind == TokenKind.USER.value
            and effective_scopes(t.scopes or ()) <= principal.allowed
        ]
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
            scopes=tuple(t.scopes or ()),
        )
        for t, owner in rows
    ]


async def revoke_token(store: Store, principal: Principal, token_id: str) -> Token:
    """Revoke a token the caller can see (idempotent); returns it as revoked."""
    if not is_row_id(token_id):
        raise RpcError(ErrorCode.NOT_FOUND, f"no token {token_id[:64]!r}")
    async with store.session() as session, session.begin():
        token = await session.get(Token, token_id)
        if token is None or not (principal.is_admin or token.owner_id == principal.user_id):
            raise RpcError(ErrorCode.NOT_FOUND, f"no token {token_id!r}")
        if token.kind == TokenKind.ADMIN.value and token.name == BOOTSTRAP_TOKEN_NAME:
            # Revoked here, it would come back at the next start from the configuration.
            raise RpcError(
                ErrorCode.CONFLICT,
                "the bootstrap token comes from the controller's configuration: change it there",
                {"rule": "bootstrap_token"},
            )
        _no_escalation(
            principal, token.scopes or () if token.kind == TokenKind.USER.value else (), "revoke"
        )
        if token.revoked_at is None:
            token.revoked_at = utcnow()
        return token


def is_row_id(text: str) -> bool:
    """Whether ``text`` can be one of our ids (32 hex digits): anything else is looked up
    nowhere, so no odd byte (a NUL, say, which PostgreSQL refuses) ever reaches a query."""
    return _ID_RE.fullmatch(text) is not None


async def _user_by_name(session: AsyncSession, name: str) -> User | None:
    return (await session.execute(select(User).where(User.name == name))).scalar_one_or_none()

