"""Dashboard sign-in: a token once, then an opaque session cookie (DESIGN.md §6).

``POST /login`` takes the token in the form body (never a URL), checks it like a Bearer
header would, and sets ``droidwire_session``: HttpOnly (no script reads it), SameSite=Strict
(no other site's page makes the browser send it), Secure when the request came over https,
Path=/. The cookie holds a random session id, not the token; the server keeps only the
SHA-256 of that id, mapped to the *token id* it was opened with. Every request re-reads that
token from the store, so revoking the token ends its dashboard sessions at once, and the
principal (admin, scopes) is always the token's current one.

CSRF: SameSite=Strict, plus an Origin check on every state-changing request (``POST
/login``, ``POST /logout``) and on the WebSocket handshake of the live views. A request
whose ``Origin`` (or, lacking one, ``Referer``) names another origin is refused; one with
neither comes from a non-browser client, which carries no ambient cookie worth forging.

Sessions live in this process's memory, bounded (:data:`MAX_SESSIONS`, oldest evicted) and
with an absolute lifetime (:data:`SESSION_TTL`): a controller restart signs everyone out,
and replicas behind a load balancer need sticky sessions for the dashboard.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import select
from starlette.requests import HTTPConnection

from controller.auth import Principal, Scope, effective_scopes
from controller.store import Store, Token, TokenKind, User

__all__ = [
    "COOKIE_NAME",
    "MAX_SESSIONS",
    "SESSION_TTL",
    "SessionStore",
    "same_origin",
    "secure_context",
    "session_principal",
]

log = logging.getLogger("droidwire.controller.web")

COOKIE_NAME = "droidwire_session"
SESSION_TTL = 12 * 3600.0  # seconds: a working day, then sign in again
MAX_SESSIONS = 10_000
_ID_BYTES = 32  # 256-bit session ids, like tokens
_MAX_COOKIE_CHARS = 128


@dataclass(frozen=True, slots=True)
class _Session:
    token_id: str
    expires: float  # time.monotonic()


class SessionStore:
    """Session id digests → the token each session was opened with."""

    def __init__(self, *, ttl: float = SESSION_TTL, max_sessions: int = MAX_SESSIONS) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, token_id: str) -> str:
        """A new session for ``token_id``; returns the id to put in the cookie."""
        session_id = secrets.token_urlsafe(_ID_BYTES)
        self._sessions[_digest(session_id)] = _Session(token_id, time.monotonic() + self.ttl)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session_id

    def token_id(self, session_id: str | None) -> str | None:
        """The token behind a live session, or None (unknown, expired, malformed)."""
        if not session_id or len(session_id) > _MAX_COOKIE_CHARS or not session_id.isascii():
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= time.monotonic():
            del self._sessions[key]
            return None
        return session.token_id

    def close(self, session_id: str | None) -> None:
        if session_id and len(session_id) <= _MAX_COOKIE_CHARS and session_id.isascii():
            self._sessions.pop(_digest(session_id), None)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


async def principal_for_token(store: Store, token_id: str) -> Principal | None:
    """The principal of a live user or admin token, by id (None: revoked, gone, a bridge's).

    The same Principal :func:`controller.auth.authenticate` builds from a Bearer header.
    """
    async with store.session() as session:
        row = (
            await session.execute(
                select(Token, User).join(User, Token.owner_id == User.id).where(Token.id == token_id)
            )
        ).one_or_none()
    if row is None or row.Token.revoked_at is not None:
        return None
    token, user = row.Token, row.User
    kind = TokenKind(token.kind)
    if kind is TokenKind.BRIDGE:
        return None
    scopes = tuple(token.scopes or ())
    return Principal(
        token_id=token.id,
        kind=kind,
        name=token.name,
        user_id=user.id,
        user_name=user.name,
        is_admin=user.is_admin and Scope.ADMIN in effective_scopes(scopes),
        bridge_id=token.bridge_id,
        scopes=scopes,
    )


async def session_principal(conn: HTTPConnection) -> Principal | None:
    """The signed-in principal of a dashboard request or WebSocket handshake, or None."""
    sessions: SessionStore = conn.app.state.web_sessions
    token_id = sessions.token_id(conn.cookies.get(COOKIE_NAME))
    if token_id is None:
        return None
    principal = await principal_for_token(conn.app.state.store, token_id)
    if principal is None:  # the token was revoked since: so is the session
        sessions.close(conn.cookies.get(COOKIE_NAME))
    return principal


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
