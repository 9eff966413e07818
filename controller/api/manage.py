"""Apps and files on a device, over REST (docs/security.md, "Apps and files").

- ``GET /v1/devices/{device}/apps`` → ``{"apps": [{"package", "managed", "yours"}]}``
- ``POST /v1/devices/{device}/apps`` (body: the APK's bytes, ``Content-Length`` required) →
  201 ``{"package", "replaced"}``
- ``GET /v1/devices/{device}/apps/{package}`` → one app, 404 if it is not listed
- ``POST /v1/devices/{device}/apps/{package}`` (``{"action": "launch"|"stop"|"clear"}``)
- ``DELETE /v1/devices/{device}/apps/{package}`` → 204
- ``PUT /v1/devices/{device}/files?path=…`` (body: the bytes) → 201 ``{"path", "size"}``
- ``GET /v1/devices/{device}/files?path=…`` → the bytes (``application/octet-stream``)

What each does — checks, loan scope, audit, streaming through a stage on the bridge — is
:mod:`controller.services.manage`, which the MCP app tools call too; these routes add HTTP
(the ``Content-Length``, ``413``, the streamed response). Uploads and downloads are bounded by ``ControllerConfig.max_transfer_bytes`` — this route's own limit,
larger than (and exempt from) any limit on ordinary request bodies; more is ``413``.

A **borrower** (neither admin nor owner) acts only inside their loan: apps they installed
during it (the package the device reported, noted in ``loan_items``), and files in their
loan's working folder (a relative ``path`` is taken inside it). Anything else is refused
``403`` with rule ``loan_scope`` — and audited, like every call here. What they leave is
removed when the loan ends (:mod:`controller.loans`). The owner's bridge policy applies on
top, to everyone.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from controller.api.errors import error_body
from controller.auth.authorization import Action, authorize
from controller.auth.http import UserPrincipal
from controller.health import Thresholds
from controller.hub import resolve_device
from controller.services import manage, services_of
from controller.services.manage import CHUNK, AppAction, AppOut, AppsOut, Installed, Pushed
from protocol.errors import RpcError

__all__ = ["CHUNK", "TRANSFER_ROUTES", "AppAction", "Installed", "router"]

router = APIRouter(prefix="/v1/devices", tags=["devices"])

#: The routes whose bodies are transfers, bounded by ``max_transfer_bytes`` (their own,
#: larger limit, checked while streaming): a limit on ordinary request bodies skips them.
TRANSFER_ROUTES = re.compile(r"^/v1/devices/[^/]+/(apps|files)$|^/manage/[^/]+/apps$")


def _problem(exc: RpcError, status: int) -> JSONResponse:
    return JSONResponse(error_body(exc.code.value, exc.message, exc.data), status_code=status)


def _too_large(exc: RpcError) -> bool:
    return bool(exc.data and exc.data.get("reason") == "too_large")


# -- apps ---------------------------------------------------------------------------------------


@router.get("/{device}/apps", response_model=AppsOut)
async def list_apps(device: str, principal: UserPrincipal, request: Request) -> AppsOut:
    """Third-party apps. A borrower sees only the apps they installed (the lender's own apps
    are the lender's business)."""
    return await manage.list_apps(request.app.state, principal, device)


@router.post("/{device}/apps", status_code=201, response_model=Installed)
async def install_app(device: str, principal: UserPrincipal, request: Request) -> Any:
    """Install the APK in the body. A borrower's install never replaces an app already on the
    device, and is removed when their loan ends."""
    state = request.app.state
    try:
        size = manage.content_size(request.headers.get("content-length"),
                                   manage.transfer_limit(state))
        return await manage.install(state, principal, device, request.stream(), size)
    except RpcError as exc:
        if _too_large(exc):
            return _problem(exc, 413)
        raise


@router.get("/{device}/apps/{package}", response_model=AppOut)
async def get_app(device: str, package: str, principal: UserPrincipal, request: Request) -> AppOut:
    return await manage.get_app(request.app.state, principal, device, package)


@router.post("/{device}/apps/{package}", status_code=204)
async def act_on_app(
    device: str, package: str, body: AppAction, principal: UserPrincipal, request: Request
) -> Response:
    """Launch (its launcher activity), stop (force-stop) or clear (its data) an app."""
    await manage.act_on_app(request.app.state, principal, device, package, body)
    return Response(status_code=204)


@router.delete("/{device}/apps/{package}", status_code=204)
async def uninstall_app(
    device: str, package: str, principal: UserPrincipal, request: Request
) -> Response:
    await manage.uninstall_app(request.app.state, principal, device, package)
    return Response(status_code=204)


# -- files --------------------------------------------------------------------------------------


@router.put("/{device}/files", status_code=201, response_model=Pushed)
async def push_file(
    device: str,
    principal: UserPrincipal,
    request: Request,
    path: Annotated[str, Query(max_length=1024)],
) -> Any:
    """Write the body to ``path`` on the device (streamed through the bridge)."""
    try:
        return await manage.push_file(request.app.state, principal, device, path,
                                      request.stream(), request.headers.get("content-length"))
    except RpcError as exc:
        if _too_large(exc):
            return _problem(exc, 413)
        raise


@router.get("/{device}/files", response_class=StreamingResponse)
async def pull_file(
    device: str,
    principal: UserPrincipal,
    request: Request,
    path: Annotated[str, Query(max_length=1024)],
) -> Any:
    """The file at ``path``, streamed (``Content-Length`` set); 413 above the limit."""
    state = request.app.state
    try:
        pulled = await manage.pull_file(state, principal, device, path)
    except RpcError as exc:
        if _too_large(exc):
            return _problem(manage.too_large(manage.transfer_limit(state)), 413)
        raise
    name = posixpath.basename(pulled.path) or "file"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:128]
    return StreamingResponse(
        pulled.body,
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(pulled.size),
            "Content-Disposition": f'attachment; filename="{safe}"',
        },
    )


