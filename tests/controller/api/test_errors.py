"""RpcError → HTTP problem: one status per code, one body shape, nothing leaked."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import controller.store.store as store_module
from controller.app import HTTP_STATUS, create_app
from controller.config import ControllerConfig
from protocol.errors import ErrorCode, RpcError
from tests.controller.conftest import ADMIN_TOKEN, Api, _api, bearer

EXPECTED = {
    "bad_request": 400,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "device_offline": 409,
    "busy": 429,
    "timeout": 504,
    "cancelled": 409,
    "unavailable": 503,
    "internal": 500,
}


@pytest.fixture
async def api(sqlite_url: str) -> AsyncIterator[Api]:
    app = create_app(ControllerConfig(db_url=sqlite_url))

    @app.get("/raise/{code}")
    async def _raise(code: str) -> None:
        raise RpcError(code, f"{code} happened", {"rule": "r1", "code": "spoofed", "n": 3})

    @app.get("/crash")
    async def _crash() -> None:
        raise RuntimeError("secret internals /etc/passwd")

    async for value in _api(app):
        yield value


def test_every_error_code_has_a_status() -> None:
    assert {code.value: status for code, status in HTTP_STATUS.items()} == EXPECTED
    assert set(HTTP_STATUS) == set(ErrorCode)


@pytest.mark.parametrize(("code", "status"), EXPECTED.items())
async def test_rpc_errors_become_problems(api: Api, code: str, status: int) -> None:
    response = await api.client.get(f"/raise/{code}")
    assert response.status_code == status
    assert response.json() == {
        "error": {"code": code, "message": f"{code} happened", "rule": "r1", "n": 3}
    }


async def test_unexpected_exceptions_are_500_without_details(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    response = await api.client.get("/crash")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "internal error"}}
    assert "passwd" in caplog.text  # logged for the operator, not sent to the client


async def test_framework_errors_share_the_shape(api: Api) -> None:
    missing = await api.client.get("/no/such/route")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong_method = await api.client.put("/healthz")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_a_write_refused_by_a_busy_database_is_503_not_500(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Give up on the lock quickly: this test holds it on purpose for as long as it likes.
    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 50)
    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN))
    async for api in _api(app):
        holder = sqlite3.connect(tmp_path / "controller.db", isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")  # another writer holds SQLite's write lock
            response = await api.client.post(
                "/v1/tokens", json={"kind": "user", "name": "alice"}, headers=bearer(ADMIN_TOKEN)
            )
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "1"
        assert response.json()["error"]["code"] == "unavailable"
        assert response.json()["error"]["reason"] == "store_busy"
        again = await api.client.post(
            "/v1/tokens", json={"kind": "user", "name": "alice"}, headers=bearer(ADMIN_TOKEN)
        )
        assert again.status_code == 201
