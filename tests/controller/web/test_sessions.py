"""Dashboard sessions in the store (SQLite and PostgreSQL), and the origin check."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update
from starlette.requests import Request

from controller.auth import hash_token, now, use_clock
from controller.store import Store, Token, TokenKind, User, WebSession, utcnow
from controller.web.sessions import (
    SESSION_TTL,
    SessionStore,
    same_origin,
    secure_context,
)
from tests.controller.conftest import db_url, pg_url, sqlite_url  # noqa: F401 - fixtures


class Clock:
    """The time :func:`controller.auth.now` returns, moved by the test."""

    def __init__(self) -> None:
        self.at = utcnow()

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock()
    previous = use_clock(clock)
    try:
        yield clock
    finally:
        use_clock(previous)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:  # noqa: F811 - the fixture
    async with Store(db_url) as store:
        await store.migrate()
        yield store


async def new_token(store: Store, name: str, kind: TokenKind = TokenKind.USER) -> str:
    async with store.session() as session, session.begin():
        user = (await session.execute(select(User).where(User.name == name))).scalar_one_or_none()
        if user is None:
            user = User(name=name)
            session.add(user)
            await session.flush()
        token = Token(kind=kind.value, name=name, hash=hash_token(f"{name}-{kind}-{now()}"),
                      owner_id=user.id)
        session.add(token)
        await session.flush()
        return token.id


async def rows(store: Store) -> list[WebSession]:
    async with store.session() as session:
        return list((await session.execute(select(WebSession))).scalars())


async def test_a_session_maps_to_its_token_and_only_its_digest_is_stored(store: Store) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store)
    sid = await sessions.open(token_id)
    principal = await sessions.principal(sid)
    assert principal is not None
    assert (principal.token_id, principal.user_name) == (token_id, "olivia")
    [row] = await rows(store)
    assert row.id_hash == hashlib.sha256(sid.encode()).hexdigest()
    assert sid not in repr([getattr(row, c.key) for c in WebSession.__table__.columns])
    assert row.expires_at - row.created_at == timedelta(seconds=SESSION_TTL)


async def test_sign_out_deletes_the_row(store: Store) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store)
    sid = await sessions.open(token_id)
    await sessions.close(sid)
    assert await sessions.principal(sid) is None
    assert await rows(store) == []


async def test_a_sign_in_closes_the_session_it_replaces(store: Store) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store)
    first = await sessions.open(token_id)
    second = await sessions.open(token_id, replacing=first)
    assert first != second
    assert await sessions.principal(first) is None
    assert await sessions.principal(second) is not None
    assert await sessions.count() == 1


async def test_a_session_ends_at_its_absolute_lifetime(store: Store, clock: Clock) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store, ttl=3600)
    sid = await sessions.open(token_id)
    clock.advance(3599)
    assert await sessions.principal(sid) is not None  # in use all along: still absolute
    clock.advance(1)
    assert await sessions.principal(sid) is None
    assert await rows(store) == []  # and the expired row went with it


async def test_expired_rows_are_pruned_at_sign_in(store: Store, clock: Clock) -> None:
    token_id = await new_token(store, "olivia")
    other = await new_token(store, "bob")
    sessions = SessionStore(store, ttl=60)
    for _ in range(3):
        await sessions.open(other)  # never used again
    clock.advance(61)
    kept = await sessions.open(token_id)
    assert [r.id_hash for r in await rows(store)] == [hashlib.sha256(kept.encode()).hexdigest()]


async def test_last_seen_is_written_at_most_once_per_interval(store: Store, clock: Clock) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store, touch_interval=60)
    sid = await sessions.open(token_id)
    opened = now()
    for _ in range(5):
        clock.advance(10)
        assert await sessions.principal(sid) is not None
    [row] = await rows(store)
    assert row.last_seen_at == opened  # 50 s of page views: not one write
    clock.advance(10)
    assert await sessions.principal(sid) is not None
    [row] = await rows(store)
    assert row.last_seen_at == now()


async def test_an_idle_lifetime_ends_an_unused_session(store: Store, clock: Clock) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store, ttl=1000, idle_ttl=300, touch_interval=60)
    busy, idle = await sessions.open(token_id), await sessions.open(token_id)
    for _ in range(16):  # 960 s, busy seen every 60 s
        clock.advance(60)
        assert await sessions.principal(busy) is not None
    assert await sessions.principal(idle) is None
    clock.advance(60)
    assert await sessions.principal(busy) is None  # in use, but past its absolute end


def test_an_idle_lifetime_must_outlast_the_touch_interval() -> None:
    with pytest.raises(ValueError, match="idle_ttl"):
        SessionStore(None, idle_ttl=30, touch_interval=60)  # type: ignore[arg-type]


async def test_a_token_keeps_a_bounded_number_of_sessions(store: Store, clock: Clock) -> None:
    token_id = await new_token(store, "olivia")
    other = await new_token(store, "bob")
    sessions = SessionStore(store, max_per_token=2)
    bobs = await sessions.open(other)
    opened = []
    for _ in range(4):
        clock.advance(1)
        opened.append(await sessions.open(token_id))
    assert await sessions.count() == 3
    assert [await sessions.principal(s) is not None for s in opened] == [False, False, True, True]
    assert await sessions.principal(bobs) is not None  # another token's are not touched


async def test_a_revoked_token_ends_its_sessions(store: Store) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store)
    sid, spare = await sessions.open(token_id), await sessions.open(token_id)
    async with store.session() as session, session.begin():
        await session.execute(update(Token).where(Token.id == token_id).values(revoked_at=now()))
    assert await sessions.principal(sid) is None
    assert await sessions.count() == 1  # that row deleted on sight
    async with store.session() as session:
        token = await session.get(Token, token_id)
    assert token is not None
    await sessions.on_token_revoked(token)
    assert await sessions.count() == 0 and await sessions.principal(spare) is None


async def test_a_bridge_token_opens_no_dashboard(store: Store) -> None:
    token_id = await new_token(store, "olivia", TokenKind.BRIDGE)
    sessions = SessionStore(store)
    assert await sessions.principal(await sessions.open(token_id)) is None


@pytest.mark.parametrize(
    "cookie", [None, "", "x" * 129, "x" * 5000, "sess\u00e9", "unknown", "\x00;drop", "%00"]
)
async def test_malformed_or_unknown_cookies_are_nobody(store: Store, cookie: str | None) -> None:
    token_id = await new_token(store, "olivia")
    sessions = SessionStore(store)
    await sessions.open(token_id)
    assert await sessions.principal(cookie) is None
    await sessions.close(cookie)  # never raises, closes nothing
    assert await sessions.count() == 1


def request(scheme: str = "http", **headers: str) -> Request:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "scheme": scheme, "path": "/login",
                    "headers": [(b"host", b"dash.example:8700"), *raw], "query_string": b""})


@pytest.mark.parametrize(
    "headers, scheme, ok",
    [
        ({}, "http", True),  # no Origin, no Referer: not a browser
        ({"origin": "http://dash.example:8700"}, "http", True),
        ({"origin": "https://dash.example:8700"}, "http", True),  # TLS ends at a proxy
        ({"origin": "http://dash.example:8700"}, "https", False),  # downgrade
        ({"origin": "http://evil.example"}, "http", False),
        ({"origin": "http://dash.example:8701"}, "http", False),
        ({"origin": "null"}, "http", False),
        ({"referer": "http://dash.example:8700/devices"}, "http", True),
        ({"referer": "http://evil.example/dash.example:8700"}, "http", False),
    ],
)
def test_same_origin(headers: dict[str, str], scheme: str, ok: bool) -> None:
    assert same_origin(request(scheme, **headers)) is ok


def test_secure_when_the_browser_uses_https() -> None:
    assert secure_context(request("https"))
    assert secure_context(request("http", origin="https://dash.example:8700"))
    assert not secure_context(request("http", origin="http://dash.example:8700"))
    assert not secure_context(request("http"))
