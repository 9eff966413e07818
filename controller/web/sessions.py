"""Dashboard sign-in: a token once, then an opaque session cookie (docs/design.md §6).

``POST /login`` takes the token in the form body (never a URL), checks it like a Bearer
header would, and sets ``droidwire_session``: HttpOnly (no script reads it), SameSite=Strict
(no other site's page makes the browser send it), Secure when the request came over https,
Path=/. The cookie holds a random 256-bit session id, not the token.

Sessions live in the controller's store (:class:`controller.store.WebSession`, SQLite or the
cluster's shared PostgreSQL), so a controller restart signs nobody out and a session opened on
one replica is good on every other (no sticky routing needed). A row holds only the SHA-256 of
the session id (a stolen database yields no usable cookie, as for tokens), the *token id* the
session acts for, and its created / last-seen / expiry times.

Per request (:meth:`SessionStore.principal`): one read by primary key, joined to the token and
its user, so revoking the token ends its dashboard sessions at once on every replica, and the
principal (admin, scopes) is always the token's current one. ``last_seen_at`` is written at
most once per :data:`TOUCH_INTERVAL` per session, not at every page view. Lifetimes: absolute
:data:`SESSION_TTL` from sign-in; an idle lifetime is off by default (``idle_ttl``); both end
in ``expires_at``. Every sign-in gets a new id and closes the one the browser had; sign-out
deletes the row. Expired rows are deleted at sign-in (indexed on ``expires_at``), and one
token keeps at most :data:`MAX_SESSIONS_PER_TOKEN` (oldest closed first): the table never
grows without bound. A cookie that is garbage, too long, unknown or expired is simply
"signed out".

CSRF: SameSite=Strict, plus an Origin check on every state-changing request (``POST
/login``, ``POST /logout``) and on the WebSocket handshake of the live views. A request
whose ``Origin`` (or, lacking one, ``Referer``) names another origin is refused; one with
neither comes from a non-browser client, which carries no ambient cookie worth forging.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Executable, Result, delete, func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from controller.auth.authorization import Principal, now
from controller.auth.tokens import principal_for
from controller.services.container import services_of
from controller.store import Store, Token, TokenKind, User, WebSession

__all__ = [
    "COOKIE_NAME",
    "MAX_SESSIONS_PER_TOKEN",
    "SESSION_TTL",
    "TOUCH_INTERVAL",
    "SessionStore",
    "same_origin",
    "secure_context",
    "session_principal",
]

log = logging.getLogger("droidwire.controller.web")

COOKIE_NAME = "droidwire_session"
# Lifetimes
SESSION_TTL = 12 * 3600.0  # seconds from sign-in: a working day, then sign in again
TOUCH_INTERVAL = 60.0  # seconds: last_seen_at is written at most this often per session
# Limits
MAX_SESSIONS_PER_TOKEN = 50  # a token's oldest sessions are closed beyond this
_ID_BYTES = 32  # 256-bit session ids, like tokens
_MAX_COOKIE_CHARS = 128


class SessionStore:
    """Dashboard sessions in ``store``: open at sign-in, resolve per request, close.

    ``idle_ttl`` (None: off) ends a session not seen for that long; it is judged against
    ``last_seen_at``, which lags real use by up to ``touch_interval``, so it must be longer.
    Times come from :func:`controller.auth.now`, which tests move instead of sleeping.
    """

    def __init__(
        self,
        store: Store,
        *,
        # Lifetimes
        ttl: float = SESSION_TTL,
        idle_ttl: float | None = None,
        touch_interval: float = TOUCH_INTERVAL,
        # Limits
        max_per_token: int = MAX_SESSIONS_PER_TOKEN,
    ) -> None:
        if idle_ttl is not None and idle_ttl <= touch_interval:
            raise ValueError("idle_ttl must be longer than touch_interval")
        if max_per_token < 1:
            raise ValueError("max_per_token must be at least 1")
        self.store = store
        self.ttl = timedelta(seconds=ttl)
        self.idle_ttl = None if idle_ttl is None else timedelta(seconds=idle_ttl)
        self.touch_interval = timedelta(seconds=touch_interval)
        self.max_per_token = max_per_token

    def _expiry(self, created_at: datetime, seen_at: datetime) -> datetime:
        end = created_at + self.ttl
        return end if self.idle_ttl is None else min(end, seen_at + self.idle_ttl)

    async def open(self, token_id: str, *, replacing: str | None = None) -> str:
        """A new session for ``token_id``; returns the id to put in the cookie.

        ``replacing``: the cookie the browser came with, closed in the same transaction (a
        session id never survives a sign-in). Expired rows are pruned afterwards.
        """
        session_id = secrets.token_urlsafe(_ID_BYTES)
        at = now()
        old = _key(replacing)
        async with self.store.session() as session, session.begin():
            if old is not None:
                await session.execute(delete(WebSession).where(WebSession.id_hash == old))
            session.add(
                WebSession(
                    id_hash=_digest(session_id),
                    token_id=token_id,
                    created_at=at,
                    last_seen_at=at,
                    expires_at=self._expiry(at, at),
                )
            )
            await session.flush()
            surplus = (
                await session.execute(
                    select(WebSession.id_hash)
                    .where(WebSession.token_id == token_id)
                    .order_by(WebSession.created_at.desc(), WebSession.id_hash)
                    .offset(self.max_per_token)
                )
            ).scalars().all()
            if surplus:
                await session.execute(
                    delete(WebSession).where(WebSession.id_hash.in_(surplus))
                )
        await self.prune(at)
        return session_id

    async def principal(self, session_id: str | None) -> Principal | None:
        """The principal behind a live session, or None (malformed, unknown, expired, or its
        token revoked: the row is then deleted)."""
        key = _key(session_id)
        if key is None:
            return None
        at = now()
        async with self.store.session() as session:
            row = (
                await session.execute(
                    select(WebSession, Token, User)
                    .join(Token, WebSession.token_id == Token.id)
                    .join(User, Token.owner_id == User.id)
                    .where(WebSession.id_hash == key)
                )
            ).one_or_none()
            if row is None:
                return None
            web, token, user = row.WebSession, row.Token, row.User
            kind = TokenKind(token.kind)
            if (web.expires_at <= at or token.revoked_at is not None
                    or user.disabled_at is not None or kind is TokenKind.BRIDGE):
                await _best_effort(session, delete(WebSession).where(WebSession.id_hash == key))
                return None
            principal = _principal(token, user)
            if at - web.last_seen_at >= self.touch_interval:
                await _best_effort(
                    session,
                    update(WebSession)
                    .where(WebSession.id_hash == key)
                    .values(last_seen_at=at, expires_at=self._expiry(web.created_at, at)),
                )
        return principal

    async def close(self, session_id: str | None) -> None:
        """Sign-out: the session is gone for every replica (unknown or malformed: nothing)."""
        key = _key(session_id)
        if key is None:
            return
        async with self.store.session() as session, session.begin():
            await session.execute(delete(WebSession).where(WebSession.id_hash == key))

    async def close_token(self, token_id: str) -> int:
        """End every session of a token (after its revocation); returns how many."""
        async with self.store.session() as session, session.begin():
            result = await session.execute(
                delete(WebSession).where(WebSession.token_id == token_id)
            )
        return int(result.rowcount)  # type: ignore[attr-defined]

    async def on_token_revoked(self, token: Token) -> None:
        """The app's revocation hook: the rows go at once (requests already refuse them: the
        token is re-read every time; this only keeps the table small)."""
        try:
            closed = await self.close_token(token.id)
        except DBAPIError as exc:
            log.warning("sessions of revoked token %s left to expire: %s", token.id, exc)
            return
        if closed:
            log.info("%d dashboard session(s) of revoked token %s closed", closed, token.id)

    async def prune(self, at: datetime | None = None) -> int:
        """Delete expired sessions; returns how many. Bookkeeping: a busy database (or two
        replicas pruning at once) only postpones it to the next sign-in."""
        async with self.store.session() as session:
            result = await _best_effort(
                session, delete(WebSession).where(WebSession.expires_at <= (at or now()))
            )
        return 0 if result is None else int(result.rowcount)  # type: ignore[attr-defined]

    async def count(self) -> int:
        """How many rows the table holds (live or not yet pruned): for tests and metrics."""
        async with self.store.session() as session:
            return int((await session.execute(select(func.count(WebSession.id_hash)))).scalar_one())


async def _best_effort(session: AsyncSession, statement: Executable) -> Result[Any] | None:
    """Run and commit a bookkeeping write; a failure (SQLite busy, two replicas deadlocking
    on a prune) is logged and skipped: it never turns a valid request into a 500."""
    try:
        result = await session.execute(statement)
        await session.commit()
    except DBAPIError as exc:
        await session.rollback()
        log.debug("dashboard session bookkeeping skipped: %s", exc)
        return None
    return result


def _key(session_id: str | None) -> str | None:
    """The row key of a cookie value, or None when it cannot be one of ours."""
    if not session_id or len(session_id) > _MAX_COOKIE_CHARS or not session_id.isascii():
        return None
    return _digest(session_id)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


def _principal(token: Token, user: User) -> Principal:
    """The same Principal :func:`controller.auth.authenticate` builds from a Bearer header."""
    return principal_for(
        token_id=token.id,
        kind=token.kind,
        name=token.name,
        bridge_id=token.bridge_id,
        scopes=token.scopes,
        user_id=user.id,
        user_name=user.name,
        user_is_admin=user.is_admin,
    )


async def session_principal(conn: HTTPConnection) -> Principal | None:
    """The signed-in principal of a dashboard request or WebSocket handshake, or None."""
    sessions = services_of(conn).web_sessions
    return await sessions.principal(conn.cookies.get(COOKIE_NAME))


def _claimed_origin(conn: HTTPConnection) -> str | None:
    claimed = conn.headers.get("origin")
    if claimed is None:
        referer = conn.headers.get("referer")
        if referer is None:
            return None
        parts = urlsplit(referer)
        claimed = f"{parts.scheme}://{parts.netloc}"
    return claimed


def same_origin(conn: HTTPConnection) -> bool:
    """Whether a state-changing request comes from this site's own pages (see module doc).

    The origin's host must be the request's ``Host``; its scheme the request's, or https:
    behind a TLS-terminating proxy the controller itself sees plain http.
    """
    claimed = _claimed_origin(conn)
    if claimed is None:
        return True  # not a browser: no ambient cookie to abuse
    host = conn.headers.get("host")
    if claimed == "null" or not host:
        return False
    parts = urlsplit(claimed.lower())
    ours = "https" if conn.url.scheme in ("https", "wss") else "http"
    return parts.netloc == host.lower() and parts.scheme in (ours, "https")


def secure_context(conn: HTTPConnection) -> bool:
    """Whether the browser talks https to us (directly, or through a proxy): the cookie then
    gets ``Secure``, so it never travels over plain http."""
    if conn.url.scheme in ("https", "wss"):
        return True
    claimed = _claimed_origin(conn)
    return claimed is not None and claimed.lower().startswith("https://")
