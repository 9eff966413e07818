"""The controller's FastAPI application: ``create_app(config)``.

Start-up order (lifespan): open the store → migrate its schema under the migration lock →
install the bootstrap admin token → start the components (the bridge hub, …) → serve.
Shutdown runs the same stack in reverse, so the hub closes its bridges before the store goes.

Errors become HTTP problems here and nowhere else (errors are translated once, at each boundary): handlers raise
:class:`protocol.errors.RpcError`, and the client sees ``{"error": {"code", "message",
…data}}`` with the status of :data:`HTTP_STATUS`. Statuses chosen where the spec was open:

- ``device_offline`` → 409: the request conflicts with the device's current state; it is
  not the controller failing, so it does not page anyone watching 5xx rates, and a load
  balancer never retries a non-idempotent call elsewhere because of it.
- ``busy`` → 429 (too many requests for that device right now), ``cancelled`` → 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.websockets import WebSocket
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from controller.access import AccessWatch
from controller.api import (
    agent,
    audit,
    bridges,
    devices,
    grants,
    manage,
    ops,
    perf,
    reservations,
    sandbox,
    tokens,
    users,
)
from controller.api.errors import ERROR_RESPONSES, error_body, install_openapi
from controller.audit import AuditLog
from controller.auth.tokens import Unauthenticated, ensure_bootstrap_admin
from controller.config import ControllerConfig
from controller.health import HealthMonitor
from controller.hub import Hub
from controller.hub import endpoint as hub_endpoint
from controller.limits import BodyLimit
from controller.loans import Loans
from controller.mcp import MCP_PATH, McpEndpoint, McpService
from controller.mcp.oauth import router as oauth_router
from controller.mcp.oauth import www_authenticate
from controller.metrics import Metrics, MetricsMiddleware
from controller.redact import install_access_log_redaction
from controller.services import Services
from controller.store import Store, Token, is_busy
from controller.web import SessionStore, manage_pages
from controller.web import router as web_router
from protocol import redact
from protocol.closecodes import CloseCode
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "HTTP_STATUS",
    "ControllerApp",
    "RevocationHook",
    "create_app",
    "error_body",
    "error_response",
]

log = logging.getLogger("droidwire.controller.app")

HTTP_STATUS: Mapping[ErrorCode, int] = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.DEVICE_OFFLINE: 409,
    ErrorCode.BUSY: 429,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.CANCELLED: 409,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
}
# Errors raised by the framework itself (unknown route, wrong method, …), by status.
_CODE_FOR_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
}

# Closing a WebSocket that fails before a denial response can be sent (see ``_problem``).
_CLOSE_CODE: Mapping[ErrorCode, int] = {
    ErrorCode.BAD_REQUEST: CloseCode.BAD_REQUEST,
    ErrorCode.FORBIDDEN: CloseCode.FORBIDDEN,
    ErrorCode.NOT_FOUND: CloseCode.BAD_REQUEST,
    ErrorCode.UNAVAILABLE: CloseCode.TRY_AGAIN_LATER,
}

RevocationHook = Callable[[Token], Awaitable[None]]
# Seconds a client told "store busy" (503) should wait before it retries.
STORE_BUSY_RETRY_AFTER_S = "1"


def error_response(exc: RpcError) -> JSONResponse:
    return JSONResponse(
        error_body(exc.code.value, exc.message, exc.data), status_code=HTTP_STATUS[exc.code]
    )


async def _problem(
    conn: Request, response: JSONResponse, close_code: int, reason: str
) -> Response | None:
    """``response`` for HTTP; on a WebSocket, the same response refuses the handshake.

    A dependency that fails on a WebSocket route (``Authenticated`` on a log stream, say)
    runs before ``accept()``: Starlette sends the returned response through the ASGI
    denial-response extension, so the client gets a real HTTP 401/403 as for plain requests.
    A server without that extension gets a close with ``close_code`` instead. (Errors after
    ``accept()`` are the route's to handle: it owns the socket.)
    """
    if conn.scope["type"] == "websocket" and "websocket.http.response" not in conn.scope.get(
        "extensions", {}
    ):
        with contextlib.suppress(RuntimeError):
            await WebSocket(conn.scope, conn.receive, conn._send).close(close_code, reason[:100])
        return None
    return response


async def _rpc_error(conn: Request, exc: Exception) -> Response | None:
    assert isinstance(exc, RpcError)
    close_code = _CLOSE_CODE.get(exc.code, CloseCode.INTERNAL_ERROR)
    return await _problem(conn, error_response(exc), close_code, exc.message)


async def _unauthenticated(conn: Request, exc: Exception) -> Response | None:
    assert isinstance(exc, Unauthenticated)
    response = JSONResponse(
        error_body("unauthorized", exc.message),
        status_code=401,
        headers={"WWW-Authenticate": www_authenticate(conn, exc.message)},
    )
    return await _problem(conn, response, CloseCode.UNAUTHORIZED, exc.message)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Location and reason only: pydantic's "input" would echo the request body back.
    problems = [
        {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))}
        for e in exc.errors()
    ]
    return JSONResponse(
        error_body(ErrorCode.BAD_REQUEST.value, "invalid request", {"errors": problems}),
        status_code=400,
    )


async def _http_exception(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = _CODE_FOR_STATUS.get(status, "internal" if status >= 500 else "bad_request")
    return JSONResponse(error_body(code, str(exc.detail)), status_code=status, headers=exc.headers)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return JSONResponse(error_body(ErrorCode.INTERNAL.value, "internal error"), status_code=500)


async def _store_error(conn: Request, exc: Exception) -> Response | None:
    """A busy SQLite database that outlasted the busy timeout and the retries: ``unavailable``
    (503, ``Retry-After``), which a client may retry, not a 500; other store errors are 500s."""
    if not is_busy(exc):
        raise exc  # to the catch-all: a 500, logged
    log.warning("store busy, request refused with 503: %s", exc)
    response = error_response(
        RpcError(ErrorCode.UNAVAILABLE, "the store is busy: retry shortly",
                 {"reason": "store_busy"})
    )
    response.headers["Retry-After"] = STORE_BUSY_RETRY_AFTER_S
    return await _problem(conn, response, CloseCode.TRY_AGAIN_LATER, "store busy")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Build the app's services in start order, as local variables, and publish them once all
    are built, as one object (``app.state.services``, :mod:`controller.services`); they stop in
    reverse order. Until then, and after, a reader gets ``unavailable`` (a bridge or request
    arriving early is refused, not served half-built parts)."""
    config: ControllerConfig = app.state.config
    hooks: list[RevocationHook] = app.state.revocation_hooks
    async with AsyncExitStack() as stack:
        store = Store(config.db_url)
        stack.push_async_callback(store.close)
        await store.migrate()
        if config.bootstrap_token is not None:
            await ensure_bootstrap_admin(store, config.bootstrap_token)
        audit = AuditLog(store)
        # Dashboard sessions live in the store: any replica, any restart (controller.web).
        web_sessions = SessionStore(store)
        hooks.append(web_sessions.on_token_revoked)
        stack.callback(hooks.remove, web_sessions.on_token_revoked)
        # Components start here, after the store, and stop in reverse order before it:
        # e.g. ``hub = await stack.enter_async_context(Hub(...))``.
        hub = await stack.enter_async_context(
            Hub(
                store=store,
                audit=audit,
                settings=config.settings,
                registry=app.state.metrics.registry,
            )
        )
        hub.streams_per_user = config.streams_per_user
        hub.borrower_streams_per_bridge = config.borrower_streams_per_bridge
        # Runs and live streams end when their caller's right lapses (controller.access).
        access = await stack.enter_async_context(
            AccessWatch(store, recheck_s=config.settings.stream_reauth_s)
        )
        hooks.append(access.on_token_revoked)
        stack.callback(hooks.remove, access.on_token_revoked)
        cluster: Cluster | None = None
        recovery_tasks: set[asyncio.Future[Any]] = set()  # a lost replica's runs, taken over
        if config.redis_url is not None:
            # Cluster mode: joins after the hub, leaves before it (releasing its bridges).
            # When a replica dies, one survivor ends the runs it left unfinished, or resumes
            # those whose bridge may hold their instrumentation result (docs/cluster.md) —
            # with this store and hub, even before the services are published.
            from controller.cluster import Cluster

            async def replica_lost(_replicas: list[str]) -> None:
                await sandbox.take_over(app, recovery_tasks, store, hub)

            cluster = await stack.enter_async_context(
                Cluster(config.redis_url, hub=hub, on_replica_lost=replica_lost)
            )
            hub.cluster = cluster
            cluster.access = access
            stack.callback(setattr, hub, "cluster", None)
            hooks.append(cluster.revoked)
            stack.callback(hooks.remove, cluster.revoked)
        # What borrowers leave on lent devices goes when their loans end (controller.loans).
        loans = await stack.enter_async_context(
            Loans(store, hub, audit, sweep_s=config.loan_sweep_s).running()
        )
        hub.tunnels.on_installed = loans.installed_through_tunnel
        stack.callback(setattr, hub.tunnels, "on_installed", None)
        # Device health: read every health_poll_s; the owner's thresholds gate device calls.
        health = await stack.enter_async_context(
            HealthMonitor(hub, poll_s=config.health_poll_s).running()
        )
        hub.gate = health.check
        stack.callback(setattr, hub, "gate", None)
        hooks.append(hub.on_token_revoked)
        stack.callback(hooks.remove, hub.on_token_revoked)
        # The app's services, as one typed object (controller.services): the sandbox executor
        # is built here, once, over the hub.
        app.state.services = Services(
            config=config, store=store, audit=audit, web_sessions=web_sessions,
            hub=hub, access=access, loans=loans, health=health,
            executor=sandbox.build_executor(app, store, hub, access, cluster), cluster=cluster,
            recovery_tasks=recovery_tasks,
        )
        stack.callback(setattr, app.state, "services", None)
        # Background sandbox runs (``?wait=false``) are cancelled before the hub closes.
        stack.push_async_callback(sandbox.close_executor, app)
        # MCP (stateless streamable HTTP) stops first: no tool call starts on a closing hub.
        app.state.mcp = await stack.enter_async_context(McpService(audit).run())
        log.info("controller ready (store %r)", store)
        yield
        log.info("controller shutting down")


def _route_path(scope: Scope) -> str:
    """The request path below the app's mount point (``root_path``), as Starlette routes it."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


class ControllerApp(FastAPI):
    """FastAPI, except that bridge WebSockets (``/v1/bridge``) go straight to their endpoint,
    past the middleware stack and the router: see :mod:`controller.hub.endpoint` for why
    and for what it does in their place."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and _route_path(scope) == hub_endpoint.BRIDGE_PATH:
            scope["app"] = self
            await hub_endpoint.bridge_endpoint(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(config: ControllerConfig | None = None) -> ControllerApp:
    """A controller app for ``config`` (defaults plus ``DROIDWIRE_*`` environment if None)."""
    config = config if config is not None else ControllerConfig.from_env()
    app = ControllerApp(
        title="droidwire controller",
        version="1",
        lifespan=_lifespan,
        # The bundled API browsers load scripts from a CDN; the schema stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
        responses=ERROR_RESPONSES,  # every route declares the typed error body
    )
    install_access_log_redaction()  # a token wrongly put in a URL never reaches the log
    redact.add_secret(config.bootstrap_token)  # the one token without a recognisable prefix
    redact.install()  # no token in any record of any logger, at any level
    app.state.config = config
    app.state.metrics = Metrics()
    app.state.revocation_hooks = []  # list[RevocationHook]: called after a token is revoked
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    # Outermost: a body over its limit is refused before routing, authentication or a read.
    app.add_middleware(BodyLimit, max_body_bytes=config.max_body_bytes,
                       max_upload_bytes=config.max_upload_bytes,
                       max_transfer_bytes=config.max_transfer_bytes)
    # These two also serve WebSocket routes (see _problem), which Starlette's stubs don't model.
    app.add_exception_handler(RpcError, _rpc_error)  # type: ignore[arg-type]
    app.add_exception_handler(Unauthenticated, _unauthenticated)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(OperationalError, _store_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    app.include_router(ops.router)
    app.include_router(tokens.router)
    app.include_router(grants.router)
    app.include_router(devices.router)
    app.include_router(agent.router)
    app.include_router(perf.router)  # the perf stream (docs/agent.md)
    app.include_router(bridges.router)
    app.include_router(sandbox.router)
    app.include_router(audit.router)
    app.include_router(manage.router)
    app.include_router(users.router)
    app.include_router(reservations.router)
    app.include_router(web_router)  # the dashboard: HTML pages at /, not in the schema
    app.include_router(manage_pages.router)  # its booking and audit pages
    # Exactly /mcp, any method the transport uses (POST, GET, DELETE), no slash redirect.
    # A callable that is not a function is served as an ASGI app (Starlette's Route), which the
    # stubs do not model.
    app.add_route(MCP_PATH, McpEndpoint(), include_in_schema=False)  # type: ignore[arg-type]
    # `/mcp/` is the same endpoint, not a redirect (a client may not replay a POST's body).
    app.add_route(MCP_PATH + "/", McpEndpoint(), include_in_schema=False)  # type: ignore[arg-type]
    app.include_router(oauth_router)  # RFC 9728 metadata, named by every 401
    install_openapi(app)
    return app
