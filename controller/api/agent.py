"""The agent toolkit over REST (docs/design.md §9, issue 11).

* ``GET /v1/devices/{device}/state`` — ``{"package", "activity", "recent_activities",
  "keyboard", "screen": {"width", "height"}, "text", …}``
* ``GET /v1/devices/{device}/ui`` — ``{"elements": [{"index", "class", "text", "desc",
  "resource_id", "bounds": [l, t, r, b], "clickable", …}]}``
* ``GET /v1/devices/{device}/screenshot?marks=1`` — ``image/png`` (Set-of-Marks with marks)
* ``POST /v1/devices/{device}/actions`` — ``{"action": "tap", "index": N}`` / ``{"action":
  "tap", "x", "y"}`` / ``swipe`` / ``text`` / ``key`` / ``start`` / ``stop``, ``"settled"`` →
  ``{"ok", "at_action_png", "settled_png"?, "composite_png"?, "state", …}`` (PNGs base64)
* ``POST /v1/devices/{device}/act`` — ``{"instruction"}`` → ``{"trace_id", "ok", "steps"}``
* ``GET /v1/agent/traces/{trace_id}/frames/{name}`` — an evidence frame a step links
  (``image/png``, immutable: ``ETag`` and ``Cache-Control: private``); the trace's owner
  or an admin only, 404 for anyone else. Frames live in the store (``controller.store.Frame``),
  so any replica serves them, after a restart too.

Every call on a device goes through ``Hub.device_call`` (authorization, audit) and leaves a
trace with its step log — refusals included — readable at ``GET /v1/runs/{trace_id}``.
The ``act`` planner is the LLM when one is configured (``fixer.llm.LlmClient.from_env``),
else the rule templates; ``app.state.agent_planner`` overrides it.
"""

from __future__ import annotations

import base64
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from controller.access import check_access
from controller.agent import (
    AgentRunner,
    DbFrameStore,
    LlmPlanner,
    Planner,
    RulePlanner,
    Trace,
    TraceStore,
)
from controller.auth import Principal, Scope, UserPrincipal
from controller.config import ControllerConfig
from controller.hub import Hub, resolve_device
from protocol.agent_methods import (
    APP_START,
    APP_STOP,
    DEVICE_STATE,
    UI_DUMP,
    UI_KEY,
    UI_SCREENSHOT,
    UI_SWIPE,
    UI_TAP,
    UI_TEXT,
)
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Method

__all__ = ["ActIn", "ActionIn", "router"]

log = logging.getLogger("droidwire.controller.api.agent")

router = APIRouter(tags=["agent"])

_ACTIONS: dict[str, Method[Any, Any]] = {
    "tap": UI_TAP,
    "swipe": UI_SWIPE,
    "text": UI_TEXT,
    "key": UI_KEY,
    "start": APP_START,
    "stop": APP_STOP,
}
_PNG_KEYS = ("at_action_png", "settled_png", "composite_png")
# Frames never change once written; a private cache may keep one this long (an hour: a cached
# copy outlives neither a revoked token's session by much nor the frame's retention by much).
FRAME_MAX_AGE_S = 3600


