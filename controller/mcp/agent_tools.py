"""The agent toolkit as MCP tools, next to the REST routes they share code with.

``device_state``, ``ui_elements``, ``marked_screenshot``, ``device_action`` and ``device_act``
call the handlers of :mod:`controller.api.agent` with the MCP request's principal, so access
control, audit and traces are exactly REST's. ``device_action`` answers with the composite of
its two frames as the tool's image when ``settled`` was asked (else the at-action frame), and
the rest as JSON without the base64 PNGs (the trace links them). Arguments arrive checked
against the tool's input schema (:func:`controller.mcp.spec.check_arguments`).
"""

from __future__ import annotations

import base64
from typing import Any

from controller.mcp.spec import Caller, Outcome, parse
from controller.mcp.tools import image_info

__all__ = [
    "device_act", "device_action", "device_state", "mark_done", "marked_screenshot", "ui_elements",
]


async def device_state(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_state

    device = str(args["device"])
    data = await get_state(device, caller.principal, caller.request)
    return Outcome(data=data, devices=[device])


async def ui_elements(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_ui

    device = str(args["device"])
    return Outcome(data=await get_ui(device, caller.principal, caller.request), devices=[device])


async def marked_screenshot(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import get_screenshot

    device = str(args["device"])
    marks = bool(args.get("marks", True))
    response = await get_screenshot(device, caller.principal, caller.request, marks=marks)
    png = bytes(response.body)
    data = {**image_info(png), "marks": marks, "trace_id": response.headers.get("x-trace-id")}
    return Outcome(image_png=png, data=data, devices=[device])


async def device_action(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import ActionIn, post_action

    device = str(args["device"])
    body = parse(ActionIn, {k: v for k, v in args.items() if k != "device"})
    data = await post_action(device, body, caller.principal, caller.request)
    pngs = {k: data.pop(k) for k in ("at_action_png", "settled_png", "composite_png") if k in data}
    image = pngs.get("composite_png") or pngs.get("at_action_png")
    return Outcome(
        data=data, image_png=base64.b64decode(image) if image else None, devices=[device]
    )


async def device_act(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import ActIn, post_act

    device = str(args["device"])
    body = parse(ActIn, {k: v for k, v in args.items() if k != "device"})
    data = await post_act(device, body, caller.principal, caller.request)
    return Outcome(data=data, devices=[device])


async def mark_done(caller: Caller, args: dict[str, Any]) -> Outcome:
    from controller.api.agent import DoneIn, post_done

    device = str(args["device"])
    body = parse(DoneIn, {"goal": args["goal"], "summary": args["summary"]})
    data = await post_done(device, body, caller.principal, caller.request)
    return Outcome(data=data, devices=[device])
