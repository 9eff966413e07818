"""The agent toolkit as a service: what REST (:mod:`controller.api.agent`) and MCP
(:mod:`controller.mcp.agent_tools`) both call, with the caller's principal and the app's state
(hub, traces, planner, verifier) — no HTTP request in between.

Every call on a device goes through ``Hub.device_call`` (authorization, audit) and leaves a
trace with its step log — refusals included — readable at ``GET /v1/runs/{trace_id}``.
The ``act`` planner is the LLM when one is configured (``fixer.llm.LlmClient.from_env``),
else the rule templates; ``state.agent_planner`` overrides it, and ``state.agent_verifier``
the verifier of ``mark_done``. Frames live in the store (``controller.store.Frame``).
"""

from __future__ import annotations

import base64
import logging
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from controller.access import check_access
from controller.agent import (
    AgentRunner,
    DbFrameStore,
    LlmPlanner,
    Planner,
    RulePlanner,
    RunnerSettings,
    Trace,
    TraceStore,
    Verifier,
)
from controller.auth import Principal
from controller.config import ControllerConfig
from controller.hub import resolve_device
from controller.services.container import services_of
from controller.store import Store
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

__all__ = [
    "ActIn",
    "ActionIn",
    "DoneIn",
    "act",
    "action",
    "device_state",
    "done",
    "screenshot",
    "traces",
    "ui_elements",
]

log = logging.getLogger("droidwire.controller.services.agent")

_ACTIONS: dict[str, Method[Any, Any]] = {
    "tap": UI_TAP,
    "swipe": UI_SWIPE,
    "text": UI_TEXT,
    "key": UI_KEY,
    "start": APP_START,
    "stop": APP_STOP,
}
_PNG_KEYS = ("at_action_png", "settled_png", "composite_png")


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
    # Opt-in: an ANR of the app in front force-stops it and captures screen and log.
    anr_recovery: bool = False


class DoneIn(BaseModel):
    """``mark_done`` from an agent of its own: the goal and what it says it achieved."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=1000)
    summary: str = Field(min_length=1, max_length=1000)


# The last action's frames per (user, device): what a later mark_done is judged on. Bounded;
# a controller replica that did not serve the action (or a restart) judges a fresh screenshot.
MAX_LAST_FRAMES = 256


def _last_frames(state: Any) -> OrderedDict[tuple[str | None, str], dict[str, bytes]]:
    frames: OrderedDict[tuple[str | None, str], dict[str, bytes]] | None = getattr(
        state, "agent_last_frames", None)
    if frames is None:
        frames = state.agent_last_frames = OrderedDict()
    return frames


def traces(state: Any) -> TraceStore:
    """The app's trace store (made on first use)."""
    traces: TraceStore | None = getattr(state, "agent_traces", None)
    if traces is None:
        try:
            store: Store | None = services_of(state).store
        except RpcError:  # not running: traces are kept in memory only
            store = None
        config: ControllerConfig | None = getattr(state, "config", None)
        frames = None
        if store is not None and config is not None:
            frames = DbFrameStore(
                store, config.agent_frame_traces, max_bytes=config.agent_frame_bytes
            )
        traces = state.agent_traces = TraceStore(store, frames)
    return traces


def _planner(state: Any) -> Planner:
    planner: Planner | None = getattr(state, "agent_planner", None)
    if planner is None:
        from fixer.llm import LlmClient

        client = LlmClient.from_env()
        planner = LlmPlanner(client) if client is not None else RulePlanner()
        state.agent_planner = planner
    return planner


def _verifier(state: Any) -> Verifier:
    """The verifier of ``mark_done``: a model of its own (the configured LLM, its own prompt),
    or none — then it says so rather than approving. ``app.state.agent_verifier`` overrides."""
    verifier: Verifier | None = getattr(state, "agent_verifier", None)
    if verifier is None:
        from fixer.llm import LlmClient

        verifier = state.agent_verifier = Verifier(LlmClient.from_env())
    return verifier


class _Session:
    """One agent call on one device: the RPCs (authorized, audited) and its trace."""

    def __init__(self, state: Any, principal: Principal, trace: Trace, ref: Any) -> None:
        self.hub = services_of(state).hub
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
    state: Any, principal: Principal, device: str, tool: str, **detail: Any
) -> _Session:
    record = await resolve_device(services_of(state).hub, principal, device)
    trace = await traces(state).open(
        user_id=principal.user_id, device=str(record.ref), tool=tool, **detail
    )
    return _Session(state, principal, trace, record.ref)


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


