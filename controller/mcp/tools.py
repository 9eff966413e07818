"""The MCP tools and the run resources: what each does, on behalf of whom.

Every tool works for a :class:`Caller` — the principal the ``/mcp`` endpoint authenticated
for *this* HTTP request, and the app whose hub, store and executor it uses — and reaches
devices only the way REST does: :func:`controller.hub.resolve_device` (visibility, through
:func:`controller.auth.authorize` ``view``) then :meth:`controller.hub.Hub.device_call`
(:func:`~controller.auth.authorize` ``use``, the RPC, an audit entry). So a borrower without
a grant gets ``not_found`` here exactly as over REST, and a bridge's policy refusal arrives
as ``forbidden`` with its ``rule``.

Runs are read through :mod:`controller.services.runs`, the service the REST run routes call
too (same visibility: one's own runs, an admin everyone's). Run tools also need the token's
``runs:read`` / ``runs:write`` scope.

Tools raise :class:`protocol.errors.RpcError`; :mod:`controller.mcp.server` turns it into a
tool result with ``isError`` and the REST error body, so an agent sees the same
``{"error": {"code", "message", "rule"?}}`` it would get over HTTP.
"""

from __future__ import annotations

import base64
import struct
from collections import Counter
from typing import Any

from pydantic import BaseModel

from controller.auth import Action, Scope, authorize
from controller.executor import ExecuteRequest
from controller.hub import list_devices, resolve_device
from controller.mcp.spec import Caller, Outcome, parse
from controller.services import runs, services_of
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_DUMP, SCREENSHOT, SHELL

__all__ = [
    "MAX_DUMP_LINES",
    "RUN_URI_PREFIX",
    "device_shell",
    "get_run",
    "image_info",
    "list_devices_tool",
    "list_run_resources",
    "live_frame",
    "logcat_dump",
    "png_base64",
    "read_run_resource",
    "sandbox_executor",
    "screenshot",
]

RUN_URI_PREFIX = "run://"
MAX_DUMP_LINES = 5000
MAX_LISTED_RUNS = 50


# --- argument models (the tool's input schema has already been checked) -------------------


class _ShellArgs(BaseModel):
    device: str
    command: str | None = None
    argv: list[str] | None = None
    timeout_s: float | None = None


class _LogcatArgs(BaseModel):
    device: str
    lines: int | None = None


# --- tools -------------------------------------------------------------------------------


async def sandbox_executor(caller: Caller, args: dict[str, Any]) -> Outcome:
    caller.require(Scope.RUNS_WRITE)
    body = parse(ExecuteRequest, args)  # "apks", "retries": refused by the schema already
    executor = services_of(caller.request).executor  # the app's one executor
    plan = await executor.plan(body, caller.principal)
    results = await executor.run(plan, listener=caller.progress)
    answers = [r.to_json() for r in results]
    data = answers[0] if len(answers) == 1 else {"results": answers}
    devices = [str(r.device_id) for r in results if r.device]
    return Outcome(data=data, devices=devices, runs=results)


async def list_devices_tool(caller: Caller, args: dict[str, Any]) -> Outcome:
    records = await list_devices(caller.hub, caller.principal)
    # The handle to pass as `device`: the bare serial while only one bridge has it
    # (docs/mcp.md); the qualified BRIDGE~SERIAL stays beside it.
    counts = Counter(r.serial for r in records)
    devices = []
    for record in records:
        item = record.to_json()
        item["qualified_id"] = record.id
        if counts[record.serial] == 1:
            item["id"] = record.serial
        devices.append(item)
    return Outcome(data={"devices": devices})


async def device_shell(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = parse(_ShellArgs, args)
    if (a.command is None) == (a.argv is None):
        raise RpcError(ErrorCode.BAD_REQUEST, "give exactly one of 'command' or 'argv'",
                       {"errors": [{"loc": ["command"], "msg": "exactly one of command, argv"}]})
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    params = a.model_dump(exclude_none=True, exclude={"device"})
    timeout = None if a.timeout_s is None else a.timeout_s + hub.settings.rpc_timeout_s
    out = await hub.device_call(caller.principal, record.ref, SHELL, params, timeout_s=timeout)
    return Outcome(
        data={"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr},
        devices=[record.id],
    )


async def logcat_dump(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = parse(_LogcatArgs, args)
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    params: dict[str, Any] = {} if a.lines is None else {"lines": a.lines}
    out = await hub.device_call(caller.principal, record.ref, LOGCAT_DUMP, params)
    return Outcome(data={"lines": list(out.lines)}, devices=[record.id])


async def screenshot(caller: Caller, args: dict[str, Any]) -> Outcome:
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, str(args["device"]))
    out = await hub.device_call(caller.principal, record.ref, SCREENSHOT, {})
    return Outcome(image_png=out.png, data=image_info(out.png), devices=[record.id])


async def live_frame(caller: Caller, args: dict[str, Any]) -> Outcome:
    """The newest frame of the device's live screen: no new screencap (docs/screen.md)."""
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, str(args["device"]))
    await authorize(caller.principal, record.ref, Action.USE, store=hub.store)
    frame = await hub.screens.latest_picture(record.ref)
    if frame is None:
        raise RpcError(ErrorCode.CONFLICT, "no live picture of this device: nobody watches its "
                       "screen (take a screenshot instead)", {"reason": "no_live_screen"})
    return Outcome(image_png=frame.data, image_type=f"image/{frame.codec}",
                   data={"n": frame.n, "ts": frame.ts, "width": frame.w, "height": frame.h,
                         "mime_type": f"image/{frame.codec}", "bytes": len(frame.data)},
                   devices=[record.id])


async def get_run(caller: Caller, args: dict[str, Any]) -> Outcome:
    return Outcome(data=await _load_run(caller, str(args["run_id"])))


async def _load_run(caller: Caller, run_id: str) -> dict[str, Any]:
    caller.require(Scope.RUNS_READ)
    return await runs.get_run(caller.app.state, caller.principal, run_id)


# --- resources ---------------------------------------------------------------------------


async def list_run_resources(caller: Caller) -> list[dict[str, Any]]:
    """The caller's newest runs as ``run://{id}`` resources (an admin: everyone's)."""
    caller.require(Scope.RUNS_READ)
    listing = await runs.list_runs(caller.app.state, caller.principal, MAX_LISTED_RUNS)
    return list(listing["runs"])


async def read_run_resource(caller: Caller, uri: str) -> dict[str, Any]:
    """A ``run://{id}`` resource: the run as ``GET /v1/runs/{id}`` answers it."""
    if not uri.startswith(RUN_URI_PREFIX):
        raise RpcError(ErrorCode.NOT_FOUND, "no such resource")
    return await _load_run(caller, uri.removeprefix(RUN_URI_PREFIX).rstrip("/"))


def png_base64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def image_info(data: bytes, mime_type: str = "image/png") -> dict[str, Any]:
    """A tool's structured answer beside an image: its type, size and (a PNG's) dimensions."""
    info: dict[str, Any] = {"mime_type": mime_type, "bytes": len(data)}
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        info["width"], info["height"] = struct.unpack(">II", data[16:24])
    return info
