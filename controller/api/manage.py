"""Apps and files on a device, over REST (docs/security.md, "Apps and files").

- ``GET /v1/devices/{device}/apps`` → ``{"apps": [{"package", "managed", "yours"}]}``
- ``POST /v1/devices/{device}/apps`` (body: the APK's bytes, ``Content-Length`` required) →
  201 ``{"package", "replaced"}``
- ``GET /v1/devices/{device}/apps/{package}`` → one app, 404 if it is not listed
- ``POST /v1/devices/{device}/apps/{package}`` (``{"action": "launch"|"stop"|"clear"}``)
- ``DELETE /v1/devices/{device}/apps/{package}`` → 204
- ``PUT /v1/devices/{device}/files?path=…`` (body: the bytes) → 201 ``{"path", "size"}``
- ``GET /v1/devices/{device}/files?path=…`` → the bytes (``application/octet-stream``)

Bodies are streamed: the controller holds at most one chunk (:data:`CHUNK`) of a transfer,
and forwards it to a stage on the bridge (:mod:`protocol.manage_methods`). Uploads and
downloads are bounded by ``ControllerConfig.max_transfer_bytes`` — this route's own limit,
larger than (and exempt from) any limit on ordinary request bodies; more is ``413``.

A **borrower** (neither admin nor owner) acts only inside their loan: apps they installed
during it (the package the device reported, noted in ``loan_items``), and files in their
loan's working folder (a relative ``path`` is taken inside it). Anything else is refused
``403`` with rule ``loan_scope`` — and audited, like every call here. What they leave is
removed when the loan ends (:mod:`controller.loans`). The owner's bridge policy applies on
top, to everyone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import posixpath
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from controller.api.errors import error_body
from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.auth.http import UserPrincipal
from controller.health import HealthMonitor, Thresholds
from controller.hub import Hub, resolve_device
from controller.loans import APP, FOLDER, Loans, is_borrower, loan_folder
from controller.store import Token, User
from protocol.errors import ErrorCode, RpcError
from protocol.manage_methods import (
    APPS_CLEAR,
    APPS_INSTALL,
    APPS_LAUNCH,
    APPS_LIST,
    APPS_STOP,
    APPS_UNINSTALL,
    FILES_PULL,
    FILES_PUSH,
    STAGE_CLOSE,
    STAGE_OPEN,
    STAGE_READ,
    STAGE_WRITE,
    AppParams,
    StageResult,
)
from protocol.methods import DeviceParams, Method

__all__ = ["CHUNK", "TRANSFER_ROUTES", "AppAction", "Installed", "install", "router"]

router = APIRouter(prefix="/v1/devices", tags=["devices"])

#: The routes whose bodies are transfers, bounded by ``max_transfer_bytes`` (their own,
#: larger limit, checked while streaming): a limit on ordinary request bodies skips them.
TRANSFER_ROUTES = re.compile(r"^/v1/devices/[^/]+/(apps|files)$|^/manage/[^/]+/apps$")
CHUNK = 1024 * 1024  # bytes per stage.write / stage.read
WINDOW = 4  # stage.write calls in flight at once (the bridge's write-ahead holds 16 MiB)
DEFAULT_MAX_TRANSFER_BYTES = 1024**3

class AppOut(BaseModel):
    package: str
    managed: bool  # installed through droidwire
    yours: bool  # installed by the caller during their loan (always false for an owner)


class AppsOut(BaseModel):
    apps: list[AppOut]


class Installed(BaseModel):
    package: str
    replaced: bool


class AppAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["launch", "stop", "clear"]


class Pushed(BaseModel):
    path: str
    size: int


# -- helpers ------------------------------------------------------------------------------------


def _hub(request: Request) -> Hub:
    hub: Hub | None = getattr(request.app.state, "hub", None)
    if hub is None:
        raise RpcError(ErrorCode.UNAVAILABLE, "the hub is not running")
    return hub


def _loans(request: Request) -> Loans:
    loans: Loans | None = getattr(request.app.state, "loans", None)
    if loans is None:
        raise RpcError(ErrorCode.UNAVAILABLE, "loans are not tracked yet")
    return loans


def _limit(request: Request) -> int:
    config = getattr(request.app.state, "config", None)
    return int(getattr(config, "max_transfer_bytes", DEFAULT_MAX_TRANSFER_BYTES))


class _Audit:
    """Authorize, then audit how the act ended (refusals too), with ``detail``."""

    def __init__(self, hub: Hub, principal: Principal, action: str) -> None:
        self.hub, self.principal, self.action = hub, principal, action
        self.detail: dict[str, Any] = {}
        self.device: str | None = None

    @contextlib.asynccontextmanager
    async def on(self, request: Request, text: str) -> AsyncIterator[DeviceRef]:
        self.device = text[:255]
        try:
            record = await resolve_device(self.hub, self.principal, text)
            self.device = record.id
            await authorize(self.principal, record.ref, Action.USE, store=self.hub.store)
            if self.hub.gate is not None:
                self.hub.gate(record.ref)
            yield record.ref
        except RpcError as exc:
            if exc.data and "rule" in exc.data:
                self.detail["rule"] = str(exc.data["rule"])[:128]
            await self._record(exc.code.value)
            raise
        await self._record("ok")

    async def _record(self, outcome: str) -> None:
        with contextlib.suppress(Exception):  # a failing audit write never hides the outcome
            await self.hub.audit.record(
                self.principal, self.action, device=self.device, outcome=outcome,
                detail=self.detail,
            )


async def _still_allowed(hub: Hub, principal: Principal, device: DeviceRef) -> None:
    """Between two chunks of a transfer: the loan still holds, the caller's token is not
    revoked and their account not disabled (one indexed read) — else the transfer stops."""
    await authorize(principal, device, Action.USE, store=hub.store)
    async with hub.store.engine.connect() as conn:
        row = (await conn.execute(
            select(Token.revoked_at, User.disabled_at)
            .join(User, Token.owner_id == User.id)
            .where(Token.id == principal.token_id)
        )).one_or_none()
    if row is None or row.revoked_at is not None or row.disabled_at is not None:
        raise RpcError(ErrorCode.FORBIDDEN, "access ended: the token was revoked or its "
                       "account disabled", {"rule": "access_ended"})


def _refuse(message: str) -> RpcError:
    return RpcError(ErrorCode.FORBIDDEN, message, {"rule": "loan_scope"})


def _too_large(limit: int) -> RpcError:
    return RpcError(
        ErrorCode.BAD_REQUEST,
        f"at most {limit} bytes per transfer",
        {"reason": "too_large", "limit": limit},
    )


def _size(request: Request, limit: int) -> int:
    raw = request.headers.get("content-length")
    if raw is None or not raw.isdigit():
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            "send the body with a Content-Length (the bridge reserves the size up front)",
            {"reason": "length_required"},
        )
    size = int(raw)
    if size > limit:
        raise _too_large(limit)
    return size


async def _upload(
    hub: Hub, principal: Principal, device: DeviceRef, body: AsyncIterator[bytes], size: int
) -> str:
    """Stream ``body`` (``size`` bytes) into a new stage on the device's bridge; its id."""
    opened = await hub.call(
        device, STAGE_OPEN, STAGE_OPEN.parse_params({"serial": device.serial, "size": size})
    )
    stage = opened.stage
    await _fill(hub, principal, device, stage, body, size)
    return stage