async def device_state(state: Any, principal: Principal, device: str) -> dict[str, Any]:
    """Where the device is: app, page, recent pages, keyboard, screen, and a prompt block."""
    session = await _open(state, principal, device, "state")
    out = await _tool(session, DEVICE_STATE, {})
    return {**_state_json(out), "trace_id": session.trace.id}


async def ui_elements(state: Any, principal: Principal, device: str) -> dict[str, Any]:
    """The on-screen elements (``uiautomator dump``), indexed as the marks and taps use them."""
    session = await _open(state, principal, device, "ui")
    out = await _tool(session, UI_DUMP, {})
    return {
        "elements": [_element_json(dict(e)) for e in out.get("elements", [])],
        "trace_id": session.trace.id,
    }


async def screenshot(
    state: Any, principal: Principal, device: str, *, marks: bool = False
) -> tuple[bytes, str]:
    """The screen as PNG; ``marks=1`` draws a magenta crosshair and index on each actionable
    element (Set-of-Marks)."""
    session = await _open(state, principal, device, "screenshot", marks=marks)
    out = await _tool(session, UI_SCREENSHOT, {"marks": marks})
    png = out.get("png")
    if not isinstance(png, bytes):
        raise RpcError(ErrorCode.INTERNAL, "the bridge returned no PNG")
    return png, session.trace.id


async def action(state: Any, principal: Principal, device: str, body: ActionIn) -> dict[str, Any]:
    """One action with its evidence: the at-action frame, and with ``settled`` the settled
    frame and a side-by-side composite (PNGs base64)."""
    params = body.model_dump(exclude_none=True)
    method = _ACTIONS[params.pop("action")]
    session = await _open(state, principal, device, "actions", action=body.action)
    result = await _tool(session, method, params)
    pngs = {k: v for k, v in result.items() if k in _PNG_KEYS and isinstance(v, bytes) and v}
    if pngs:
        last = _last_frames(state)
        slot = (principal.user_id, str(session.ref))
        last[slot] = pngs
        last.move_to_end(slot)
        while len(last) > MAX_LAST_FRAMES:
            last.popitem(last=False)
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


async def act(state: Any, principal: Principal, device: str, body: ActIn) -> dict[str, Any]:
    """Run a natural-language instruction as a checked plan; the trace tells every step."""
    session = await _open(state, principal, device, "act", instruction=body.instruction)
    runner = AgentRunner(_planner(state), verifier=_verifier(state),
                         settings=RunnerSettings(anr_recovery=body.anr_recovery))
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


async def done(state: Any, principal: Principal, device: str, body: DoneIn) -> dict[str, Any]:
    """``mark_done``: the verifier judges the claim against the screen — the last action's
    at-action and settled frames (side by side), or a fresh screenshot — the device state and
    the goal. ``{"trace_id", "ok", "verdict": {"status", "gap"?, "evidence"?, "reason"?}}``:
    a rejection names the gap; without a verifier model the status is ``unverified``."""
    session = await _open(state, principal, device, "done", goal=body.goal)
    trace = session.trace
    try:
        current = await session.call(DEVICE_STATE, {})
        elements = [dict(e) for e in (await session.call(UI_DUMP, {})).get("elements", [])]
        evidence = dict(_last_frames(state).get((principal.user_id, str(session.ref)), {}))
        if not evidence:
            shot = await session.call(UI_SCREENSHOT, {"marks": False})
            if isinstance(shot.get("png"), bytes):
                evidence = {"settled_png": shot["png"]}
    except RpcError as exc:
        await trace.finish(ok=False, summary=exc.message, reason=exc.code.value)
        raise
    image = evidence.get("composite_png") or evidence.get("settled_png") or evidence.get(
        "at_action_png")
    verdict = await _verifier(state).verify(body.goal, body.summary, current, elements, image)
    links = await trace.keep_frames(len(trace.steps), evidence)
    detail = {k: v for k, v in verdict.to_json().items() if k != "status"}
    await trace.record("verify", verdict.status, summary=body.summary,
                       page=current.get("activity_short"), **detail, **links)
    message = {"accepted": "done", "rejected": f"not done: {verdict.gap}"}.get(
        verdict.status, verdict.reason)
    await trace.finish(ok=verdict.accepted, summary=message, verdict=verdict.to_json())
    return {"trace_id": trace.id, "ok": verdict.accepted, "message": message,
            "verdict": verdict.to_json(), "state": _state_json(current)}
