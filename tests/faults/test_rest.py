"""Security and bad input at the REST API (controller.app.create_app).

* Tokens never in URLs: every route of the OpenAPI document, called with a valid token in
  ``?token=`` (and its aliases), is refused ``400 token_in_url`` — even with a good header too.
* Tokens never logged: a full create / use / rotate / revoke / refused-use flow runs with every
  logger at DEBUG, through real uvicorn with its access log on; no secret appears in any record.
* Malformed REST: hypothesis fuzzes every route (path params, query params, JSON bodies built
  from the schema with wrong types, raw bytes, wrong content types) → no 5xx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.app import create_app
from controller.config import ControllerConfig
from protocol.settings import DEFAULTS
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer
from tests.faults.figures import record, size

AREA = "security: tokens and REST"
FAST = dataclasses.replace(DEFAULTS.scaled(0.01 * TIME_SCALE), rpc_timeout_s=0.5 * TIME_SCALE)
URL_PARAMS = ["token", "access_token", "api_key", "TOKEN", "Auth"]


def _config(tmp_path: Path) -> ControllerConfig:
    return ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", bootstrap_token=ADMIN_TOKEN,
                            settings=FAST)


@contextlib.asynccontextmanager
async def _client(tmp_path: Path) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with its lifespan running, and an httpx client speaking ASGI to it (entered
    and left in the test's own task: the lifespan's cancel scopes require it)."""
    app = create_app(_config(tmp_path))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://controller.test") as http,
    ):
        yield app, http


def _routes(app: FastAPI) -> list[tuple[str, str, dict[str, Any]]]:
    doc = app.openapi()
    return [(method.upper(), path, op) for path, ops in doc["paths"].items()
            for method, op in ops.items()]


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "0123456789abcdef0123456789abcdef", path)


async def test_a_token_in_the_url_is_refused_on_every_route(tmp_path: Path) -> None:
    async with _client(tmp_path) as (app, http):
        await _token_in_url(app, http)


async def _token_in_url(app: FastAPI, http: httpx.AsyncClient) -> None:
    tried = accepted = 0
    for method, path, _ in _routes(app):
        if path in ("/healthz", "/metrics", "/openapi.json"):
            continue  # public, and they read no token at all
        for name in URL_PARAMS:
            for headers in ({}, bearer(ADMIN_TOKEN)):
                tried += 1
                response = await http.request(method, _concrete(path), params={name: ADMIN_TOKEN},
                                               headers=headers, json={} if method == "POST" else None)
                refused = (response.status_code == 400
                           and response.json()["error"].get("rule") == "token_in_url")
                if not refused or ADMIN_TOKEN in response.text:
                    accepted += 1
    record(AREA, "requests with a token in the URL", tried)
    record(AREA, "  accepted (not refused with token_in_url)", accepted, must_be_zero=True)
    assert tried >= 50 and accepted == 0


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, rec: logging.LogRecord) -> None:
        try:
            text = rec.getMessage()
        except Exception:
            text = f"{rec.msg} {rec.args}"
        self.records.append(f"{rec.name} {text} {rec.exc_text or ''}")


def test_no_secret_is_ever_logged_during_a_token_lifecycle(tmp_path: Path) -> None:
    capture = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    secrets = [ADMIN_TOKEN]
    live = LiveController(_config(tmp_path))
    live.server.config.access_log = True  # as in production (`droidwire serve`, level info)
    # uvicorn's own logging config (applied by any earlier in-process server) stops its loggers
    # propagating to the root: capture them directly, once each, whatever ran before.
    saved = []
    for name in ("uvicorn", "uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate, logger.disabled))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.disabled = False
        logger.addHandler(capture)
    try:
        with live, httpx.Client(base_url=live.url, timeout=30 * TIME_SCALE) as http:
            admin = bearer(ADMIN_TOKEN)
            user = http.post("/v1/tokens", json={"kind": "user", "name": "alice"}, headers=admin)
            assert user.status_code == 201, user.text
            secrets.append(user.json()["token"])
            bridge = http.post("/v1/tokens", json={"kind": "bridge", "name": "pi"},
                               headers=bearer(user.json()["token"]))
            assert bridge.status_code == 201, bridge.text
            secrets.append(bridge.json()["token"])
            assert http.get("/v1/tokens", headers=bearer(secrets[1])).status_code == 200
            assert http.get("/v1/devices", headers=bearer(secrets[1])).status_code == 200
            # A client that puts the token in the URL is refused; its URL must not be logged.
            assert http.get("/v1/tokens", params={"token": secrets[1]}).status_code == 400
            rotated = http.post(f"/v1/tokens/{user.json()['id']}/rotate", headers=admin)
            assert rotated.status_code == 201, rotated.text
            secrets.append(rotated.json()["token"])
            assert http.get("/v1/tokens", headers=bearer(secrets[1])).status_code == 401
            assert http.delete(f"/v1/tokens/{rotated.json()['id']}", headers=admin
                               ).status_code == 204
            assert http.get("/v1/tokens", headers=bearer(secrets[3])).status_code == 401
            # A bridge token where a user token belongs, and a wrong token.
            assert http.get("/v1/tokens", headers=bearer(secrets[2])).status_code == 403
            assert http.get("/v1/tokens", headers=bearer(secrets[2] + "x")).status_code == 401
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
        for logger, level, propagate, disabled in saved:
            logger.removeHandler(capture)
            logger.setLevel(level)
            logger.propagate = propagate
            logger.disabled = disabled
    # The test's own HTTP client logs its URLs (httpx, httpcore): that is the caller's side.
    server = [line for line in capture.records if not line.startswith(("httpx", "httpcore"))]
    leaks = [line for line in server for s in secrets if s in line]
    from_url = [line for line in leaks if "token=" in line]
    others = [line for line in leaks if "token=" not in line]
    record(AREA, "controller log records during the token lifecycle", len(server))
    record(AREA, "  records containing a secret (header-borne tokens)", len(others),
           must_be_zero=True)
    record(AREA, "  records echoing a token a client put in the URL", len(from_url),
           must_be_zero=True)
    assert any(line.startswith("uvicorn.access") for line in server), "no access log seen"
    assert not others, others[:3]
    assert not from_url, from_url[:3]


# -- malformed REST ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=10,
)
odd_text = st.text(max_size=60) | st.sampled_from(
    ["..", "../../etc/passwd", "%00", "\x00", "a" * 5000, "pi~", "~", "-1", "1e999", "null",
     "ü~emulator-5554", "127.0.0.1:5555", "0123456789abcdef0123456789abcdef"])