async def _fill(
    hub: Hub,
    principal: Principal,
    device: DeviceRef,
    stage: str,
    body: AsyncIterator[bytes],
    size: int,
) -> None:
    """Write ``body`` into ``stage`` chunk by chunk, :data:`WINDOW` writes in flight (the
    bridge puts early ones in order); the stage is closed on any failure. Rights are checked
    again at every chunk: a loan that ends mid-upload stops it."""
    offset = 0
    buffer = bytearray()
    flying: collections.deque[asyncio.Task[StageResult]] = collections.deque()

    async def send(data: bytes) -> None:
        nonlocal offset
        await _still_allowed(hub, principal, device)
        while len(flying) >= WINDOW:
            await flying.popleft()
        params = STAGE_WRITE.parse_params(
            {"serial": device.serial, "stage": stage, "offset": offset, "data": data}
        )
        flying.append(asyncio.create_task(hub.call(device, STAGE_WRITE, params)))
        offset += len(data)

    try:
        async for part in body:
            buffer += part
            if offset + len(buffer) > size:
                raise RpcError(ErrorCode.BAD_REQUEST, "the body is longer than its Content-Length")
            while len(buffer) >= CHUNK:
                chunk = bytes(buffer[:CHUNK])
                del buffer[:CHUNK]
                await send(chunk)
        if buffer:
            await send(bytes(buffer))
        while flying:
            await flying.popleft()
        if offset != size:
            raise RpcError(ErrorCode.BAD_REQUEST, f"the body ended at {offset} of {size} bytes")
    except BaseException:
        for task in flying:
            task.cancel()
        for task in flying:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await hub.call(device, STAGE_CLOSE,
                           STAGE_CLOSE.parse_params({"serial": device.serial, "stage": stage}))
        raise


