"""Apps and files on a device as a service: what the REST routes (:mod:`controller.api.manage`)
and the MCP app tools (:mod:`controller.mcp.manage_tools`) both call, with the caller's
principal and the app's state (hub, loans, config) — no HTTP request in between
(docs/security.md, "Apps and files").

Transfers are streamed: the controller holds at most one chunk (:data:`CHUNK`) of one, and
forwards it to a stage on the bridge (:mod:`protocol.manage_methods`). They are bounded by
``ControllerConfig.max_transfer_bytes`` (:func:`transfer_limit`).

A **borrower** (neither admin nor owner) acts only inside their loan: apps they installed
during it (the package the device reported, noted in ``loan_items``), and files in their
loan's working folder (a relative ``path`` is taken inside it). Anything else is refused
``forbidden`` with rule ``loan_scope`` — and audited, like every call here. What they leave is
removed when the loan ends (:mod:`controller.loans`). The owner's bridge policy applies on
top, to everyone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import posixpath
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.hub import Hub, resolve_device
from controller.loans import APP, FOLDER, Loans, is_borrower, loan_folder
from controller.services.container import services_of
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

__all__ = [
    "CHUNK",
    "DEFAULT_MAX_TRANSFER_BYTES",
    "AppAction",
    "AppOut",
    "AppsOut",
    "Audit",
    "Installed",
    "Pulled",
    "Pushed",
    "act_on_app",
    "content_size",
    "get_app",
    "install",
    "list_apps",
    "pull_file",
    "push_file",
    "too_large",
    "transfer_limit",
    "uninstall_app",
]

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


@dataclass
class Pulled:
    """A file being pulled: its path on the device, its size, and its bytes (streamed from the
    bridge's stage as they are read; the stage is closed when the stream ends)."""

    path: str
    size: int
    body: AsyncIterator[bytes]


# -- the app's state ------------------------------------------------------------------------


def transfer_limit(state: Any) -> int:
    """The most bytes one upload or download may carry."""
    config = getattr(state, "config", None)
    return int(getattr(config, "max_transfer_bytes", DEFAULT_MAX_TRANSFER_BYTES))


# -- checks and audit -----------------------------------------------------------------------


class Audit:
    """Authorize, then audit how the act ended (refusals too), with ``detail``."""

    def __init__(self, hub: Hub, principal: Principal, action: str) -> None:
        self.hub, self.principal, self.action = hub, principal, action
        self.detail: dict[str, Any] = {}
        self.device: str | None = None

    @contextlib.asynccontextmanager
    async def on(self, text: str) -> AsyncIterator[DeviceRef]:
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
            await self.record(exc.code.value)
            raise
        await self.record("ok")

    async def record(self, outcome: str) -> None:
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


def too_large(limit: int) -> RpcError:
    """The error of a transfer above ``limit`` bytes (``reason``: ``too_large``)."""
    return RpcError(
        ErrorCode.BAD_REQUEST,
        f"at most {limit} bytes per transfer",
        {"reason": "too_large", "limit": limit},
    )


def content_size(content_length: str | None, limit: int) -> int:
    """The size an upload declares (its ``Content-Length``), at most ``limit``."""
    if content_length is None or not content_length.isdigit():
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            "send the body with a Content-Length (the bridge reserves the size up front)",
            {"reason": "length_required"},
        )
    size = int(content_length)
    if size > limit:
        raise too_large(limit)
    return size


# -- staging --------------------------------------------------------------------------------


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


# -- apps -----------------------------------------------------------------------------------


async def list_apps(state: Any, principal: Principal, device: str) -> AppsOut:
    """Third-party apps. A borrower sees only the apps they installed (the lender's own apps
    are the lender's business)."""
    services = services_of(state)
    hub, loans = services.hub, services.loans
    audit = Audit(hub, principal, "apps.list")
    async with audit.on(device) as ref:
        result = await hub.call(ref, APPS_LIST, DeviceParams(serial=ref.serial))
        borrower = is_borrower(principal, ref)
        mine = await loans.items(principal.user_id, ref) if borrower else set()
    apps = [
        AppOut(package=a.package, managed=a.managed, yours=a.package in mine)
        for a in result.apps
        if not borrower or a.package in mine
    ]
    return AppsOut(apps=apps)