def _body_for(op: dict[str, Any], doc: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A body with the schema's property names and random values, or any JSON at all."""
    schema = (op.get("requestBody", {}).get("content", {}).get("application/json", {})
              .get("schema", {}))
    ref = schema.get("$ref", "")
    if ref:
        schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    props = list(schema.get("properties", {}))
    if not props:
        return json_values
    return st.dictionaries(st.sampled_from(props) | st.text(max_size=8), json_values,
                           max_size=len(props) + 1) | json_values


@st.composite
def _request(draw: st.DrawFn, method: str, path: str, op: dict[str, Any],
             doc: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """One hostile request for a route: (method, url, httpx keyword arguments)."""

    def segment(_: re.Match[str]) -> str:
        text = draw(odd_text)
        return text.replace("%", "%25").replace("/", "%2F").replace("?", "%3F").replace(
            "#", "%23") or "x"

    url = re.sub(r"\{[^}]+\}", segment, path)
    params = {p["name"]: draw(odd_text) for p in op.get("parameters", [])
              if p["in"] == "query" and draw(st.booleans())}
    headers = bearer(ADMIN_TOKEN)
    kwargs: dict[str, Any] = {"params": params, "headers": headers}
    kind = draw(st.sampled_from(["json", "json", "json", "raw", "form", "none"]))
    if kind == "json":
        kwargs["content"] = json.dumps(draw(_body_for(op, doc))).encode()
        headers["content-type"] = "application/json"
    elif kind == "raw":
        kwargs["content"] = draw(st.binary(max_size=200))
        headers["content-type"] = draw(
            st.sampled_from(["application/json", "text/plain", "application/x-msgpack"]))
    elif kind == "form":
        kwargs["data"] = {"a": "b"}
    return method, url, kwargs


async def test_malformed_rest_never_answers_5xx(tmp_path: Path) -> None:
    async with _client(tmp_path) as (app, http):
        await _malformed(app, http)


async def _malformed(app: FastAPI, http: httpx.AsyncClient) -> None:
    doc = app.openapi()
    routes = _routes(app)
    per_route = max(10, size(3_000, 160) // len(routes))
    requests: list[tuple[str, str, dict[str, Any]]] = []
    for method, path, op in routes:
        # hypothesis drives sync functions: draw the requests here, send them below
        @settings(max_examples=per_route, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(_request(method, path, op, doc))
        def draw(request: tuple[str, str, dict[str, Any]]) -> None:
            requests.append(request)

        draw()
    statuses: dict[int, int] = {}
    failures: list[str] = []
    for method, url, kwargs in requests:
        try:
            response = await http.request(method, url, **kwargs)
        except httpx.InvalidURL:
            continue  # the client would not send it
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        if response.status_code >= 500:
            failures.append(f"{method} {url} {kwargs.get('content', b'')!r:.120} -> "
                            f"{response.status_code} {response.text[:200]}")
    record(AREA, "malformed REST requests (all OpenAPI routes)", sum(statuses.values()))
    record(AREA, "  answered 4xx", sum(n for s, n in statuses.items() if 400 <= s < 500))
    record(AREA, "  answered 5xx", len(failures), must_be_zero=True)
    assert sum(statuses.values()) >= len(routes) * 3
    assert not failures, "\n".join(failures[:5])
