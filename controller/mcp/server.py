"""The MCP server at ``/mcp``: the official SDK's low-level server behind our own auth.

Transport: streamable HTTP (the SDK's :class:`StreamableHTTPSessionManager`), **stateless**:
every POST carries one message and is answered on its own, so any controller replica behind
a load balancer can serve any request, and no session outlives the credential that made it.
Nothing here needs server-to-client requests (sampling, elicitation), the only thing a
stateless server cannot do.

Auth, before the SDK sees a byte (:class:`McpEndpoint`): the same ``Authorization: Bearer``
tokens as REST, through the same :func:`controller.auth.current_principal` — no, malformed,
unknown or revoked token → 401 with the REST error body; a bridge token → 403; a token in
the URL → 400. The principal rides in the ASGI scope to the tool handlers, which reach
devices only through :mod:`controller.mcp.tools` (``authorize()`` on every device call).
DNS-rebinding protection (Host/Origin allow-lists) is off: it guards servers that trust
ambient credentials, and a Bearer header is never ambient.

Every tool call and resource read is written to the audit log as ``mcp.<tool>`` (who, which
device, how it ended); device RPCs are audited once more by the hub as for REST.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from fastapi.requests import HTTPConnection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from controller.api.errors import error_body
from controller.audit import AuditLog
from controller.auth.authorization import Principal
from controller.auth.http import current_principal, current_user
from controller.executor.steps import Progress, ProgressListener
from controller.mcp.catalogue import TOOLS
from controller.mcp.spec import Caller, Outcome, ToolSpec, check_arguments, check_output
from controller.mcp.tools import (
    RUN_URI_PREFIX,
    list_run_resources,
    png_base64,
    read_run_resource,
)
from protocol.errors import ErrorCode, RpcError

__all__ = ["MCP_PATH", "McpEndpoint", "McpService"]

log = logging.getLogger("droidwire.controller.mcp")

MCP_PATH = "/mcp"
PRINCIPAL_KEY = "droidwire.principal"  # ASGI scope key: the principal of this HTTP request
SHUTDOWN_TIMEOUT_S = 10.0  # the manager cancels its sessions' tasks; they end promptly
PROGRESS_FLUSH_S = 5.0  # progress notifications still queued when a tool ends
RESOURCE_NOT_FOUND = -32002  # MCP's code for an unknown resource
# JSON-RPC 2.0's codes.
INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32600, -32602, -32603
INSTRUCTIONS = (
    "droidwire: Android devices lent to you, and a sandbox that compiles and runs an "
    "instrumented Kotlin test to verify main-thread blocking. Start with list_devices; "
    "sandbox_executor returns the verdict; past runs are resources run://{id}."
)


def _version() -> str:
    try:
        return version("droidwire")
    except PackageNotFoundError:  # pragma: no cover - a bare checkout
        return "0"


class McpService:
    """The SDK server with droidwire's tools and resources, and its session manager.

    One per app start-up (the SDK's manager runs once): built and run by the lifespan,
    ``async with McpService(audit).run(): …``, and found by the endpoint in ``app.state.mcp``.
    """

    def __init__(self, audit: AuditLog | None) -> None:
        self.audit = audit
        self.server: Server[Any] = Server(
            "droidwire",
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
        )
        self.sessions = StreamableHTTPSessionManager(
            app=self.server, stateless=True, security_settings=None
        )

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[McpService]:
        """Run the session manager in a task of its own until the block ends.

        The SDK's manager holds an anyio task group, which must be exited by the task that
        entered it; a lifespan may be entered and left by different tasks (test harnesses
        do), so the group lives in one dedicated task instead.
        """
        ready, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with self.sessions.run():
                ready.set()
                await stop.wait()

        task = asyncio.create_task(serve(), name="mcp-sessions")
        started = asyncio.ensure_future(ready.wait())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            started.cancel()
            task.result()  # the start-up error
            raise RuntimeError("MCP session manager ended before it started")
        try:
            yield self
        finally:
            stop.set()
            try:
                await asyncio.wait_for(task, SHUTDOWN_TIMEOUT_S)
            except TimeoutError:
                log.warning("MCP session manager did not stop in %ss", SHUTDOWN_TIMEOUT_S)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.sessions.handle_request(scope, receive, send)

    # -- tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    title=spec.title,
                    description=spec.description,
                    input_schema=spec.input_schema,
                    output_schema=spec.output_schema,
                    annotations=types.ToolAnnotations(
                        title=spec.title,
                        read_only_hint=spec.read_only,
                        destructive_hint=spec.destructive and not spec.read_only,
                        idempotent_hint=spec.idempotent,
                        open_world_hint=spec.open_world,
                    ),
                )
                for spec in TOOLS.values()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async with _progress_reporter(ctx) as progress:
            caller = _caller(ctx)
            caller.progress = progress
            return await self._run_tool(caller, params)

    async def _run_tool(
        self, caller: Caller, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        action = f"mcp.{params.name[:64]}"
        spec = TOOLS.get(params.name)
        if spec is None:  # a protocol error (the spec's -32602), not a tool's failure
            error = RpcError(ErrorCode.NOT_FOUND, f"unknown tool: {params.name[:64]!r}")
            await self._audit(caller.principal, "mcp.unknown_tool", {}, error=error)
            raise MCPError(code=INVALID_PARAMS, message=error.message,
                           data={"tools": sorted(TOOLS)})
        try:
            args = check_arguments(spec, args)
            outcome = await spec.fn(caller, args)
        except RpcError as exc:
            await self._audit(caller.principal, action, args, error=exc)
            return _error_result(exc)
        except Exception:  # a bug must still answer the agent, and never leak details
            log.exception("MCP tool %s failed", params.name[:64])
            error = RpcError(ErrorCode.INTERNAL, "internal error")
            await self._audit(caller.principal, action, args, error=error)
            return _error_result(error)
        await self._audit(caller.principal, action, args, outcome=outcome)
        return _result(spec, outcome)

    # -- resources

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        caller = _caller(ctx)
        try:
            runs = await list_run_resources(caller)
        except RpcError as exc:
            await self._audit(caller.principal, "mcp.list_resources", {}, error=exc)
            raise _mcp_error(exc) from exc
        await self._audit(caller.principal, "mcp.list_resources", {}, outcome=Outcome())
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=f"{RUN_URI_PREFIX}{run['id']}",
                    name=f"run {run['id']}",
                    description=f"{run['status']} {run.get('verdict') or ''}: "
                    f"{run.get('summary') or ''}".strip(),
                    mime_type="application/json",
                )
                for run in runs
            ]
        )

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=RUN_URI_PREFIX + "{id}",
                    name="run",
                    description="A sandbox run as GET /v1/runs/{id} answers it.",
                    mime_type="application/json",
                )
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller = _caller(ctx)
        uri = str(params.uri)
        detail = {"uri": uri[:200]}
        try:
            run = await read_run_resource(caller, uri)
        except RpcError as exc:
            await self._audit(caller.principal, "mcp.read_resource", detail, error=exc)
            raise _mcp_error(exc) from exc
        await self._audit(caller.principal, "mcp.read_resource", detail, outcome=Outcome())
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, text=json.dumps(run), mime_type="application/json"
                )
            ]
        )

    # -- audit

    async def _audit(
        self,
        principal: Principal,
        action: str,
        args: dict[str, Any],
        *,
        outcome: Outcome | None = None,
        error: RpcError | None = None,
    ) -> None:
        if self.audit is None:
            return
        entries: list[tuple[str | None, dict[str, Any]]] = []
        if error is not None:
            detail: dict[str, Any] = {}
            if error.data and "rule" in error.data:
                detail["rule"] = str(error.data["rule"])[:128]
            requested = args.get("device") or args.get("run_id") or args.get("uri")
            if isinstance(requested, str):
                detail["requested"] = requested[:200]
            entries.append((None, detail))
        elif outcome is not None and outcome.runs:
            for run in outcome.runs:
                entries.append((run.device_id, {"run_id": run.run_id,
                                                "verdict": run.verification_status,
                                                "reason_code": run.reason_code}))
        else:
            devices = outcome.devices if outcome is not None else []
            entries.append((devices[0] if devices else None, {}))
        for device, detail in entries:
            try:
                await self.audit.record(
                    principal,
                    action,
                    device=device,
                    outcome="ok" if error is None else error.code.value,
                    detail=detail,
                )
            except Exception:  # a failing audit write is logged; it never hides the answer
                log.exception("audit write failed for %s", action)


class McpEndpoint:
    """The ASGI app routed at exactly ``/mcp``: authenticate, then hand to the SDK.

    Refusals are raised (``Unauthenticated`` → 401, ``RpcError`` → 4xx/503) and become the
    app's usual error bodies in its exception handlers, before any MCP session exists.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - the route is HTTP only
            return
        connection = HTTPConnection(scope, receive)
        principal = await current_user(await current_principal(connection))
        service: McpService | None = getattr(connection.app.state, "mcp", None)
        if service is None:
            raise RpcError(ErrorCode.UNAVAILABLE, "the MCP server is not running")
        if scope["method"] == "GET":
            # A stateless server has no stream of its own to offer: the transport's spec
            # answer is 405 (a GET would otherwise hold an idle SSE stream open).
            raise StarletteHTTPException(
                405, "this MCP server is stateless: POST messages", headers={"Allow": "POST"}
            )
        scope[PRINCIPAL_KEY] = principal
        await service.handle(scope, receive, send)


@contextlib.asynccontextmanager
async def _progress_reporter(
    ctx: ServerRequestContext[Any],
) -> AsyncIterator[ProgressListener]:
    """A sandbox run's stages as MCP progress notifications (sent only if the client gave a
    progress token), each on this request's stream before its result. Notifications also
    keep a long run's stream busy, so a client's read timeout measures silence, not work."""
    sent: list[asyncio.Task[None]] = []
    count = 0

    def listener(progress: Progress) -> None:
        nonlocal count
        count += 1
        message = progress.stage
        if progress.round is not None:
            message += f" (round {progress.round}/{progress.max_rounds})"
        if progress.device:
            message += f" on {progress.device}"
        previous = sent[-1] if sent else None

        async def send(n: int = count) -> None:
            if previous is not None:  # in order
                await asyncio.gather(previous, return_exceptions=True)
            await ctx.session.report_progress(n, None, message)

        sent.append(asyncio.create_task(send()))

    try:
        yield listener
    finally:
        if sent:
            done, pending = await asyncio.wait(sent, timeout=PROGRESS_FLUSH_S)
            for task in pending:
                task.cancel()
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.debug("progress notification failed: %r", task.exception())


def _caller(ctx: ServerRequestContext[Any]) -> Caller:
    request = ctx.request
    if isinstance(request, Request):
        principal = request.scope.get(PRINCIPAL_KEY)
        if isinstance(principal, Principal):
            return Caller(principal, request)
    # Only reachable if the SDK were served without McpEndpoint in front of it.
    raise MCPError(code=INVALID_REQUEST, message="unauthenticated")


def _error_body(exc: RpcError) -> dict[str, Any]:
    return error_body(exc.code.value, exc.message, exc.data)


def _error_result(exc: RpcError) -> types.CallToolResult:
    body = _error_body(exc)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body))],
        structured_content=body,
        is_error=True,
    )