async def get_app(state: Any, principal: Principal, device: str, package: str) -> AppOut:
    """One app of :func:`list_apps`; ``not_found`` if it is not listed."""
    apps = await list_apps(state, principal, device)
    for app in apps.apps:
        if app.package == package:
            return app
    raise RpcError(ErrorCode.NOT_FOUND, f"no app {package[:255]!r} listed on this device")


async def install(
    state: Any, principal: Principal, device: str, body: AsyncIterator[bytes], size: int
) -> Installed:
    """Install ``size`` bytes of APK from ``body`` on ``device``. A borrower's install never
    replaces an app already on the device, and is removed when their loan ends."""
    services = services_of(state)
    hub, loans = services.hub, services.loans
    audit = Audit(hub, principal, "apps.install")
    audit.detail["size"] = size
    async with audit.on(device) as ref:
        limit = transfer_limit(state)
        if size > limit:
            raise too_large(limit)
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


async def act_on_app(
    state: Any, principal: Principal, device: str, package: str, body: AppAction
) -> None:
    """Launch (its launcher activity), stop (force-stop) or clear (its data) an app."""
    services = services_of(state)
    hub, loans = services.hub, services.loans
    audit = Audit(hub, principal, f"apps.{body.action}")
    audit.detail["package"] = package[:255]
    async with audit.on(device) as ref:
        await _own_app(loans, principal, ref, package)
        method = _APP_ACTIONS[body.action]
        await hub.call(ref, method, method.parse_params({"serial": ref.serial, "package": package}))


async def uninstall_app(state: Any, principal: Principal, device: str, package: str) -> None:
    services = services_of(state)
    hub, loans = services.hub, services.loans
    audit = Audit(hub, principal, "apps.uninstall")
    audit.detail["package"] = package[:255]
    async with audit.on(device) as ref:
        await _own_app(loans, principal, ref, package)
        await hub.call(ref, APPS_UNINSTALL,
                       APPS_UNINSTALL.parse_params({"serial": ref.serial, "package": package}))
        if is_borrower(principal, ref):
            await loans.forget(principal.user_id, ref, APP, package)


# -- files ----------------------------------------------------------------------------------


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


async def push_file(
    state: Any,
    principal: Principal,
    device: str,
    path: str,
    body: AsyncIterator[bytes],
    content_length: str | None,
) -> Pushed:
    """Write ``body`` (``content_length`` bytes, checked against the transfer limit) to
    ``path`` on the device, streamed through the bridge."""
    services = services_of(state)
    hub, loans = services.hub, services.loans
    limit = transfer_limit(state)
    audit = Audit(hub, principal, "files.push")
    audit.detail["path"] = path[:1024]
    async with audit.on(device) as ref:
        target = _device_path(principal, ref, path)
        audit.detail["path"] = target
        size = content_size(content_length, limit)
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
            await _fill(hub, principal, ref, stage, body, size)
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
    return Pushed(path=target, size=size)


async def pull_file(state: Any, principal: Principal, device: str, path: str) -> Pulled:
    """The file at ``path``: checked, audited and staged on the bridge now; its bytes are read
    from the stage as :attr:`Pulled.body` is iterated (rights re-checked at every chunk). A
    file above the transfer limit is refused by the bridge (``reason``: ``too_large``)."""
    hub = services_of(state).hub
    limit = transfer_limit(state)
    audit = Audit(hub, principal, "files.pull")
    audit.detail["path"] = path[:1024]
    async with audit.on(device) as ref:
        target = _device_path(principal, ref, path)
        audit.detail["path"] = target
        pulled = await hub.call(ref, FILES_PULL, FILES_PULL.parse_params(
            {"serial": ref.serial, "path": target, "max_bytes": limit}))
        stage, size = pulled.stage, pulled.size
        audit.detail["size"] = size

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

    return Pulled(path=target, size=size, body=body())
