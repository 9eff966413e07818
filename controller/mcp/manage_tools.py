"""Apps (and device health) as MCP tools, sharing the REST handlers of
:mod:`controller.api.manage` with the MCP request's principal: the same loan scope, bridge
policy and audit entries as REST.

``install_app`` takes the APK base64-encoded in the tool call, so it is bounded by
:data:`MAX_MCP_APK_BYTES` (a JSON message is not a streaming upload: larger APKs go through
REST or ``droidwire app install``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.api import manage
from controller.mcp.spec import Caller, Outcome, ToolSpec
from protocol.errors import ErrorCode, RpcError

__all__ = ["MAX_MCP_APK_BYTES", "manage_tools"]

MAX_MCP_APK_BYTES = 32 * 1024 * 1024
_DEVICE = {
    "type": "string",
    "description": "A device: SERIAL when unambiguous, else BRIDGE~SERIAL (see list_devices).",
}
_PACKAGE = {"type": "string", "description": "An app's package name."}
_M = TypeVar("_M", bound=BaseModel)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = Field(min_length=1, max_length=400)


class _Install(_Args):
    apk_base64: str = Field(min_length=1, max_length=(MAX_MCP_APK_BYTES * 4) // 3 + 4)


class _AppAct(_Args):
    package: str = Field(min_length=1, max_length=255)
    action: str = Field(pattern=r"^(launch|stop|clear|uninstall)$")


def _parse(model: type[_M], args: dict[str, Any]) -> _M:
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()[:20]]
        raise RpcError(ErrorCode.BAD_REQUEST, "invalid arguments", {"errors": errors}) from None


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


async def _list_apps(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_Args, args)
    out = await manage.list_apps(a.device, caller.principal, caller.request)
    return Outcome(data=out.model_dump(), devices=[a.device])


async def _install_app(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_Install, args)
    try:
        apk = base64.b64decode(a.apk_base64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RpcError(ErrorCode.BAD_REQUEST, "apk_base64 is not base64") from exc
    if len(apk) > MAX_MCP_APK_BYTES:
        raise RpcError(ErrorCode.BAD_REQUEST, f"at most {MAX_MCP_APK_BYTES} bytes over MCP")

    async def body() -> AsyncIterator[bytes]:
        yield apk

    out = await manage.install(caller.request, caller.principal, a.device, body(), len(apk))
    return Outcome(data=out.model_dump(), devices=[a.device])


async def _app_action(caller: Caller, args: dict[str, Any]) -> Outcome:
    a = _parse(_AppAct, args)
    if a.action == "uninstall":
        await manage.uninstall_app(a.device, a.package, caller.principal, caller.request)
    else:
        await manage.act_on_app(
            a.device, a.package, manage.AppAction(action=a.action),  # type: ignore[arg-type]
            caller.principal, caller.request,
        )
    return Outcome(data={"ok": True, "package": a.package, "action": a.action},
                   devices=[a.device])


def manage_tools() -> list[ToolSpec]:
    return [
        ToolSpec(
            "list_apps",
            "Third-party apps on a device: package, managed (installed through droidwire), "
            "yours (installed by you during your loan; a borrower sees only these).",
            _object({"device": _DEVICE}, ["device"]),
            _list_apps,
            read_only=True,
        ),
        ToolSpec(
            "install_app",
            "Install an APK (base64, at most 32 MiB) on a device; answers the package the "
            "device reported. A borrower's install never replaces an existing app and is "
            "removed when the loan ends.",
            _object({"device": _DEVICE, "apk_base64": {"type": "string"}},
                    ["device", "apk_base64"]),
            _install_app,
        ),
        ToolSpec(
            "app_action",
            "Launch, stop (force-stop), clear (its data) or uninstall an app. A borrower may "
            "act only on apps they installed during the loan (else forbidden, loan_scope).",
            _object(
                {"device": _DEVICE, "package": _PACKAGE,
                 "action": {"type": "string", "enum": ["launch", "stop", "clear", "uninstall"]}},
                ["device", "package", "action"],
            ),
            _app_action,
        ),
    ]
