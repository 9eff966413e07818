"""``droidwire controller``: serve the controller on uvicorn (thin CLI → config → runner).

WebSocket keepalive is the transport's own ping/pong with the same interval and timeout as
the bridge's (docs/design.md §4.1), read from the one settings object; permessage-deflate is off
(it costs three times the CPU on log streams). uvicorn handles SIGINT/SIGTERM:
it stops accepting, lets open requests finish for ``graceful_shutdown_s``, then runs the
app's shutdown (hub first, store last).

Before serving, a pre-flight check fails fast with one line saying what is wrong and how to
fix it (exit 2), instead of a traceback from the app's start-up: the database must open
(``--db``), Redis must answer (``--redis``), and there must be an admin — a start without
``--bootstrap-token`` / ``DROIDWIRE_BOOTSTRAP_TOKEN`` on a database that holds no live admin
token is refused, since nobody could ever manage that controller (docs/cli.md#serving).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import sys
from typing import Annotated, Any

import typer
import uvicorn

from controller.config import (
    DEFAULT_AGENT_FRAME_BYTES,
    DEFAULT_AGENT_FRAME_TRACES,
    DEFAULT_BORROWER_STREAMS_PER_BRIDGE,
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BRIDGES_PER_USER,
    DEFAULT_MAX_UPLOAD_BYTES,
    DEFAULT_PORT,
    DEFAULT_STREAMS_PER_USER,
    ENV_BOOTSTRAP_TOKEN,
    ENV_DB,
    ENV_REDIS,
    ConfigError,
    ControllerConfig,
    default_db_url,
)
from protocol import redact

__all__ = ["ControllerServer", "controller", "run", "settle_heap", "uvicorn_config"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Young collections between two looks at the oldest generation (CPython's default: 10).
#: With the default, a full collection can come every 70,000 net allocations: a reconnect
#: storm of 5,000 bridges (about 100 tracked objects each) went through five to seven of them,
#: each a single stop of the event loop of 0.2-0.7 s (docs/benchmarks.md, "The storm's loop
#: delay"). At 100 it is every 700,000: none in such a storm; CPython's other condition for a
#: full collection (the survivors since the last one are a quarter of the heap) is unchanged.
FULL_COLLECTION_EVERY = 100


def controller(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = DEFAULT_PORT,
    db: Annotated[
        str | None,
        typer.Option(
            envvar=ENV_DB,
            help="sqlite:///PATH or postgresql://USER@HOST/DB (default: SQLite in the user's data dir).",
        ),
    ] = None,
    redis: Annotated[
        str | None, typer.Option(envvar=ENV_REDIS, help="redis://… for cluster mode.")
    ] = None,
    bootstrap_token: Annotated[
        str | None,
        typer.Option(
            envvar=ENV_BOOTSTRAP_TOKEN,
            show_default=False,
            help=f"An admin token accepted from the first start; required while the database "
            f"holds no admin (prefer {ENV_BOOTSTRAP_TOKEN}: command lines show in ps).",
        ),
    ] = None,
    agent_frame_traces: Annotated[
        int, typer.Option(help="Agent evidence frames: keep those of this many newest traces.")
    ] = DEFAULT_AGENT_FRAME_TRACES,
    agent_frame_bytes: Annotated[
        int, typer.Option(help="Agent evidence frames: keep at most this many bytes of PNG.")
    ] = DEFAULT_AGENT_FRAME_BYTES,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest request body, in bytes (refused 413 before it is read).")
    ] = DEFAULT_MAX_BODY_BYTES,
    max_upload_bytes: Annotated[
        int, typer.Option(help="Largest body of POST /v1/sandbox/execute (prebuilt APKs).")
    ] = DEFAULT_MAX_UPLOAD_BYTES,
    max_bridges_per_user: Annotated[
        int, typer.Option(help="Bridge tokens a user may hold (admins excepted).")
    ] = DEFAULT_MAX_BRIDGES_PER_USER,
    streams_per_user: Annotated[
        int, typer.Option(help="Live logcat streams a user may hold at once.")
    ] = DEFAULT_STREAMS_PER_USER,
    borrower_streams_per_bridge: Annotated[
        int, typer.Option(help="Stream slots of one bridge that borrowers may take together.")
    ] = DEFAULT_BORROWER_STREAMS_PER_BRIDGE,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve the controller: REST, the bridge endpoint, metrics."""
    try:
        config = ControllerConfig(
            host=host,
            port=port,
            db_url=db or default_db_url(),
            redis_url=redis,
            bootstrap_token=bootstrap_token,
            agent_frame_traces=agent_frame_traces,
            agent_frame_bytes=agent_frame_bytes,
            max_body_bytes=max_body_bytes,
            max_upload_bytes=max_upload_bytes,
            max_bridges_per_user=max_bridges_per_user,
            streams_per_user=streams_per_user,
            borrower_streams_per_bridge=borrower_streams_per_bridge,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    try:
        asyncio.run(preflight(config))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    if not run(config, log_level=log_level):
        raise typer.Exit(1)


PREFLIGHT_TIMEOUT_S = 10.0


async def preflight(config: ControllerConfig) -> None:
    """The database opens, Redis answers, an admin exists or is given: else ConfigError."""
    from sqlalchemy import func, select

    from controller.store import Store
    from controller.store.models import Token, TokenKind

    try:
        store = Store(config.db_url)
    except Exception as exc:  # a bad path or driver option: say which URL, not a traceback
        raise ConfigError(f"--db {_safe(config.db_url)}: {_short(exc)}") from None
    try:
        async with asyncio.timeout(PREFLIGHT_TIMEOUT_S):
            await store.ping()
            admins = None
            try:
                async with store.session() as session:
                    admins = (await session.execute(
                        select(func.count()).select_from(Token).where(
                            Token.kind == TokenKind.ADMIN.value, Token.revoked_at.is_(None))
                    )).scalar_one()
            except Exception:
                admins = 0  # a new database: no tables yet, so no admin
    except Exception as exc:
        raise ConfigError(
            f"cannot open the database {_safe(config.db_url)}: {_short(exc)}. Check --db "
            "(or DROIDWIRE_DB): sqlite:///PATH or postgresql://USER@HOST[:PORT]/DB, reachable "
            "from here"
        ) from None
    finally:
        await store.close()
    if config.redis_url is not None:
        await _check_redis(config.redis_url)
    if config.bootstrap_token is None and not admins:
        raise ConfigError(
            "no admin yet: this controller's database holds no admin token, so nobody could "
            f"use it. Give the first one: export {ENV_BOOTSTRAP_TOKEN}=\"$(openssl rand -hex "
            "32)\" (or --bootstrap-token; 16+ characters), then use the same value as "
            "DROIDWIRE_TOKEN"
        )


async def _check_redis(url: str) -> None:
    from redis.asyncio import Redis

    from controller.cluster import parse_redis_url

    try:
        parsed = parse_redis_url(url)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    client = Redis.from_url(parsed.url, socket_connect_timeout=PREFLIGHT_TIMEOUT_S / 2)
    try:
        async with asyncio.timeout(PREFLIGHT_TIMEOUT_S):
            await client.ping()
    except Exception as exc:
        raise ConfigError(
            f"cannot reach Redis at {_safe(url)}: {_short(exc)}. Check --redis (or "
            "DROIDWIRE_REDIS): redis://HOST:PORT/DB, rediss:// for TLS"
        ) from None
    finally:
        await client.aclose()


def _safe(url: str) -> str:
    """A URL fit for a message: its password, if any, hidden."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300].rstrip(".")


def uvicorn_config(
    config: ControllerConfig, *, log_level: str = "info", **overrides: Any
) -> uvicorn.Config:
    """The uvicorn configuration for ``config``; ``overrides`` (tests) win over ours."""
    from controller.app import create_app
    from controller.ws_protocol import RoutingProtocol

    settings = config.settings
    options: dict[str, Any] = dict(
        host=config.host,
        port=config.port,
        lifespan="on",
        # /v1/bridge on websockets' own server connection, other WebSockets on uvicorn's
        # websockets-sansio (paused by bytes queued): controller.ws_protocol
        ws=RoutingProtocol,
        ws_ping_interval=settings.ping_interval_s,
        ws_ping_timeout=settings.ping_timeout_s,
        ws_max_size=settings.max_frame_bytes,
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=config.graceful_shutdown_s,
        log_level=log_level,
        server_header=False,
    )
    options.update(overrides)
    return uvicorn.Config(create_app(config), **options)


def settle_heap() -> None:
    """Make the garbage collector ignore what start-up built, and look at the oldest
    generation less often: for a process that serves the controller, once it has started.

    Start-up (imports, the app, its models and routes, SQLAlchemy's and pydantic's caches:
    about 240,000 tracked objects) lives as long as the process, yet every full collection
    walked all of it: with 5,000 bridges, a third of each 0.2-0.7 s stop of the event loop.
    It is collected once, then frozen (:func:`gc.freeze`: kept out of every later collection;
    garbage made from now on is collected as before). Then :data:`FULL_COLLECTION_EVERY`.
    Never in a process that holds more than one server (tests, the demo, in-process
    benchmarks): whatever they hold at that moment would never be collected again.
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


class ControllerServer(uvicorn.Server):
    """uvicorn's server for a process of its own: :func:`settle_heap` once started."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            settle_heap()


def run(config: ControllerConfig, *, log_level: str = "info") -> bool:
    """Serve until a shutdown signal; False when the app failed to start."""
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    server = ControllerServer(uvicorn_config(config, log_level=log_level))
    redact.install()  # again, for the handlers uvicorn's log config just made
    server.run()
    return server.started