def _problem(exc: RpcError, status: int) -> JSONResponse:
    return JSONResponse(error_body(exc.code.value, exc.message, exc.data), status_code=status)


# -- apps ---------------------------------------------------------------------------------------


@router.get("/{device}/apps", response_model=AppsOut)
async def list_apps(device: str, principal: UserPrincipal, request: Request) -> AppsOut:
    """Third-party apps. A borrower sees only the apps they installed (the lender's own apps
    are the lender's business)."""
    hub, loans = _hub(request), _loans(request)
    audit = _Audit(hub, principal, "apps.list")
    async with audit.on(request, device) as ref:
        result = await hub.call(ref, APPS_LIST, DeviceParams(serial=ref.serial))
        borrower = is_borrower(principal, ref)
        mine = await loans.items(principal.user_id, ref) if borrower else set()
    apps = [
        AppOut(package=a.package, managed=a.managed, yours=a.package in mine)
        for a in result.apps
        if not borrower or a.package in mine
    ]
    return AppsOut(apps=apps)


@router.post("/{device}/apps", status_code=201, response_model=Installed)
async def install_app(device: str, principal: UserPrincipal, request: Request) -> Any:
    """Install the APK in the body. A borrower's install never replaces an app already on the
    device, and is removed when their loan ends."""
    try:
        size = _size(request, _limit(request))
        return await install(request, principal, device, request.stream(), size)
    except RpcError as exc:
        if exc.data and exc.data.get("reason") == "too_large":
            return _problem(exc, 413)
        raise


async def install(
    request: Request, principal: Principal, device: str, body: AsyncIterator[bytes], size: int
) -> Installed:
    """Install ``size`` bytes of APK from ``body`` on ``device`` for ``principal`` (REST and
    MCP)."""
    hub, loans = _hub(request), _loans(request)
    audit = _Audit(hub, principal, "apps.install")
    audit.detail["size"] = size
    async with audit.on(request, device) as ref:
        if size > _limit(request):
            raise _too_large(_limit(request))
        borrower = is_borrower(principal, ref)
        stage = await _upload(hub, principal, ref, body, size)
        result = await hub.call(ref, APPS_INSTALL, APPS_INSTALL.parse_params(
            {"serial": ref.serial, "stage": stage, "temporary": borrower}))
        package = result.package
        audit.detail["package"] = package
        if borrower and package:
            await loans.remember(principal, ref, APP, package)
    return Installed(package=package, replaced=result.replaced)


_APP_ACTIONS: dict[str, Method[AppParams, Any]] = {
    "launch": APPS_LAUNCH, "stop": APPS_STOP, "clear": APPS_CLEAR,
}

async def _own_app(loans: Loans, principal: Principal, ref: DeviceRef, package: str) -> None:
    if is_borrower(principal, ref) and package not in await loans.items(principal.user_id, ref):
        raise _refuse(f"{package} was not installed during your loan")


@router.get("/{device}/apps/{package}", response_model=AppOut)
async def get_app(device: str, package: str, principal: UserPrincipal, request: Request) -> AppOut:
    apps = await list_apps(device, principal, request)
    for app in apps.apps:
        if app.package == package:
            return app
    raise RpcError(ErrorCode.NOT_FOUND, f"no app {package[:255]!r} listed on this device")


