"""The session table and the origin check, on their own."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from controller.web.sessions import SessionStore, same_origin, secure_context


def test_a_session_maps_to_its_token_and_ends_on_close() -> None:
    sessions = SessionStore()
    sid = sessions.open("tok-1")
    assert sessions.token_id(sid) == "tok-1"
    assert sid not in repr(sessions._sessions)  # only digests are kept
    sessions.close(sid)
    assert sessions.token_id(sid) is None


def test_expired_sessions_are_gone() -> None:
    sessions = SessionStore(ttl=0.0)
    sid = sessions.open("tok-1")
    assert sessions.token_id(sid) is None and len(sessions) == 0


def test_the_table_is_bounded_oldest_first() -> None:
    sessions = SessionStore(max_sessions=2)
    first, second, third = (sessions.open(f"tok-{i}") for i in range(3))
    assert len(sessions) == 2
    assert sessions.token_id(first) is None
    assert sessions.token_id(second) == "tok-1" and sessions.token_id(third) == "tok-2"


@pytest.mark.parametrize("cookie", [None, "", "x" * 500, "sess\u00e9", "unknown"])
def test_malformed_or_unknown_cookies_are_nobody(cookie: str | None) -> None:
    sessions = SessionStore()
    sessions.open("tok-1")
    assert sessions.token_id(cookie) is None
    sessions.close(cookie)  # never raises
    assert len(sessions) == 1


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
