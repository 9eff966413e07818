"""The agent toolkit as MCP tools, next to the REST routes they share code with.

``device_state``, ``ui_elements``, ``marked_screenshot``, ``device_action`` and ``device_act``
call the handlers of :mod:`controller.api.agent` with the MCP request's principal, so access
control, audit and traces are exactly REST's. ``device_action`` answers with the composite of
its two frames as the tool's image when ``settled`` was asked (else the at-action frame), and
the rest as JSON without the base64 PNGs (the trace links them).
"""

from __future__ import annotations

import base64
from typing import Any

from controller.mcp.spec import Caller, Outcome, ToolSpec
from protocol.errors import ErrorCode, RpcError

__all__ = ["agent_tools"]

_DEVICE = {
    "type": "string",
    "description": "A device: SERIAL when unambiguous, else BRIDGE~SERIAL (see list_devices).",
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _device(args: dict[str, Any], *allowed: str) -> str:
    unknown = sorted(set(args) - {"device", *allowed})
    if unknown:
        raise RpcError(ErrorCode.BAD_REQUEST, f"unknown arguments: {', '.join(unknown)[:200]}")
    device = args.get("device")
    if not isinstance(device, str) or not 0 < len(device) <= 400:
        raise RpcError(ErrorCode.BAD_REQUEST, "device is required")
    return device


async def _state(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_state

    device = _device(args)
    data = await get_state(device, caller.principal, caller.request)
    return Outcome(data=data, devices=[device])


async def _ui(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_ui

    device = _device(args)
    return Outcome(data=await get_ui(device, caller.principal, caller.request), devices=[device])


async def _screenshot(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_screenshot

    device = _device(args, "marks")
    marks = args.get("marks", True)
    if not isinstance(marks, bool):
        raise RpcError(ErrorCode.BAD_REQUEST, "marks is true or false")
    response = await get_screenshot(device, caller.principal, caller.request, marks=marks)
    return Outcome(image_png=bytes(response.body), devices=[device])


async def _action(caller: Caller, args: dict[str, Any]) -> Outcome:
    from pydantic import ValidationError

    from controller.api.agent import ActionIn, post_action

    device = _device(args, *ActionIn.model_fields)
    try:
        body = ActionIn.model_validate({k: v for k, v in args.items() if k != "device"})
    except ValidationError as exc:
        raise RpcError(ErrorCode.BAD_REQUEST, "invalid arguments") from exc
    data = await post_action(device, body, caller.principal, caller.request)
    pngs = {k: data.pop(k) for k in ("at_action_png", "settled_png", "composite_png") if k in data}
    image = pngs.get("composite_png") or pngs.get("at_action_png")
    return Outcome(
        data=data, image_png=base64.b64decode(image) if image else None, devices=[device]
    )


async def _act(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import ActIn, post_act

    device = _device(args, "instruction")
    instruction = args.get("instruction")
    if not isinstance(instruction, str) or not 0 < len(instruction) <= 1000:
        raise RpcError(ErrorCode.BAD_REQUEST, "instruction is 1 to 1000 characters")
    data = await post_act(device, ActIn(instruction=instruction), caller.principal, caller.request)
    return Outcome(data=data, devices=[device])


def agent_tools() -> list[ToolSpec]:

    return [
        ToolSpec(
            "device_state",
            "Where the device is: app package, Activity (full and short), the last pages, "
            "keyboard, screen size, orientation, battery, and a '[Device State] …' text block "
            "to put in a prompt.",
            _object({"device": _DEVICE}, ["device"]),
            _state,
            read_only=True,
        ),
        ToolSpec(
            "ui_elements",
            "The on-screen elements (uiautomator dump): index, class, text, desc, resource_id, "
            "bounds [l,t,r,b], clickable, checked. Tap one with device_action by its index.",
            _object({"device": _DEVICE}, ["device"]),
            _ui,
            read_only=True,
        ),
        ToolSpec(
            "marked_screenshot",
            "A PNG of the screen with a magenta crosshair and index on every actionable "
            "element (Set-of-Marks; the indexes are ui_elements').",
            _object({"device": _DEVICE, "marks": {"type": "boolean", "default": True}}, ["device"]),
            _screenshot,
            read_only=True,
        ),
        ToolSpec(
            "device_action",
            "Act on the device: tap (index, x/y, or text), swipe (x1 y1 x2 y2), text, key "
            "(BACK, HOME, ENTER…), start/stop (package). Returns the new state and the frame "
            "taken ~0.35 s after the action (toasts show there); with settled=true also the "
            "frame once the screen stopped changing, as a side-by-side image.",
            _object(
                {
                    "device": _DEVICE,
                    "action": {"enum": ["tap", "swipe", "text", "key", "start", "stop"]},
                    **{
                        k: {"type": "integer"}
                        for k in ("index", "x", "y", "x1", "y1", "x2", "y2", "duration_ms")
                    },
                    **{
                        k: {"type": "string"}
                        for k in ("text", "desc", "resource_id", "key", "package", "activity")
                    },
                    "settled": {"type": "boolean"},
                    "settle_timeout_s": {"type": "number"},
                },
                ["device", "action"],
            ),
            _action,
        ),
        ToolSpec(
            "device_act",
            "Run a natural-language instruction ('open Settings and turn on dark mode'): it is "
            "planned, every step checked against the device owner's policy before anything is "
            "sent, then run with state checks; returns trace_id, ok and the steps.",
            _object(
                {"device": _DEVICE, "instruction": {"type": "string"}}, ["device", "instruction"]
            ),
            _act,
        ),
    ]
