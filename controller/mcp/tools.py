"""The MCP tools and the run resources: what each does, on behalf of whom.

Every tool works for a :class:`Caller` — the principal the ``/mcp`` endpoint authenticated
for *this* HTTP request, and the app whose hub, store and executor it uses — and reaches
devices only the way REST does: :func:`controller.hub.resolve_device` (visibility, through
:func:`controller.auth.authorize` ``view``) then :meth:`controller.hub.Hub.device_call`
(:func:`~controller.auth.authorize` ``use``, the RPC, an audit entry). So a borrower without
a grant gets ``not_found`` here exactly as over REST, and a bridge's policy refusal arrives
as ``forbidden`` with its ``rule``.

Runs are read through the REST handlers of :mod:`controller.api.sandbox` themselves (same
visibility: one's own runs, an admin everyone's). Run tools also need the token's
``runs:read`` / ``runs:write`` scope.

Tools raise :class:`protocol.errors.RpcError`; :mod:`controller.mcp.server` turns it into a
tool result with ``isError`` and the REST error body, so an agent sees the same
``{"error": {"code", "message", "rule"?}}`` it would get over HTTP.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.auth import Action, Scope, authorize
from controller.executor import ExecuteRequest, tool_schema
from controller.hub import list_devices, resolve_device
from controller.mcp.agent_tools import agent_tools
from controller.mcp.manage_tools import manage_tools
from controller.mcp.spec import Caller, Outcome, ToolSpec
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_DUMP, SCREENSHOT, SHELL

__all__ = [
    "RUN_URI_PREFIX",
    "TOOLS",
    "Caller",
    "Outcome",
    "ToolSpec",
    "list_run_resources",
    "read_run_resource",
]

RUN_URI_PREFIX = "run://"
MAX_DUMP_LINES = 5000
MAX_LISTED_RUNS = 50


# --- argument models ---------------------------------------------------------------------

_Device = Annotated[str, Field(min_length=1, max_length=400)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _NoArgs(_Args):
    pass


class _DeviceArgs(_Args):
    device: _Device


class _ShellArgs(_Args):
    device: _Device
    command: str | None = Field(default=None, min_length=1, max_length=8192)
    argv: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    timeout_s: float | None = Field(default=None, gt=0, le=3600)


class _LogcatArgs(_Args):
    device: _Device
    lines: int | None = Field(default=None, ge=1, le=MAX_DUMP_LINES)


class _RunArgs(_Args):
    run_id: str = Field(min_length=1, max_length=64)


_M = TypeVar("_M", bound=BaseModel)


def _parse(model: type[_M], args: Mapping[str, Any]) -> _M:
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        problems = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        raise RpcError(ErrorCode.BAD_REQUEST, "invalid arguments", {"errors": problems}) from exc


# --- tools -------------------------------------------------------------------------------


async def _sandbox_executor(caller: Caller, args: dict[str, Any]) -> Outcome:
    caller.require(Scope.RUNS_WRITE)
    allowed = set(_SANDBOX_SCHEMA["properties"])
    unknown = sorted(set(args) - allowed)
    if unknown:  # e.g. "apks": prebuilt APKs are a REST-only feature
        raise RpcError(
            ErrorCode.BAD_REQUEST, f"unknown arguments: {', '.join(unknown)[:200]}",
            {"errors": [{"loc": [k], "msg": "not allowed"} for k in unknown[:16]]},
        )
    body = _parse(ExecuteRequest, args)
    from controller.api.sandbox import executor_of  # the app's one executor

    executor = executor_of(caller.request)
    plan = await executor.plan(body, caller.principal)
    results = await executor.run(plan, listener=caller.progress)
    data = results[0] if len(results) == 1 else {"results": results}
    devices = [str((r.get("device") or {}).get("id")) for r in results if r.get("device")]
    return Outcome(data=data, devices=devices, runs=results)


async def _list_devices(caller: Caller, args: dict[str, Any]) -> Outcome:
    _parse(_NoArgs, args)
    records = await list_devices(caller.hub, caller.principal)
    return Outcome(data={"devices": [r.to_json() for r in records]})


async def _device_shell(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_ShellArgs, args)
    if (a.command is None) == (a.argv is None):
        raise RpcError(ErrorCode.BAD_REQUEST, "give exactly one of 'command' or 'argv'")
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    params = a.model_dump(exclude_none=True, exclude={"device"})
    timeout = None if a.timeout_s is None else a.timeout_s + hub.settings.rpc_timeout_s
    out = await hub.device_call(caller.principal, record.ref, SHELL, params, timeout_s=timeout)
    return Outcome(
        data={"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr},
        devices=[record.id],
    )


async def _logcat_dump(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_LogcatArgs, args)
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    params: dict[str, Any] = {} if a.lines is None else {"lines": a.lines}
    out = await hub.device_call(caller.principal, record.ref, LOGCAT_DUMP, params)
    return Outcome(data={"lines": list(out.lines)}, devices=[record.id])


async def _screenshot(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_DeviceArgs, args)
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    out = await hub.device_call(caller.principal, record.ref, SCREENSHOT, {})
    return Outcome(image_png=out.png, devices=[record.id])


async def _live_frame(caller: Caller, args: dict[str, Any]) -> Outcome:
    """The newest frame of the device's live screen: no new screencap (docs/screen.md)."""
    a = _parse(_DeviceArgs, args)
    hub = caller.hub
    record = await resolve_device(hub, caller.principal, a.device)
    await authorize(caller.principal, record.ref, Action.USE, store=hub.store)
    frame = await hub.screens.latest_picture(record.ref)
    if frame is None:
        raise RpcError(ErrorCode.CONFLICT, "no live picture of this device: nobody watches its "
                       "screen (take a screenshot instead)", {"reason": "no_live_screen"})
    return Outcome(image_png=frame.data, image_type=f"image/{frame.codec}",
                   data={"n": frame.n, "ts": frame.ts, "width": frame.w, "height": frame.h},
                   devices=[record.id])