class ActionIn(BaseModel):
    """One action. ``tap``: ``index``, ``x``/``y``, or a selector (``text``, ``desc``,
    ``resource_id``); ``swipe``: ``x1 y1 x2 y2 [duration_ms]``; ``text``: ``text``; ``key``:
    ``key``; ``start``: ``package [activity]``; ``stop``: ``package``. The bridge validates
    the fields of each (bounds, lengths, the owner's policy)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["tap", "swipe", "text", "key", "start", "stop"]
    index: int | None = None
    x: int | None = None
    y: int | None = None
    text: str | None = Field(default=None, max_length=500)
    desc: str | None = Field(default=None, max_length=200)
    resource_id: str | None = Field(default=None, max_length=200)
    x1: int | None = None
    y1: int | None = None
    x2: int | None = None
    y2: int | None = None
    duration_ms: int | None = None
    key: str | None = Field(default=None, max_length=48)
    package: str | None = Field(default=None, max_length=255)
    activity: str | None = Field(default=None, max_length=255)
    settled: bool = False
    settle_timeout_s: float | None = None


class ActIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1, max_length=1000)


def _hub(request: Request) -> Hub:
    hub: Hub | None = getattr(request.app.state, "hub", None)
    if hub is None:
        raise RpcError(ErrorCode.UNAVAILABLE, "the hub is not running")
    return hub


def _traces(request: Request) -> TraceStore:
    state = request.app.state
    traces: TraceStore | None = getattr(state, "agent_traces", None)
    if traces is None:
        store = getattr(state, "store", None)
        config: ControllerConfig | None = getattr(state, "config", None)
        frames = None
        if store is not None and config is not None:
            frames = DbFrameStore(
                store, config.agent_frame_traces, max_bytes=config.agent_frame_bytes
            )
        traces = state.agent_traces = TraceStore(store, frames)
    return traces


def _planner(request: Request) -> Planner:
    state = request.app.state
    planner: Planner | None = getattr(state, "agent_planner", None)
    if planner is None:
        from fixer.llm import LlmClient

        client = LlmClient.from_env()
        planner = LlmPlanner(client) if client is not None else RulePlanner()
        state.agent_planner = planner
    return planner


class _Session:
    """One agent call on one device: the RPCs (authorized, audited) and its trace."""

    def __init__(self, request: Request, principal: Principal, trace: Trace, ref: Any) -> None:
        self.hub = _hub(request)
        self.principal = principal
        self.trace = trace
        self.ref = ref

    async def call(self, method: Method[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
        """``method`` with the plain params a plan or a tool gives (``serial`` set here),
        its result as a plain map (what traces record)."""
        # Each step of an agent's loop re-checks the token too (``device_call`` checks the
        # loan and scope): a token revoked mid-loop stops it at its next step.
        await check_access(self.hub.store, self.principal)
        result = await self.hub.device_call(
            self.principal, self.ref, method, params, action=f"agent.{method.name}"
        )
        out: dict[str, Any] = result.model_dump(exclude_unset=True)
        return out


async def _open(
    request: Request, principal: Principal, device: str, tool: str, **detail: Any
) -> _Session:
    record = await resolve_device(_hub(request), principal, device)
    trace = await _traces(request).open(
        user_id=principal.user_id, device=str(record.ref), tool=tool, **detail
    )
    return _Session(request, principal, trace, record.ref)


async def _tool(
    session: _Session, method: Method[Any, Any], params: dict[str, Any], **detail: Any
) -> dict[str, Any]:
    """One tool call, recorded in its trace whatever happens (refusals too)."""
    trace = session.trace
    try:
        result = dict(await session.call(method, params))
    except RpcError as exc:
        status = "refused" if exc.code is ErrorCode.FORBIDDEN else "failed"
        await trace.record(
            "tool",
            status,
            method=method.name,
            params=params,
            code=exc.code.value,
            message=exc.message,
            rule=(exc.data or {}).get("rule"),
        )
        await trace.finish(ok=False, summary=f"{method.name}: {exc.message}", reason=status)
        raise
    frames = (
        await trace.keep_frames(len(trace.steps), result) if method in _ACTIONS.values() else {}
    )
    ok = bool(result.get("ok", True))
    await trace.record(
        "tool",
        "ok" if ok else "failed",
        method=method.name,
        params=params,
        command=result.get("command"),
        exit_code=result.get("exit_code"),
        duration_ms=result.get("duration_ms"),
        output=result.get("output"),
        **frames,
        **detail,
    )
    await trace.finish(ok=ok, summary=f"{method.name}: {'ok' if ok else 'failed'}")
    return result


def _state_json(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "package": state.get("package"),
        "activity": state.get("activity"),
        "activity_short": state.get("activity_short"),
        "recent_activities": list(state.get("recent_activities", [])),
        "keyboard": bool(state.get("keyboard", False)),
        "screen": state.get("screen"),
        "orientation": state.get("orientation", 0),
        "battery": state.get("battery"),
        "text": state.get("text", ""),
    }


def _element_json(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": e.get("index"),
        "class": e.get("class_name", ""),
        "text": e.get("text", ""),
        "desc": e.get("desc", ""),
        "resource_id": e.get("resource_id", ""),
        "bounds": list(e.get("bounds", (0, 0, 0, 0))),
        "clickable": bool(e.get("clickable", False)),
        "focused": bool(e.get("focused", False)),
        "checkable": bool(e.get("checkable", False)),
        "checked": bool(e.get("checked", False)),
        "actionable": bool(e.get("actionable", False)),
    }


@router.get("/v1/devices/{device}/state")
async def get_state(device: str, principal: UserPrincipal, request: Request) -> dict[str, Any]:
    """Where the device is: app, page, recent pages, keyboard, screen, and a prompt block."""
    session = await _open(request, principal, device, "state")
    state = await _tool(session, DEVICE_STATE, {})
    return {**_state_json(state), "trace_id": session.trace.id}


@router.get("/v1/devices/{device}/ui")
async def get_ui(device: str, principal: UserPrincipal, request: Request) -> dict[str, Any]:
    """The on-screen elements (``uiautomator dump``), indexed as the marks and taps use them."""
    session = await _open(request, principal, device, "ui")
    out = await _tool(session, UI_DUMP, {})
    return {
        "elements": [_element_json(dict(e)) for e in out.get("elements", [])],
        "trace_id": session.trace.id,
    }


@router.get("/v1/devices/{device}/screenshot", response_class=Response)
async def get_screenshot(
    device: str,
    principal: UserPrincipal,
    request: Request,
    marks: Annotated[bool, Query()] = False,
) -> Response:
    """The screen as PNG; ``marks=1`` draws a magenta crosshair and index on each actionable
    element (Set-of-Marks)."""
    session = await _open(request, principal, device, "screenshot", marks=marks)
    out = await _tool(session, UI_SCREENSHOT, {"marks": marks})
    png = out.get("png")
    if not isinstance(png, bytes):
        raise RpcError(ErrorCode.INTERNAL, "the bridge returned no PNG")
    return Response(png, media_type="image/png", headers={"X-Trace-Id": session.trace.id})


@router.post("/v1/devices/{device}/actions")
async def post_action(
    device: str, body: ActionIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """One action with its evidence: the at-action frame, and with ``settled`` the settled
    frame and a side-by-side composite (PNGs base64)."""
    params = body.model_dump(exclude_none=True)
    method = _ACTIONS[params.pop("action")]
    session = await _open(request, principal, device, "actions", action=body.action)
    result = await _tool(session, method, params)
    out: dict[str, Any] = {
        "ok": bool(result.get("ok")),
        "trace_id": session.trace.id,
        "action": body.action,
        "command": result.get("command", []),
        "exit_code": result.get("exit_code"),
        "output": result.get("output", ""),
        "duration_ms": result.get("duration_ms"),
        "target": _element_json(result["target"]) if result.get("target") else None,
        "settled": result.get("settled"),
        "state": _state_json(dict(result.get("state") or {})),
    }
    # The frames as the bridge sent them, kept in the store or not (the step says which).
    for key in _PNG_KEYS:
        png = result.get(key)
        if isinstance(png, bytes) and png:
            out[key] = base64.b64encode(png).decode("ascii")
    return out


@router.post("/v1/devices/{device}/act")
async def post_act(
    device: str, body: ActIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """Run a natural-language instruction as a checked plan; the trace tells every step."""
    session = await _open(request, principal, device, "act", instruction=body.instruction)
    runner = AgentRunner(_planner(request))
    try:
        return await runner.act(session.call, body.instruction, session.trace)
    except RpcError as exc:
        await session.trace.record(
            "error",
            "failed",
            code=exc.code.value,
            message=exc.message,
            rule=(exc.data or {}).get("rule"),
        )
        await session.trace.finish(ok=False, summary=exc.message, reason=exc.code.value)
        raise


@router.get("/v1/agent/traces/{trace_id}/frames/{name}", response_class=Response)
async def get_frame(
    trace_id: str, name: str, principal: UserPrincipal, request: Request
) -> Response:
    """An evidence frame of a trace (kept in the store for the newest traces only).

    A frame is a screenshot of a device: the token needs ``devices:use`` (what taking one
    needs) on top of ``runs:read`` (reading the trace); ``runs:read`` or ``devices:read``
    alone is refused ``missing_scope``."""
    for scope in (Scope.RUNS_READ, Scope.DEVICES_USE):
        if not principal.allows(scope):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"this token lacks the {scope.value!r} scope",
                {"rule": "missing_scope", "scope": scope.value},
            )
    found = await _traces(request).frames.get(trace_id, name)
    # Someone else's frame is as absent as a dropped one: its existence is not disclosed.
    if found is None or not (principal.is_admin or found.user_id == principal.user_id):
        raise RpcError(ErrorCode.NOT_FOUND, "no such frame")
    etag = f'"{found.sha256}"'
    headers = {
        "ETag": etag,
        "Cache-Control": f"private, max-age={FRAME_MAX_AGE_S}, immutable",
        "X-Content-Type-Options": "nosniff",
    }
    matches = _etags(request.headers.get("if-none-match", ""))
    if etag in matches or "*" in matches:
        return Response(status_code=304, headers=headers)
    return Response(found.png, media_type="image/png", headers=headers)


def _etags(header: str) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (RFC 9110 §13.1.2); weak ones match
    too (weak comparison), and ``*`` matches any existing frame."""
    return {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}