def _mcp_error(exc: RpcError) -> MCPError:
    """A refused resource request as a JSON-RPC error, with the REST error body as data."""
    code = {
        ErrorCode.NOT_FOUND: RESOURCE_NOT_FOUND,
        ErrorCode.BAD_REQUEST: INVALID_PARAMS,
        ErrorCode.FORBIDDEN: INVALID_REQUEST,
    }.get(exc.code, INTERNAL_ERROR)
    return MCPError(code=code, message=exc.message, data=_error_body(exc)["error"])


def _result(spec: ToolSpec, outcome: Outcome) -> types.CallToolResult:
    """A successful call: its structured content must match the tool's output schema (a
    mismatch is our bug: it is logged and answered as ``internal``, never sent unchecked)."""
    problems = check_output(spec, outcome.data if outcome.data is not None else {})
    if problems:
        log.error("MCP tool %s answered outside its output schema: %s", spec.name, problems)
        return _error_result(RpcError(ErrorCode.INTERNAL, "internal error"))
    content: list[types.ContentBlock] = []
    if outcome.image_png is not None:
        content.append(types.ImageContent(data=png_base64(outcome.image_png),
                                          mime_type=outcome.image_type))
    if outcome.data is not None:
        content.append(types.TextContent(text=json.dumps(outcome.data)))
    return types.CallToolResult(content=content, structured_content=outcome.data or {})
