"""controller.limits: request bodies are bounded before they are read (docs/security.md,
"Bounds and secrets"). Driven through the real app over httpx's ASGI transport; the
socket-level cases (a 150 MB body, chunked) run against a real process in tests/security."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from controller.app import create_app
from controller.config import ControllerConfig
from tests.controller.conftest import ADMIN_TOKEN, Api, _api, bearer

LIMIT = 4096
UPLOAD = 64 * 1024


@pytest.fixture
async def small(sqlite_url: str) -> AsyncIterator[Api]:
    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN,
                                      max_body_bytes=LIMIT, max_upload_bytes=UPLOAD))
    async for value in _api(app):
        yield value


def _refused(response: object) -> dict[str, object]:
    assert getattr(response, "status_code", None) == 413, getattr(response, "text", response)
    error: dict[str, object] = response.json()["error"]  # type: ignore[attr-defined]
    assert error["rule"] == "body_too_large"
    return error


async def test_a_declared_body_over_the_limit_is_refused_unread(small: Api) -> None:
    body = b"x" * (LIMIT + 1)
    response = await small.client.post("/v1/grants", content=body, headers={
        **bearer(ADMIN_TOKEN), "content-type": "application/json"})
    assert _refused(response)["limit"] == LIMIT


async def test_a_streamed_body_is_cut_at_the_limit(small: Api) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1000):
            sent += 1024
            yield b"[" * 1024

    response = await small.client.post("/v1/grants", content=chunks(),
                                       headers=bearer(ADMIN_TOKEN))
    _refused(response)


async def test_bodies_within_the_limit_pass(small: Api) -> None:
    response = await small.client.post("/v1/tokens", json={"kind": "user", "name": "ok"},
                                       headers=bearer(ADMIN_TOKEN))
    assert response.status_code == 201, response.text


async def test_the_upload_limit_is_for_a_valid_token_only(small: Api) -> None:
    body = b"{" + b" " * (LIMIT * 4) + b"}"
    stranger = await small.client.post("/v1/sandbox/execute", content=body,
                                       headers={"content-type": "application/json"})
    _refused(stranger)
    forged = await small.client.post("/v1/sandbox/execute", content=body, headers={
        **bearer("dw_u_forged-token-abcdefghijklmnopqrstuvwxyz"),
        "content-type": "application/json"})
    _refused(forged)
    known = await small.client.post("/v1/sandbox/execute", content=body, headers={
        **bearer(ADMIN_TOKEN), "content-type": "application/json"})
    assert known.status_code == 422 or known.status_code == 400, known.text  # read, then judged
    huge = await small.client.post("/v1/sandbox/execute", content=b" " * (UPLOAD + 1),
                                   headers={**bearer(ADMIN_TOKEN),
                                            "content-type": "application/json"})
    assert _refused(huge)["limit"] == UPLOAD


async def test_file_and_app_transfers_have_their_own_larger_limit_for_a_valid_caller(
    sqlite_url: str,
) -> None:
    """A push (``PUT …/files``) is streamed to the bridge chunk by chunk, so it is bounded by
    ``max_transfer_bytes``, not by the ordinary body limit — for a valid token only."""
    transfer = 256 * 1024
    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN,
                                      max_body_bytes=LIMIT, max_upload_bytes=UPLOAD,
                                      max_transfer_bytes=transfer))
    async for api in _api(app):
        path = "/v1/devices/nope~serial/files?path=/data/local/tmp/x"
        body = b"x" * (LIMIT * 4)
        # A stranger never gets past the ordinary limit.
        _refused(await api.client.put(path, content=body))
        # The owner of a valid token does: the route answers (here: no such device).
        response = await api.client.put(path, content=body, headers=bearer(ADMIN_TOKEN))
        assert response.status_code == 404, response.text
        # Past the transfer limit, refused unread even for a valid token.
        error = _refused(await api.client.put(path, content=b"x" * (transfer + 1),
                                              headers=bearer(ADMIN_TOKEN)))
        assert error["limit"] == transfer