# -- health -------------------------------------------------------------------------------------


class ThresholdsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_temperature_c: float | None = Field(default=None, ge=0, le=100)
    min_battery: int | None = Field(default=None, ge=0, le=100)


@router.get("/{device}/health")
async def get_health(
    device: str,
    principal: UserPrincipal,
    request: Request,
    fresh: Annotated[bool, Query()] = False,
) -> dict[str, Any]:
    """The latest reading (``fresh=1``: ask the device now): battery level and temperature,
    charging, free/total storage, CPU load, memory use, ``serving`` and its ``reason``."""
    services = services_of(request)
    hub, health = services.hub, services.health
    record = await resolve_device(hub, principal, device)
    await authorize(principal, record.ref, Action.VIEW, store=hub.store)
    reading = None if fresh else health.latest(record.ref)
    if reading is None:
        reading = await health.read(record.ref)
    return {"device": record.id, **reading.to_json()}


@router.get("/{device}/thresholds", response_model=ThresholdsIn)
async def get_thresholds(device: str, principal: UserPrincipal, request: Request) -> ThresholdsIn:
    services = services_of(request)
    hub, health = services.hub, services.health
    record = await resolve_device(hub, principal, device)
    limits = await health.thresholds(record.ref)
    return ThresholdsIn(max_temperature_c=limits.max_temperature_c, min_battery=limits.min_battery)


@router.put("/{device}/thresholds", response_model=ThresholdsIn)
async def put_thresholds(
    device: str, body: ThresholdsIn, principal: UserPrincipal, request: Request
) -> ThresholdsIn:
    """The owner's (or an admin's) limits: above ``max_temperature_c`` or below
    ``min_battery`` percent the device stops serving (null: no limit)."""
    services = services_of(request)
    hub, health = services.hub, services.health
    audit = manage.Audit(hub, principal, "device.thresholds")
    audit.detail.update(body.model_dump())
    audit.device = device[:255]
    try:
        record = await resolve_device(hub, principal, device)
        audit.device = record.id
        await authorize(principal, record.ref, Action.LEND, store=hub.store)
    except RpcError as exc:
        if exc.data and "rule" in exc.data:
            audit.detail["rule"] = str(exc.data["rule"])[:128]
        await audit.record(exc.code.value)
        raise
    await health.set_thresholds(record.ref, Thresholds(body.max_temperature_c, body.min_battery))
    await audit.record("ok")
    return body
