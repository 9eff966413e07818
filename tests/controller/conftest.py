"""Fixtures for the controller: databases (SQLite, and PostgreSQL when ``DATABASE_URL`` is
set), an app driven in-process through httpx's ASGI transport, and a live controller on real
uvicorn over a loopback socket.

PostgreSQL isolation: each test that asks for it gets a database of its own, created from
``DATABASE_URL``'s server and dropped afterwards, so parallel runs never collide.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from controller.app import create_app
from controller.config import ControllerConfig
from droidwire.serve import uvicorn_config
from tests.conftest import require_service

ADMIN_TOKEN = "test-bootstrap-" + secrets.token_urlsafe(16)
# Waiting on a server thread that was told to stop; generous, never a synchronisation sleep.
THREAD_JOIN_TIMEOUT_S = 30.0


def _plain_pg_url(url: str) -> str:
    """asyncpg takes libpq-style URLs without a SQLAlchemy driver suffix."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for this test (dropped afterwards)."""
    base = _plain_pg_url(require_service("DATABASE_URL"))
    name = f"dw_test_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(base)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'controller.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on SQLite and on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    """An app with its lifespan running, and an httpx client speaking ASGI to it."""

    app: FastAPI
    client: httpx.AsyncClient

    async def new_token(
        self, kind: str, name: str, *, as_token: str = ADMIN_TOKEN
    ) -> dict[str, str]:
        response = await self.client.post(
            "/v1/tokens", json={"kind": kind, "name": name}, headers=bearer(as_token)
        )
        assert response.status_code == 201, response.text
        return dict(response.json())


async def _api(app: FastAPI) -> AsyncIterator[Api]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://controller.test") as client,
    ):
        yield Api(app, client)


@pytest.fixture
async def api(sqlite_url: str) -> AsyncIterator[Api]:
    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN))
    async for value in _api(app):
        yield value


class LiveController:
    """A controller on real uvicorn in a thread of its own, on a pre-bound loopback socket.

    The socket listens before the server thread starts, so clients can connect at once: the
    kernel queues them until uvicorn, its start-up done, accepts them. No readiness polling.
    """

    def __init__(
        self, config: ControllerConfig, customize: Callable[[FastAPI], None] | None = None
    ) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on an accepted socket only when
        # its proto says TCP, and accepted sockets take the listening socket's (else Nagle and
        # delayed ACKs add ~40 ms to every request). Set on the listener too: Linux copies it.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        uv_config = uvicorn_config(config, log_level="warning", log_config=None)
        if customize is not None:
            customize(uv_config.app)  # type: ignore[arg-type]
        self.server = uvicorn.Server(uv_config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="live-controller"
        )

    def __enter__(self) -> LiveController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(THREAD_JOIN_TIMEOUT_S)
        self.sock.close()
        assert not self._thread.is_alive(), "controller thread did not stop"


@pytest.fixture
def live_controller(db_url: str) -> Iterator[LiveController]:
    """A real controller (SQLite and PostgreSQL) with ``ADMIN_TOKEN`` as bootstrap token."""
    with LiveController(ControllerConfig(db_url=db_url, bootstrap_token=ADMIN_TOKEN)) as live:
        yield live
