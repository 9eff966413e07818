"""Apps as MCP tools, calling :mod:`controller.services.manage` — the service the REST routes of
:mod:`controller.api.manage` call too — with the MCP request's principal: the same loan scope,
bridge policy and audit entries as REST.

``install_app`` takes the APK base64-encoded in the tool call, so it is bounded by
:data:`MAX_MCP_APK_BYTES` (a JSON message is not a streaming upload: larger APKs go through
REST or ``droidwire app install``). Arguments arrive checked against the tool's input schema.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from typing import Any

from controller.mcp.spec import Caller, Outcome
from controller.services import manage
from protocol.errors import ErrorCode, RpcError

__all__ = ["MAX_MCP_APK_BYTES", "app_action", "install_app", "list_apps"]

MAX_MCP_APK_BYTES = 32 * 1024 * 1024
MAX_MCP_APK_CHARS = (MAX_MCP_APK_BYTES * 4) // 3 + 4


async def list_apps(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    out = await manage.list_apps(caller.app.state, caller.principal, device)
    return Outcome(data=out.model_dump(), devices=[device])


async def install_app(caller: Caller, args: dict[str, Any]) -> Outcome:
    device = str(args["device"])
    try:
        apk = base64.b64decode(str(args["apk_base64"]), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RpcError(ErrorCode.BAD_REQUEST, "apk_base64 is not base64",
                       {"errors": [{"loc": ["apk_base64"], "msg": "not base64"}]}) from exc
    if len(apk) > MAX_MCP_APK_BYTES:
        raise RpcError(ErrorCode.BAD_REQUEST, f"at most {MAX_MCP_APK_BYTES} bytes over MCP")

    async def body() -> AsyncIterator[bytes]:
        yield apk

    out = await manage.install(caller.app.state, caller.principal, device, body(), len(apk))
    return Outcome(data=out.model_dump(), devices=[device])


async def app_action(caller: Caller, args: dict[str, Any]) -> Outcome:
    device, package, action = str(args["device"]), str(args["package"]), str(args["action"])
    if action == "uninstall":
        await manage.uninstall_app(caller.app.state, caller.principal, device, package)
    else:
        await manage.act_on_app(
            caller.app.state, caller.principal, device, package,
            manage.AppAction.model_validate({"action": action}),
        )
    return Outcome(data={"ok": True, "package": package, "action": action}, devices=[device])
