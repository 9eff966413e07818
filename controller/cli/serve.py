"""``droidwire controller``: serve the controller on uvicorn (thin CLI → config → runner).

WebSocket keepalive is the transport's own ping/pong with the same interval and timeout as
the bridge's (DESIGN.md §4.1), read from the one settings object; permessage-deflate is off
(it costs three times the CPU on log streams, issue 4 §6). uvicorn handles SIGINT/SIGTERM:
it stops accepting, lets open requests finish for ``graceful_shutdown_s``, then runs the
app's shutdown (hub first, store last).
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any

import typer
import uvicorn

from controller.config import (
    DEFAULT_AGENT_FRAME_BYTES,
    DEFAULT_AGENT_FRAME_TRACES,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_BOOTSTRAP_TOKEN,
    ENV_DB,
    ENV_REDIS,
    ConfigError,
    ControllerConfig,
    default_db_url,
)

__all__ = ["controller", "run", "uvicorn_config"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def controller(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = DEFAULT_PORT,
    db: Annotated[
        str | None,
        typer.Option(
            envvar=ENV_DB,
            help="sqlite:///PATH or postgresql://USER@HOST/DB  [default: SQLite in the user's data dir]",
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
            help=f"An admin token accepted from the first start (prefer {ENV_BOOTSTRAP_TOKEN}).",
        ),
    ] = None,
    agent_frame_traces: Annotated[
        int, typer.Option(help="Agent evidence frames: keep those of this many newest traces.")
    ] = DEFAULT_AGENT_FRAME_TRACES,
    agent_frame_bytes: Annotated[
        int, typer.Option(help="Agent evidence frames: keep at most this many bytes of PNG.")
    ] = DEFAULT_AGENT_FRAME_BYTES,
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
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    if not run(config, log_level=log_level):
        raise typer.Exit(1)


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


def run(config: ControllerConfig, *, log_level: str = "info") -> bool:
    """Serve until a shutdown signal; False when the app failed to start."""
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    server = uvicorn.Server(uvicorn_config(config, log_level=log_level))
    server.run()
    return server.started
