"""The agent toolkit over REST (docs/design.md §9).

* ``GET /v1/devices/{device}/state`` — ``{"package", "activity", "recent_activities",
  "keyboard", "screen": {"width", "height"}, "text", …}``
* ``GET /v1/devices/{device}/ui`` — ``{"elements": [{"index", "class", "text", "desc",
  "resource_id", "bounds": [l, t, r, b], "clickable", …}]}``
* ``GET /v1/devices/{device}/screenshot?marks=1`` — ``image/png`` (Set-of-Marks with marks)
* ``POST /v1/devices/{device}/actions`` — ``{"action": "tap", "index": N}`` / ``{"action":
  "tap", "x", "y"}`` / ``swipe`` / ``text`` / ``key`` / ``start`` / ``stop``, ``"settled"`` →
  ``{"ok", "at_action_png", "settled_png"?, "composite_png"?, "state", …}`` (PNGs base64)
* ``POST /v1/devices/{device}/act`` — ``{"instruction"}`` → ``{"trace_id", "ok", "steps"}``
* ``POST /v1/devices/{device}/done`` — ``{"goal", "summary"}`` → the verifier's verdict on the
  screen (``mark_done`` for an agent that drives the device itself)
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

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from controller.auth import Scope, UserPrincipal
from controller.services import agent
from controller.services.agent import ActIn, ActionIn, DoneIn
from protocol.errors import ErrorCode, RpcError

__all__ = ["FRAME_MAX_AGE_S", "ActIn", "ActionIn", "DoneIn", "router"]

router = APIRouter(tags=["agent"])

# Frames never change once written; a private cache may keep one this long (an hour: a cached
# copy outlives neither a revoked token's session by much nor the frame's retention by much).
FRAME_MAX_AGE_S = 3600


@router.get("/v1/devices/{device}/state")
async def get_state(device: str, principal: UserPrincipal, request: Request) -> dict[str, Any]:
    """Where the device is: app, page, recent pages, keyboard, screen, and a prompt block."""
    return await agent.device_state(request.app.state, principal, device)


@router.get("/v1/devices/{device}/ui")
async def get_ui(device: str, principal: UserPrincipal, request: Request) -> dict[str, Any]:
    """The on-screen elements (``uiautomator dump``), indexed as the marks and taps use them."""
    return await agent.ui_elements(request.app.state, principal, device)


@router.get("/v1/devices/{device}/screenshot", response_class=Response)
async def get_screenshot(
    device: str,
    principal: UserPrincipal,
    request: Request,
    marks: Annotated[bool, Query()] = False,
) -> Response:
    """The screen as PNG; ``marks=1`` draws a magenta crosshair and index on each actionable
    element (Set-of-Marks)."""
    png, trace_id = await agent.screenshot(request.app.state, principal, device, marks=marks)
    return Response(png, media_type="image/png", headers={"X-Trace-Id": trace_id})


@router.post("/v1/devices/{device}/actions")
async def post_action(
    device: str, body: ActionIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """One action with its evidence: the at-action frame, and with ``settled`` the settled
    frame and a side-by-side composite (PNGs base64)."""
    return await agent.action(request.app.state, principal, device, body)


@router.post("/v1/devices/{device}/act")
async def post_act(
    device: str, body: ActIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """Run a natural-language instruction as a checked plan; the trace tells every step."""
    return await agent.act(request.app.state, principal, device, body)


@router.post("/v1/devices/{device}/done")
async def post_done(
    device: str, body: DoneIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """``mark_done``: the verifier judges the claim against the screen (the last action's
    frames, or a fresh screenshot), the device state and the goal."""
    return await agent.done(request.app.state, principal, device, body)


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
    found = await agent.traces(request.app.state).frames.get(trace_id, name)
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
