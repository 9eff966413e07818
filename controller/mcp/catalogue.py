"""Every MCP tool, declared once: name, title, description, input and output schemas, hints.

The functions live beside the code they share (:mod:`.tools` the devices, runs and sandbox;
:mod:`.agent_tools` the agent toolkit; :mod:`.manage_tools` apps). The input schemas carry
the bounds (lengths, ranges, enums): :func:`controller.mcp.spec.check_arguments` applies them
to every call the same way. The output schemas describe each successful call's
``structuredContent`` (keys the docs promise are required; more may be added).
"""

from __future__ import annotations

from typing import Any

import controller.mcp.agent_tools as agent
import controller.mcp.manage_tools as manage
import controller.mcp.tools as tools
from controller.executor import tool_schema
from controller.mcp.spec import DEVICE_PROP, ToolSpec, object_schema

__all__ = ["TOOLS", "tool_list"]

_S = {"type": "string"}
_I = {"type": "integer"}
_B = {"type": "boolean"}
_N = {"type": "number"}
_NULLABLE_S = {"type": ["string", "null"]}
_OBJ = {"type": "object"}


def _out(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return object_schema(properties, required, closed=False)


# The sandbox_executor arguments, from the one definition GET /v1/tools serves, plus `shard`
# (docs/sandbox.md, "Sharding"): GET /v1/tools keeps the tool's schema without it.
_TOOL_SCHEMA: dict[str, Any] = tool_schema()["function"]["parameters"]
_SANDBOX_IN: dict[str, Any] = {
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
# One result (docs/sandbox.md#output), or with several devices {"results": [...]}.
_RESULT_PROPS = {
    "verification_status": {"enum": ["CONFIRMED", "PARTIAL", "REFUTED", "PENDING"]},
    "summary": _S, "has_violations": _B, "blocking_time_ms": _I,
    "strict_mode_violations": {"type": "array", "items": _S},
    "reason_code": _NULLABLE_S, "run_id": _NULLABLE_S,
}
_SANDBOX_OUT = _out({**_RESULT_PROPS, "results": {"type": "array", "items": _OBJ}}, [])
_IMAGE_PROPS = {"mime_type": _S, "bytes": _I, "width": _I, "height": _I}
_STATE_PROPS = {
    "package": _NULLABLE_S, "activity": _NULLABLE_S, "activity_short": _NULLABLE_S,
    "recent_activities": {"type": "array", "items": _S}, "keyboard": _B,
    "screen": {"type": ["object", "null"]}, "orientation": {"type": ["integer", "null"]},
    "battery": {"type": ["object", "integer", "null"]}, "text": _S,
}
_ELEMENT = _out({"index": _I, "class": _S, "text": _S, "desc": _S, "resource_id": _S,
                 "bounds": {"type": "array", "items": _I, "minItems": 4, "maxItems": 4},
                 "clickable": _B, "checked": _B},
                ["index", "class", "text", "desc", "resource_id", "bounds", "clickable"])
_COORD = {"type": "integer", "minimum": 0, "maximum": 100_000}
_ACTION_IN = object_schema(
    {
        "device": DEVICE_PROP,
        "action": {"type": "string", "enum": ["tap", "swipe", "text", "key", "start", "stop"]},
        "index": {"type": "integer", "minimum": 0, "maximum": 10_000},
        **{k: _COORD for k in ("x", "y", "x1", "y1", "x2", "y2")},
        "duration_ms": {"type": "integer", "minimum": 0, "maximum": 60_000},
        "text": {"type": "string", "maxLength": 500},
        "desc": {"type": "string", "maxLength": 200},
        "resource_id": {"type": "string", "maxLength": 200},
        "key": {"type": "string", "minLength": 1, "maxLength": 48},
        "package": {"type": "string", "minLength": 1, "maxLength": 255},
        "activity": {"type": "string", "minLength": 1, "maxLength": 255},
        "settled": _B,
        "settle_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 30},
    },
    ["device", "action"],
)
_ACTION_OUT = _out(
    {"ok": _B, "trace_id": _S, "action": _S, "command": {"type": "array", "items": _S},
     "exit_code": {"type": ["integer", "null"]}, "output": {"type": ["string", "null"]},
     "settled": {"type": ["boolean", "null"]}, "state": _out(_STATE_PROPS, [])},
    ["ok", "trace_id", "action", "state"],
)
_DEVICE_ONLY = object_schema({"device": DEVICE_PROP}, ["device"])
_PACKAGE = {"type": "string", "minLength": 1, "maxLength": 255,
            "description": "An app's package name."}

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "sandbox_executor", "Verify main-thread blocking with a test",
            tool_schema()["function"]["description"], _SANDBOX_IN, _SANDBOX_OUT,
            tools.sandbox_executor,
            # Installs and removes its own APKs, clears the test app's data afterwards.
            destructive=True, open_world=True,
        ),
        ToolSpec(
            "list_devices", "List your devices",
            "The devices you may use: id (the bare serial while only one bridge has it, else "
            "BRIDGE~SERIAL; pass it as `device`), qualified_id (BRIDGE~SERIAL), serial, "
            "bridge, state, model, release, sdk, battery, profile.",
            object_schema({}), _out(
                {"devices": {"type": "array", "items": _out(
                    {"id": _S, "qualified_id": _S, "serial": _S, "bridge": _S, "state": _S,
                     "profile": _S}, ["id", "qualified_id", "serial", "bridge", "state"])}},
                ["devices"]),
            tools.list_devices_tool, read_only=True, idempotent=True,
        ),
        ToolSpec(
            "device_shell", "Run a shell command on a device",
            "Run a shell command on a device under its bridge's policy (an allow-list: echo, "
            "getprop, dumpsys reads, input, am/pm for the app under test, …). A refused "
            "command is an error with code 'forbidden' and the rule that refused it.",
            object_schema({
                "device": DEVICE_PROP,
                "command": {"type": "string", "minLength": 1, "maxLength": 8192,
                            "description": "A command line."},
                "argv": {"type": "array", "minItems": 1, "maxItems": 256,
                         "items": {"type": "string", "maxLength": 4096},
                         "description": "Arguments, no shell parsing (instead of command)."},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                              "description": "The command's deadline."},
            }, ["device"]),
            _out({"exit_code": _I, "stdout": _S, "stderr": _S},
                 ["exit_code", "stdout", "stderr"]),
            tools.device_shell, destructive=True, open_world=True,
        ),
        ToolSpec(
            "logcat_dump", "Read a device's log",
            "The device's log (logcat -d, threadtime), the last `lines` lines if given.",
            object_schema({"device": DEVICE_PROP, "lines": {
                "type": "integer", "minimum": 1, "maximum": tools.MAX_DUMP_LINES}}, ["device"]),
            _out({"lines": {"type": "array", "items": _S}}, ["lines"]),
            tools.logcat_dump, read_only=True, open_world=True,
        ),
        ToolSpec(
            "screenshot", "Take a screenshot",
            "A PNG screenshot of the device's screen (the image; its size as JSON).",
            _DEVICE_ONLY, _out(_IMAGE_PROPS, ["mime_type", "bytes"]),
            tools.screenshot, read_only=True, open_world=True,
        ),
        ToolSpec(
            "live_frame", "The live screen's newest frame",
            "The newest frame of the device's live screen (while someone watches it in the "
            "dashboard), without taking a new screenshot.",
            _DEVICE_ONLY,
            _out({**_IMAGE_PROPS, "n": _I, "ts": _N}, ["n", "ts", "width", "height"]),
            tools.live_frame, read_only=True, open_world=True,
        ),
        ToolSpec(
            "get_run", "Read a sandbox run or agent trace",
            "A sandbox run by id: status, verdict, request, result and its step log.",
            object_schema({"run_id": {"type": "string", "minLength": 1, "maxLength": 64}},
                          ["run_id"]),
            _out({"id": _S, "status": _S, "steps": {"type": "array", "items": _OBJ}},
                 ["id", "status"]),
            tools.get_run, read_only=True, idempotent=True,
        ),
        # The agent toolkit (docs/agent.md).
        ToolSpec(
            "device_state", "Where the device is",
            "Where the device is: app package, Activity (full and short), the last pages, "
            "keyboard, screen size, orientation, battery, and a '[Device State] …' text block "
            "to put in a prompt.",
            _DEVICE_ONLY, _out({**_STATE_PROPS, "trace_id": _S},
                               ["package", "activity", "keyboard", "text", "trace_id"]),
            agent.device_state, read_only=True, open_world=True,
        ),
        ToolSpec(
            "ui_elements", "The on-screen elements",
            "The on-screen elements (uiautomator dump): index, class, text, desc, resource_id, "
            "bounds [l,t,r,b], clickable, checked. Tap one with device_action by its index.",
            _DEVICE_ONLY,
            _out({"elements": {"type": "array", "items": _ELEMENT}, "trace_id": _S},
                 ["elements", "trace_id"]),
            agent.ui_elements, read_only=True, open_world=True,
        ),
        ToolSpec(
            "marked_screenshot", "Screenshot with Set-of-Marks",
            "A PNG of the screen with a magenta crosshair and index on every actionable "
            "element (Set-of-Marks; the indexes are ui_elements'). The crosshairs are "
            "droidwire's overlay, not part of the app's UI.",
            object_schema({"device": DEVICE_PROP, "marks": {"type": "boolean", "default": True}},
                          ["device"]),
            _out({**_IMAGE_PROPS, "marks": _B, "trace_id": _NULLABLE_S},
                 ["mime_type", "bytes", "marks"]),
            agent.marked_screenshot, read_only=True, open_world=True,
        ),
        ToolSpec(
            "device_action", "Act on the device",
            "Act on the device: tap (index, x/y, or text), swipe (x1 y1 x2 y2), text, key "
            "(BACK, HOME, ENTER…), start/stop (package). Returns the new state and the frame "
            "taken ~0.35 s after the action (toasts show there); with settled=true also the "
            "frame once the screen stopped changing, as a side-by-side image.",
            _ACTION_IN, _ACTION_OUT, agent.device_action, destructive=True, open_world=True,
        ),
        ToolSpec(
            "device_act", "Carry out an instruction",
            "Run a natural-language instruction ('open Settings and turn on dark mode'): it is "
            "planned, every step checked against the device owner's policy before anything is "
            "sent, then run with state checks; returns trace_id, ok and the steps.",
            object_schema({"device": DEVICE_PROP, "instruction": {
                "type": "string", "minLength": 1, "maxLength": 1000}, "anr_recovery": {
                "type": "boolean", "default": False,
                "description": "An ANR of the app in front force-stops it (am force-stop) and "
                "captures its screen and log lines into the trace."}},
                ["device", "instruction"]),
            _out({"trace_id": _S, "ok": _B, "message": _S,
                  "steps": {"type": "array", "items": _OBJ}}, ["trace_id", "ok", "steps"]),
            agent.device_act, destructive=True, open_world=True,
        ),
        ToolSpec(
            "mark_done", "Claim the goal reached: the verifier checks",
            "Say the goal is reached: a verifier model compares the screen (your last "
            "device_action's frames, at action and settled, or a fresh screenshot), the device "
            "state and the goal with your summary, and answers ok with a verdict: accepted, "
            "rejected with the gap it sees (act on it, then call mark_done again), or "
            "unverified (no verifier model configured; never an approval).",
            object_schema({
                "device": DEVICE_PROP,
                "goal": {"type": "string", "minLength": 1, "maxLength": 1000,
                         "description": "The user's goal, as given to you."},
                "summary": {"type": "string", "minLength": 1, "maxLength": 1000,
                            "description": "What you did and what the screen should show."},
            }, ["device", "goal", "summary"]),
            _out({"trace_id": _S, "ok": _B, "message": _S,
                  "verdict": _out({"status": {"enum": ["accepted", "rejected", "unverified"]},
                                   "gap": _S, "evidence": _S, "reason": _S}, ["status"]),
                  "state": _out(_STATE_PROPS, [])},
                 ["trace_id", "ok", "verdict"]),
            agent.mark_done, read_only=True, open_world=True,
        ),
        # Apps (docs/security.md#apps-and-files).
        ToolSpec(
            "list_apps", "List the apps on a device",
            "Third-party apps on a device: package, managed (installed through droidwire), "
            "yours (installed by you during your loan; a borrower sees only these).",
            _DEVICE_ONLY,
            _out({"apps": {"type": "array", "items": _out(
                {"package": _S, "managed": _B, "yours": _B}, ["package", "managed", "yours"])}},
                ["apps"]),
            manage.list_apps, read_only=True, idempotent=True, open_world=True,
        ),
        ToolSpec(
            "install_app", "Install an APK",
            "Install an APK (base64, at most 32 MiB) on a device; answers the package the "
            "device reported. A borrower's install never replaces an existing app and is "
            "removed when the loan ends.",
            object_schema({"device": DEVICE_PROP, "apk_base64": {
                "type": "string", "minLength": 1, "maxLength": manage.MAX_MCP_APK_CHARS}},
                ["device", "apk_base64"]),
            _out({"package": _S, "replaced": _B}, ["package", "replaced"]),
            manage.install_app, destructive=True, open_world=True,
        ),
        ToolSpec(
            "app_action", "Launch, stop, clear or uninstall an app",
            "Launch, stop (force-stop), clear (its data) or uninstall an app. A borrower may "
            "act only on apps they installed during the loan (else forbidden, loan_scope).",
            object_schema({"device": DEVICE_PROP, "package": _PACKAGE, "action": {
                "type": "string", "enum": ["launch", "stop", "clear", "uninstall"]}},
                ["device", "package", "action"]),
            _out({"ok": _B, "package": _S, "action": _S}, ["ok", "package", "action"]),
            manage.app_action, destructive=True, open_world=True,
        ),
    )
}


def tool_list() -> list[ToolSpec]:
    return list(TOOLS.values())
