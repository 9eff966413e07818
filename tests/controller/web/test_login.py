"""Signing in to the dashboard: the cookie's attributes, refusals, and the token staying out
of every URL and every page (docs/design.md §6)."""

from __future__ import annotations

import pytest

from controller.services import services_of
from controller.web import COOKIE_NAME
from tests.controller.web.conftest import Stack
from tests.controller.web.support import attributes, set_cookie_header, sign_in

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package")]


async def test_sign_in_sets_an_opaque_strict_httponly_cookie(stack: Stack) -> None:
    token = stack.tokens["olivia"]
    async with stack.client() as browser:
        response = await sign_in(browser, token, origin=stack.url)
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        header = set_cookie_header(response)
        attrs = attributes(header)
        assert "httponly" in attrs
        assert attrs["samesite"].lower() == "strict"
        assert attrs["path"] == "/"
        assert "secure" not in attrs  # plain http on loopback: a Secure cookie would be lost
        session_id = browser.cookies[COOKIE_NAME]
        assert token not in header and session_id != token and len(session_id) >= 40

        page = await browser.get("/devices")
        assert page.status_code == 200
        assert "olivia" in page.text and stack.device_id in page.text
        assert token not in page.text
        assert "no-store" in page.headers["cache-control"]
        assert "script-src 'self'" in page.headers["content-security-policy"]


async def test_a_new_sign_in_gets_a_new_session_id(stack: Stack) -> None:
    async with stack.client() as browser:
        await sign_in(browser, stack.tokens["olivia"])
        first = browser.cookies[COOKIE_NAME]
        await sign_in(browser, stack.tokens["olivia"])
        second = browser.cookies[COOKIE_NAME]
        assert first != second
        browser.cookies.clear()
        browser.cookies.set(COOKIE_NAME, first)
        stale = await browser.get("/devices")
        assert stale.status_code == 303 and stale.headers["location"] == "/login"


@pytest.mark.parametrize(
    "token, status",
    [("dw_u_not-a-real-token-at-all", 401), ("", 400), ("x" * 300, 401)],
)
async def test_a_wrong_token_gets_no_cookie_and_is_not_echoed(
    stack: Stack, token: str, status: int
) -> None:
    async with stack.client() as browser:
        response = await sign_in(browser, token)
        assert response.status_code == status
        assert not response.headers.get_list("set-cookie")
        if token:
            assert token not in response.text
        assert 'type="password"' in response.text  # the form again, to retry
        assert (await browser.get("/devices")).status_code == 303


async def test_a_bridge_token_cannot_sign_in(stack: Stack) -> None:
    async with stack.client() as browser:
        response = await sign_in(browser, stack.bridge_token)
        assert response.status_code == 403
        assert not response.headers.get_list("set-cookie")
        assert stack.bridge_token not in response.text


async def test_a_token_in_the_url_is_refused_and_not_echoed(stack: Stack) -> None:
    token = stack.tokens["bob"]
    async with stack.client() as browser:
        for response in (
            await browser.get("/login", params={"token": token}),
            await browser.post("/login", params={"access_token": token}, data={"token": token}),
        ):
            assert response.status_code == 400
            assert token not in response.text
            assert "revoke" in response.text
            assert not response.headers.get_list("set-cookie")


async def test_the_login_form_posts_the_token_in_the_body(stack: Stack) -> None:
    async with stack.client() as browser:
        form = (await browser.get("/login")).text
        assert '<form class="login" method="post" action="/login">' in form
        assert 'name="token" type="password"' in form
        # Unsigned pages send the browser to the form, not to a URL carrying anything.
        for path in ("/", "/devices", "/runs", f"/runs/{stack.run_id}"):
            response = await browser.get(path)
            assert response.status_code == 303 and response.headers["location"] == "/login"


async def test_cross_site_posts_are_refused(stack: Stack) -> None:
    async with stack.client() as browser:
        for headers in ({"origin": "http://evil.example"}, {"origin": "null"},
                        {"referer": "http://evil.example/page"}):
            response = await sign_in(browser, stack.tokens["olivia"], **headers)
            assert response.status_code == 403, headers
            assert not response.headers.get_list("set-cookie")
        await sign_in(browser, stack.tokens["olivia"])
        forged = await browser.post("/logout", headers={"origin": "http://evil.example"})
        assert forged.status_code == 403
        assert (await browser.get("/devices")).status_code == 200  # still signed in


async def test_sign_out_ends_the_session_on_the_server(stack: Stack) -> None:
    async with stack.client() as browser:
        await sign_in(browser, stack.tokens["olivia"])
        session_id = browser.cookies[COOKIE_NAME]
        response = await browser.post("/logout", headers={"origin": stack.url})
        assert response.status_code == 303 and response.headers["location"] == "/login"
        assert 'max-age=0' in set_cookie_header(response).lower()
        browser.cookies.clear()
        browser.cookies.set(COOKIE_NAME, session_id)  # a copy kept by someone
        assert (await browser.get("/devices")).status_code == 303


async def test_revoking_the_token_ends_its_sessions(stack: Stack) -> None:
    async with stack.api("olivia") as olivia:
        created = await olivia.post("/v1/tokens", json={"kind": "user", "name": "olivia"})
        assert created.status_code == 201, created.text
        extra = created.json()
        async with stack.client() as browser:
            await sign_in(browser, extra["token"])
            assert (await browser.get("/devices")).status_code == 200
            revoked = await olivia.delete(f"/v1/tokens/{extra['id']}")
            assert revoked.status_code == 204, revoked.text
            response = await browser.get("/devices")
            assert response.status_code == 303 and response.headers["location"] == "/login"


async def test_the_dashboard_cookie_does_not_open_the_api(stack: Stack) -> None:
    """The REST API stays Bearer-only: a cookie there would make it forgeable cross-site."""
    async with stack.client() as browser:
        await sign_in(browser, stack.tokens["olivia"])
        assert (await browser.get("/v1/devices")).status_code == 401


async def test_behind_a_tls_proxy_the_cookie_is_secure(stack: Stack) -> None:
    """nginx terminates TLS and forwards plain http: the browser's origin says https."""
    https_origin = stack.url.replace("http://", "https://")
    async with stack.client() as browser:
        response = await sign_in(browser, stack.tokens["olivia"], origin=https_origin)
        assert response.status_code == 303
        assert "secure" in attributes(set_cookie_header(response))
        other_port = stack.url.rsplit(":", 1)[0] + ":1"
        refused = await sign_in(browser, stack.tokens["olivia"], origin=other_port)
        assert refused.status_code == 403


async def test_sign_ins_are_audited(stack: Stack) -> None:
    from sqlalchemy import select

    from controller.store import AuditEntry

    async with stack.client() as browser:
        await sign_in(browser, stack.tokens["bob"])
    async with services_of(stack.controller.app).store.session() as session:
        actors = (await session.execute(
            select(AuditEntry.actor).where(AuditEntry.action == "web.login")
        )).scalars().all()
    assert "bob" in actors