@router.post("/{device}/apps/{package}", status_code=204)
async def act_on_app(
    device: str, package: str, body: AppAction, principal: UserPrincipal, request: Request
) -> Response:
    """Launch (its launcher activity), stop (force-stop) or clear (its data) an app."""
    hub, loans = _hub(request), _loans(request)
    audit = _Audit(hub, principal, f"apps.{body.action}")
    audit.detail["package"] = package[:255]
    async with audit.on(request, device) as ref:
        await _own_app(loans, principal, ref, package)
        method = _APP_ACTIONS[body.action]
        await hub.call(ref, method, method.parse_params({"serial": ref.serial, "package": package}))
    return Response(status_code=204)


@router.delete("/{device}/apps/{package}", status_code=204)
async def uninstall_app(
    device: str, package: str, principal: UserPrincipal, request: Request
) -> Response:
    hub, loans = _hub(request), _loans(request)
    audit = _Audit(hub, principal, "apps.uninstall")
    audit.detail["package"] = package[:255]
    async with audit.on(request, device) as ref:
        await _own_app(loans, principal, ref, package)
        await hub.call(ref, APPS_UNINSTALL,
                       APPS_UNINSTALL.parse_params({"serial": ref.serial, "package": package}))
        if is_borrower(principal, ref):
            await loans.forget(principal.user_id, ref, APP, package)
    return Response(status_code=204)


# -- files --------------------------------------------------------------------------------------


def _device_path(principal: Principal, ref: DeviceRef, path: str) -> str:
    """The path a call may use: for a borrower, inside their loan's folder (a relative path is
    taken there); for the owner or an admin, any absolute path the bridge's policy allows."""
    if not path or len(path) > 1024 or "\x00" in path:
        raise RpcError(ErrorCode.BAD_REQUEST, "path: 1 to 1024 characters, no NUL")
    if not is_borrower(principal, ref):
        if not path.startswith("/"):
            raise RpcError(ErrorCode.BAD_REQUEST, "path must be absolute")
        return posixpath.normpath("/" + path.lstrip("/"))
    base = loan_folder(principal.user_id)
    full = posixpath.normpath(path if path.startswith("/") else f"{base}/{path}")
    if not full.startswith(base + "/"):
        raise _refuse(f"a borrower's files live in {base}/ (their loan's folder)")
    return full


@router.put("/{device}/files", status_code=201, response_model=Pushed)
async def push_file(
    device: str,
    principal: UserPrincipal,
    request: Request,
    path: Annotated[str, Query(max_length=1024)],
) -> Any:
    """Write the body to ``path`` on the device (streamed through the bridge)."""
    hub, loans = _hub(request), _loans(request)
    limit = _limit(request)
    audit = _Audit(hub, principal, "files.push")
    audit.detail["path"] = path[:1024]
    try:
        async with audit.on(request, device) as ref:
            target = _device_path(principal, ref, path)
            audit.detail["path"] = target
            size = _size(request, limit)
            audit.detail["size"] = size
            if is_borrower(principal, ref):
                await loans.remember(principal, ref, FOLDER, loan_folder(principal.user_id))
            # The push to the device starts at once and reads the stage as it fills, so the
            # upload and the device's write overlap (docs/benchmarks.md, push_mb_per_s).
            opened = await hub.call(
                ref, STAGE_OPEN, STAGE_OPEN.parse_params({"serial": ref.serial, "size": size})
            )
            stage = opened.stage
            push = asyncio.create_task(hub.call(ref, FILES_PUSH, FILES_PUSH.parse_params(
                {"serial": ref.serial, "stage": stage, "path": target})))
            try:
                await _fill(hub, principal, ref, stage, request.stream(), size)
            except RpcError as exc:
                if exc.code is ErrorCode.NOT_FOUND:
                    # The stage is gone: the push refused or failed first, and says why.
                    with contextlib.suppress(asyncio.CancelledError):
                        await push
                    raise
                push.cancel()
                with contextlib.suppress(BaseException):
                    await push
                raise
            except BaseException:
                push.cancel()
                with contextlib.suppress(BaseException):
                    await push
                raise
            await push
    except RpcError as exc:
        if exc.data and exc.data.get("reason") == "too_large":
            return _problem(exc, 413)
        raise
    return Pushed(path=target, size=size)


