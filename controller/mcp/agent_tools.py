"""The agent toolkit as MCP tools: the service :mod:`controller.services.agent` that the REST
routes of :mod:`controller.api.agent` call too, with the MCP request's principal and the app's
state, so access control, audit and traces are exactly REST's. ``device_action`` answers with
the composite of its two frames as the tool's image when ``settled`` was asked (else the
at-action frame), and the rest as JSON without the base64 PNGs (the trace links them).
Arguments arrive checked against the tool's input schema
(:func:`controller.mcp.spec.check_arguments`).
"""

from __future__ import annotations

import base64
from typing import Any

from controller.mcp.spec import Caller, Outcome, parse
from controller.mcp.tools import image_info
from controller.services import agent
from controller.services.agent import ActIn, ActionIn, DoneIn

__all__ = [
    "device_act", "device_action", "device_state", "mark_done", "marked_screenshot", "ui_elements",
]


async def device_state(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    data = await agent.device_state(caller.app.state, caller.principal, device)
    return Outcome(data=data, devices=[device])


async def ui_elements(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    data = await agent.ui_elements(caller.app.state, caller.principal, device)
    return Outcome(data=data, devices=[device])


async def marked_screenshot(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    marks = bool(args.get("marks", True))
    png, trace_id = await agent.screenshot(caller.app.state, caller.principal, device,
                                           marks=marks)
    data = {**image_info(png), "marks": marks, "trace_id": trace_id}
    return Outcome(image_png=png, data=data, devices=[device])


async def device_action(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    body = parse(ActionIn, {k: v for k, v in args.items() if k != "device"})
    data = await agent.action(caller.app.state, caller.principal, device, body)
    pngs = {k: data.pop(k) for k in ("at_action_png", "settled_png", "composite_png") if k in data}
    image = pngs.get("composite_png") or pngs.get("at_action_png")
    return Outcome(
        data=data, image_png=base64.b64decode(image) if image else None, devices=[device]
    )


async def device_act(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    body = parse(ActIn, {k: v for k, v in args.items() if k != "device"})
    data = await agent.act(caller.app.state, caller.principal, device, body)
    return Outcome(data=data, devices=[device])


async def mark_done(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    body = parse(DoneIn, {"goal": args["goal"], "summary": args["summary"]})
    data = await agent.done(caller.app.state, caller.principal, device, body)
    return Outcome(data=data, devices=[device])
