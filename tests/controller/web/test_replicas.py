"""Dashboard sessions across controllers: two real uvicorn controllers on one database (SQLite
file, and PostgreSQL as in cluster mode), one of them stopped and started again. A session
is the database's, not a process's: any replica accepts it, a sign-out or a revocation on one
ends it on all, and the database never holds the cookie's value."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from controller.auth import use_clock
from controller.config import ControllerConfig
from controller.services import services_of
from controller.store import WebSession, utcnow
from controller.web import COOKIE_NAME
from controller.web.sessions import SESSION_TTL
from tests.controller.conftest import (  # noqa: F401 - fixtures
    ADMIN_TOKEN,
    bearer,
    db_url,
    pg_url,
    sqlite_url,
)
from tests.controller.test_hub_support import InLoopController, fast_settings
from tests.controller.web.conftest import WAIT_S
from tests.controller.web.support import sign_in


@contextlib.asynccontextmanager
async def replica(db_url: str) -> AsyncIterator[InLoopController]:  # noqa: F811
    controller = InLoopController(
        ControllerConfig(db_url=db_url, bootstrap_token=ADMIN_TOKEN, settings=fast_settings())
    )
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


async def user_token(controller: InLoopController, name: str) -> dict[str, Any]:
    created = await controller.http.post("/v1/tokens", json={"kind": "user", "name": name})
    assert created.status_code == 201, created.text
    return dict(created.json())


async def open_session(controller: InLoopController, token: str) -> str:
    async with httpx.AsyncClient(base_url=controller.url, timeout=WAIT_S) as browser:
        response = await sign_in(browser, token, origin=controller.url)
        assert response.status_code == 303, response.text
        return str(browser.cookies[COOKIE_NAME])


def browser(controller: InLoopController, cookie: str | bytes) -> httpx.AsyncClient:
    """A browser sending exactly this cookie (raw: any bytes a client might send)."""
    value = cookie.encode("latin-1") if isinstance(cookie, str) else cookie
    return httpx.AsyncClient(
        base_url=controller.url, timeout=WAIT_S,
        headers={"Cookie": b"%s=%s" % (COOKIE_NAME.encode(), value)},  # type: ignore[dict-item]
    )


async def signed_in(controller: InLoopController, cookie: str | bytes) -> bool:
    """Whether a dashboard page opens with this cookie; else it must be the sign-in redirect."""
    async with browser(controller, cookie) as client:
        response = await client.get("/runs")
    if response.status_code == 200:
        return True
    assert response.status_code == 303, response.text  # never a 500
    assert response.headers["location"] == "/login"
    return False


async def live_view_status(controller: InLoopController, cookie: str | bytes) -> int:
    """The HTTP status refusing the live-logcat WebSocket with this cookie (there is no such
    device: a signed-in caller gets 404, anybody else 401)."""
    ws_url = controller.ws_url + "/devices/nowhere~emulator-5554/logcat/stream"
    value = cookie.decode("latin-1") if isinstance(cookie, bytes) else cookie
    headers = {"Cookie": f"{COOKIE_NAME}={value}", "Origin": controller.url}
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url, additional_headers=headers, open_timeout=WAIT_S):
            pass
    return refused.value.response.status_code


async def stored_values(controller: InLoopController) -> list[str]:
    async with services_of(controller.app).store.session() as session:
        rows = (await session.execute(select(WebSession))).scalars().all()
    return [str(getattr(r, c.key)) for r in rows for c in WebSession.__table__.columns]


async def test_a_session_is_good_on_every_replica_and_across_a_restart(db_url: str) -> None:  # noqa: F811
    async with replica(db_url) as other:
        first = InLoopController(other.config)
        await first.start()
        try:
            token = (await user_token(first, "olivia"))["token"]
            cookie = await open_session(first, token)
            assert await signed_in(other, cookie)
            assert await live_view_status(other, cookie) == 404  # signed in: past the 401
            assert await live_view_status(other, secrets.token_urlsafe(32)) == 401
        finally:
            await first.stop()
        async with replica(db_url) as restarted:
            assert await signed_in(restarted, cookie)
            values = await stored_values(restarted)
            assert values and not any(cookie in v for v in values)  # a digest only
            async with browser(other, cookie) as client:
                out = await client.post("/logout", headers={"origin": other.url})
                assert out.status_code == 303
            assert not await signed_in(restarted, cookie)
            assert not await signed_in(other, cookie)
            assert await stored_values(restarted) == []


async def test_revoking_the_token_on_one_replica_ends_the_session_on_the_other(
    db_url: str,  # noqa: F811
) -> None:
    async with replica(db_url) as one, replica(db_url) as two:
        olivia = await user_token(one, "olivia")
        cookie = await open_session(one, olivia["token"])
        assert await signed_in(two, cookie)
        revoked = await two.http.delete(f"/v1/tokens/{olivia['id']}")
        assert revoked.status_code == 204, revoked.text
        assert not await signed_in(one, cookie)
        assert not await signed_in(two, cookie)


async def test_a_new_sign_in_on_another_replica_closes_the_old_session(db_url: str) -> None:  # noqa: F811
    async with replica(db_url) as one, replica(db_url) as two:
        token = (await user_token(one, "olivia"))["token"]
        old = await open_session(one, token)
        async with browser(two, old) as client:
            response = await sign_in(client, token, origin=two.url)
            assert response.status_code == 303
            new = response.cookies[COOKIE_NAME]
        assert new != old
        assert not await signed_in(one, old)
        assert await signed_in(one, new)


@contextlib.contextmanager
def clock_at(start: datetime) -> Iterator[list[datetime]]:
    """Every controller in this process reads this time (``[0]``, moved by the test)."""
    at = [start]
    previous = use_clock(lambda: at[0])
    try:
        yield at
    finally:
        use_clock(previous)


async def test_a_session_expires_on_every_replica(db_url: str) -> None:  # noqa: F811
    async with replica(db_url) as one, replica(db_url) as two:
        token = (await user_token(one, "olivia"))["token"]
        with clock_at(utcnow()) as at:
            cookie = await open_session(one, token)
            at[0] += timedelta(seconds=SESSION_TTL - 1)
            assert await signed_in(two, cookie)
            at[0] += timedelta(seconds=1)
            assert not await signed_in(two, cookie)
            assert not await signed_in(one, cookie)


@pytest.mark.parametrize(
    "cookie",
    [
        "garbage!!",
        "x" * 4000,  # far beyond any id of ours
        "b_uV1e4yNTeIgVEeJMQQPF4mChqMXLARuuMXlf1TU_A",  # well-formed, unknown (fixed: stable ids)
        '"quoted; value"',
        b"\xe9\xff-not-ascii",
        "",
    ],
)
async def test_bad_cookies_are_simply_signed_out(
    sqlite_url: str, cookie: str | bytes  # noqa: F811
) -> None:
    async with replica(sqlite_url) as controller:
        token = (await user_token(controller, "olivia"))["token"]
        await open_session(controller, token)
        assert not await signed_in(controller, cookie)
        async with browser(controller, cookie) as client:
            assert (await client.get("/login")).status_code == 200  # the form, to sign in
            out = await client.post("/logout", headers={"origin": controller.url})
            assert out.status_code == 303
        if isinstance(cookie, str):  # a WebSocket client sends text headers only
            assert await live_view_status(controller, cookie) == 401
        assert len(await stored_values(controller)) == len(WebSession.__table__.columns)