@router.get("/{device}/files", response_class=StreamingResponse)
async def pull_file(
    device: str,
    principal: UserPrincipal,
    request: Request,
    path: Annotated[str, Query(max_length=1024)],
) -> Any:
    """The file at ``path``, streamed (``Content-Length`` set); 413 above the limit."""
    hub = _hub(request)
    limit = _limit(request)
    audit = _Audit(hub, principal, "files.pull")
    audit.detail["path"] = path[:1024]
    try:
        async with audit.on(request, device) as ref:
            target = _device_path(principal, ref, path)
            audit.detail["path"] = target
            pulled = await hub.call(ref, FILES_PULL, FILES_PULL.parse_params(
                {"serial": ref.serial, "path": target, "max_bytes": limit}))
            stage, size = pulled.stage, pulled.size
            audit.detail["size"] = size
    except RpcError as exc:
        if exc.data and exc.data.get("reason") == "too_large":
            return _problem(_too_large(limit), 413)
        raise

    async def body() -> AsyncIterator[bytes]:
        offset = 0
        try:
            while offset < size:
                await _still_allowed(hub, principal, ref)
                got = await hub.call(ref, STAGE_READ, STAGE_READ.parse_params(
                    {"serial": ref.serial, "stage": stage, "offset": offset,
                     "length": min(CHUNK, size - offset)}))
                data = got.data
                if not data:
                    break
                offset += len(data)
                yield data
        finally:
            with contextlib.suppress(Exception):
                await hub.call(ref, STAGE_CLOSE,
                               STAGE_CLOSE.parse_params({"serial": ref.serial, "stage": stage}))

    name = posixpath.basename(target) or "file"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:128]
    return StreamingResponse(
        body(),
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{safe}"',
        },
    )


# -- health -------------------------------------------------------------------------------------


class ThresholdsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_temperature_c: float | None = Field(default=None, ge=0, le=100)
    min_battery: int | None = Field(default=None, ge=0, le=100)


def _health(request: Request) -> HealthMonitor:
    health: HealthMonitor | None = getattr(request.app.state, "health", None)
    if health is None:
        raise RpcError(ErrorCode.UNAVAILABLE, "health is not tracked yet")
    return health


@router.get("/{device}/health")
async def get_health(
    device: str,
    principal: UserPrincipal,
    request: Request,
    fresh: Annotated[bool, Query()] = False,
) -> dict[str, Any]:
    """The latest reading (``fresh=1``: ask the device now): battery level and temperature,
    charging, free/total storage, CPU load, memory use, ``serving`` and its ``reason``."""
    hub, health = _hub(request), _health(request)
    record = await resolve_device(hub, principal, device)
    await authorize(principal, record.ref, Action.VIEW, store=hub.store)
    reading = None if fresh else health.latest(record.ref)
    if reading is None:
        reading = await health.read(record.ref)
    return {"device": record.id, **reading.to_json()}


@router.get("/{device}/thresholds", response_model=ThresholdsIn)
async def get_thresholds(device: str, principal: UserPrincipal, request: Request) -> ThresholdsIn:
    hub, health = _hub(request), _health(request)
    record = await resolve_device(hub, principal, device)
    limits = await health.thresholds(record.ref)
    return ThresholdsIn(max_temperature_c=limits.max_temperature_c, min_battery=limits.min_battery)


@router.put("/{device}/thresholds", response_model=ThresholdsIn)
async def put_thresholds(
    device: str, body: ThresholdsIn, principal: UserPrincipal, request: Request
) -> ThresholdsIn:
    """The owner's (or an admin's) limits: above ``max_temperature_c`` or below
    ``min_battery`` percent the device stops serving (null: no limit)."""
    hub, health = _hub(request), _health(request)
    audit = _Audit(hub, principal, "device.thresholds")
    audit.detail.update(body.model_dump())
    audit.device = device[:255]
    try:
        record = await resolve_device(hub, principal, device)
        audit.device = record.id
        await authorize(principal, record.ref, Action.LEND, store=hub.store)
    except RpcError as exc:
        if exc.data and "rule" in exc.data:
            audit.detail["rule"] = str(exc.data["rule"])[:128]
        await audit._record(exc.code.value)
        raise
    await health.set_thresholds(record.ref, Thresholds(body.max_temperature_c, body.min_battery))
    await audit._record("ok")
    return body