async def _get_run(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_RunArgs, args)
    return Outcome(data=await _load_run(caller, a.run_id))


async def _load_run(caller: Caller, run_id: str) -> dict[str, Any]:
    caller.require(Scope.RUNS_READ)
    from controller.api.sandbox import get_run  # REST's own reader: same visibility rules

    run: dict[str, Any] = await get_run(run_id, caller.request, caller.principal)
    return run


# --- resources ---------------------------------------------------------------------------


async def list_run_resources(caller: Caller) -> list[dict[str, Any]]:
    """The caller's newest runs as ``run://{id}`` resources (an admin: everyone's)."""
    caller.require(Scope.RUNS_READ)
    from controller.api.sandbox import list_runs

    listing = await list_runs(caller.request, caller.principal, MAX_LISTED_RUNS, None)
    return list(listing["runs"])


async def read_run_resource(caller: Caller, uri: str) -> dict[str, Any]:
    """A ``run://{id}`` resource: the run as ``GET /v1/runs/{id}`` answers it."""
    if not uri.startswith(RUN_URI_PREFIX):
        raise RpcError(ErrorCode.NOT_FOUND, "no such resource")
    return await _load_run(caller, uri.removeprefix(RUN_URI_PREFIX).rstrip("/"))


# --- the catalogue -----------------------------------------------------------------------

# The sandbox_executor schema, from the one definition ``GET /v1/tools`` serves too.
_TOOL_SCHEMA: dict[str, Any] = tool_schema()["function"]["parameters"]
#: Those arguments plus ``shard`` (docs/sandbox.md, "Sharding"); GET /v1/tools keeps the
#: tool's schema without it.
_SANDBOX_SCHEMA: dict[str, Any] = {
    **_TOOL_SCHEMA,
    "properties": {
        **_TOOL_SCHEMA["properties"],
        "shard": {
            "type": "integer", "minimum": 1, "maximum": 32,
            "description": "Split the test file's test classes (or methods) over this many "
            "matching devices and answer one merged result with per-device detail.",
        },
    },
}
_DEVICE_PROP = {
    "type": "string",
    "description": "A device: its id BRIDGE~SERIAL as list_devices shows it, or SERIAL while unambiguous.",
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "sandbox_executor",
            tool_schema()["function"]["description"],
            _SANDBOX_SCHEMA,
            _sandbox_executor,
        ),
        ToolSpec(
            "list_devices",
            "The devices you may use: id (BRIDGE~SERIAL), serial, bridge, state, model, "
            "release, sdk, battery, profile.",
            _object({}, []),
            _list_devices,
            read_only=True,
        ),
        ToolSpec(
            "device_shell",
            "Run a shell command on a device under its bridge's policy (an allow-list: echo, "
            "getprop, dumpsys reads, input, am/pm for the app under test, …). A refused "
            "command is an error with code 'forbidden' and the rule that refused it.",
            _object(
                {
                    "device": _DEVICE_PROP,
                    "command": {"type": "string", "description": "A command line."},
                    "argv": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Arguments, no shell parsing (instead of command).",
                    },
                    "timeout_s": {"type": "number", "description": "The command's deadline."},
                },
                ["device"],
            ),
            _device_shell,
        ),
        ToolSpec(
            "logcat_dump",
            "The device's log (logcat -d, threadtime), the last `lines` lines if given.",
            _object(
                {
                    "device": _DEVICE_PROP,
                    "lines": {"type": "integer", "minimum": 1, "maximum": MAX_DUMP_LINES},
                },
                ["device"],
            ),
            _logcat_dump,
            read_only=True,
        ),
        ToolSpec(
            "screenshot",
            "A PNG screenshot of the device's screen.",
            _object({"device": _DEVICE_PROP}, ["device"]),
            _screenshot,
            read_only=True,
        ),
        ToolSpec(
            "live_frame",
            "The newest frame of the device's live screen (while someone watches it in the "
            "dashboard), without taking a new screenshot.",
            _object({"device": _DEVICE_PROP}, ["device"]),
            _live_frame,
            read_only=True,
        ),
        ToolSpec(
            "get_run",
            "A sandbox run by id: status, verdict, request, result and its step log.",
            _object({"run_id": {"type": "string"}}, ["run_id"]),
            _get_run,
            read_only=True,
        ),
    )
}


# The agent toolkit's tools live with it (issue 11).
TOOLS.update({spec.name: spec for spec in agent_tools()})
# Apps (issue 18) too.
TOOLS.update({spec.name: spec for spec in manage_tools()})


def png_base64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")
