"""``/v1/devices``: list devices, run shell commands, read and stream logcat (docs/design.md §9).

``{device}`` is ``BRIDGE~SERIAL`` (a device's ``id``) or its bare serial when unambiguous
(see :mod:`controller.hub.devices`). Every call on a device goes through
:meth:`controller.hub.Hub.device_call`: authorization, the RPC, an audit entry. Errors are
:class:`protocol.errors.RpcError`, turned into HTTP problems by the app; a policy refusal on
the bridge arrives as ``forbidden`` with its ``rule`` and becomes 403
``{"error": {"code": "forbidden", "message", "rule"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, WebSocket
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from starlette.websockets import WebSocketDisconnect

from controller.access import AccessWatch, until_lapsed
from controller.api.refusals import audited_refusal
from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.auth.http import UserPrincipal
from controller.hub import Hub, list_devices, resolve_device
from controller.hub.retire import forget_device
from controller.hub.streams import LogChunk
from controller.services import services_of
from controller.store import Device
from protocol.envelope import MAX_LABELS, Label
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_DUMP, SHELL

__all__ = ["DeviceOut", "ShellIn", "ShellOut", "router"]

log = logging.getLogger("droidwire.controller.api.devices")

router = APIRouter(prefix="/v1/devices", tags=["devices"])

MAX_DUMP_LINES = 5000
_PRIORITIES = "VDIWEF"
# threadtime / brief / time / process prefixes: the priority letter before the tag.
_LEVEL = re.compile(
    r"^(?:\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+ ([VDIWEFA]) |"
    r"\d\d-\d\d \d\d:\d\d:\d\d\.\d+ ([VDIWEFA])/|([VDIWEFA])/[^(]*\(\s*\d+\))"
)


def line_priority(line: str) -> str | None:
    """The priority letter of a logcat line (``A``, assert, reads as ``F``), or None."""
    m = _LEVEL.match(line)
    if m is None:
        return None
    level = m[1] or m[2] or m[3]
    return "F" if level == "A" else level


def filter_priority(chunk: LogChunk, priority: str) -> LogChunk:
    """``chunk`` with only the lines of ``priority`` or above."""
    floor = _PRIORITIES.index(priority)
    kept = [ln for ln in chunk.lines
            if (p := line_priority(ln)) is not None and _PRIORITIES.index(p) >= floor]
    return replace(chunk, lines=kept)


class DeviceOut(BaseModel):
    id: str = Field(description="BRIDGE~SERIAL: usable wherever {device} is")
    serial: str
    bridge: str
    state: str = Field(description="adb's state, or 'disconnected' while the bridge is away")
    model: str | None = None
    release: str | None = None
    sdk: int | None = None
    abi: str | None = None
    battery: int | None = None
    profile: str = "standard"
    labels: list[str] = Field(default_factory=list,
                              description="the owner's (bridge config) and an admin's labels")
    pool: str | None = Field(default=None, description="an admin's pool, else the owner's")
    uid: str | None = Field(default=None,
                            description="opaque store id: the device label of /metrics series")
    # The latest health reading (controller.health) with ``serving`` and ``reason``; None
    # until the device was read.
    health: dict[str, Any] | None = None


class LabelsIn(BaseModel):
    """The labels and pool an admin gives a device (added to, put over, its owner's)."""

    model_config = ConfigDict(extra="forbid")

    labels: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    pool: Label | None = None


class ShellIn(BaseModel):
    """Exactly one of ``argv`` (no shell parsing on the device) or ``command``."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(default=None, min_length=1, max_length=8192)
    argv: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    timeout_s: float | None = Field(default=None, gt=0, le=3600)


class ShellOut(BaseModel):
    exit_code: int
    stdout: str
    stderr: str


class LogcatOut(BaseModel):
    lines: list[str]


@router.get("", response_model=list[DeviceOut])
async def get_devices(principal: UserPrincipal, request: Request) -> list[dict[str, Any]]:
    """Every device the caller may see, from connected bridges and from the store."""
    services = services_of(request)
    out = []
    for r in await list_devices(services.hub, principal):
        item = r.to_json()
        reading = services.health.latest(r.ref)
        item["health"] = reading.to_json() if reading is not None else None
        out.append(item)
    return out


@router.put("/{device}/labels", response_model=DeviceOut)
async def put_labels(
    device: str, body: LabelsIn, principal: UserPrincipal, request: Request
) -> dict[str, Any]:
    """Set the labels and pool an admin gives a device (admins only): selectors ``label=``
    and ``pool=`` see them with those from the bridge owner's config."""
    services = services_of(request)
    hub = services.hub
    if not principal.is_admin:
        await services.audit.record(principal, "device.labels", device=device[:200],
                                    outcome="refused", detail={"code": "forbidden"})
        raise RpcError(ErrorCode.FORBIDDEN, "only an admin sets device labels")
    record = await resolve_device(hub, principal, device)
    labels = sorted(set(body.labels))
    async with services.store.session() as session, session.begin():
        row = (await session.execute(
            select(Device).where(Device.bridge_id == record.bridge_id,
                                 Device.serial == record.serial)
        )).scalar_one_or_none()
        if row is None:  # listed live before its first store write
            row = Device(bridge_id=record.bridge_id, serial=record.serial, last_info={})
            session.add(row)
        row.labels = labels or None
        row.pool = body.pool
    await services.audit.record(principal, "device.labels", device=record.id,
                                detail={"labels": labels, "pool": body.pool})
    return (await resolve_device(hub, principal, record.id)).to_json()


@router.delete("/{device}", status_code=204)
async def delete_device(device: str, principal: UserPrincipal, request: Request) -> Response:
    """Forget a device that is gone for good (its bridge's owner or an admin; 409 while it
    is attached): its record, and the grants on it."""
    services = services_of(request)
    named = device[:200] if device.isprintable() else ascii(device[:200])
    async with audited_refusal(services.audit, principal, "device.forget", device=named):
        forgotten = await forget_device(services.hub, principal, device)
    await services.audit.record(principal, "device.forget", device=forgotten)
    return Response(status_code=204)


@router.post("/{device}/shell", response_model=ShellOut)
async def shell(device: str, body: ShellIn, principal: UserPrincipal, request: Request) -> ShellOut:
    """Run a command under the device's profile (allow-list); 403 with the rule if refused."""
    hub = services_of(request).hub
    record = await resolve_device(hub, principal, device)
    out = await hub.device_call(
        principal,
        record.ref,
        SHELL,
        body.model_dump(exclude_none=True),
        timeout_s=_rpc_timeout(hub, body.timeout_s),
    )
    return ShellOut(exit_code=out.exit_code, stdout=out.stdout, stderr=out.stderr)


@router.get("/{device}/logcat", response_model=LogcatOut)
async def logcat(
    device: str,
    principal: UserPrincipal,
    request: Request,
    lines: Annotated[int | None, Query(ge=1, le=MAX_DUMP_LINES)] = None,
) -> LogcatOut:
    """The device's log (``logcat -d``), the last ``lines`` lines if given."""
    hub = services_of(request).hub
    record = await resolve_device(hub, principal, device)
    params: dict[str, Any] = {} if lines is None else {"lines": lines}
    out = await hub.device_call(principal, record.ref, LOGCAT_DUMP, params)
    return LogcatOut(lines=out.lines)


@router.websocket("/{device}/logcat/stream")
async def logcat_stream(
    websocket: WebSocket,
    device: str,
    principal: UserPrincipal,
    tail: Annotated[int | None, Query(ge=0, le=MAX_DUMP_LINES)] = None,
    priority: Annotated[Literal["V", "D", "I", "W", "E", "F"] | None, Query()] = None,
) -> None:
    """Live logcat as JSON text messages ``{"lines": [...], "dropped": N, "lost_batches"?}``;
    ``priority`` (``W``, ``E``, ``F`` …) keeps only lines of that priority or above (a line
    whose priority cannot be read is dropped then; ``dropped`` still counts lines lost in
    transit only);
    the last one has ``"eof": true`` and a ``reason``. ``dropped`` lines (and
    ``lost_batches``) were lost just before the lines of that message: a consumer too slow,
    or the link down for a while. Authenticated by the ``Authorization`` header of the
    handshake; refusals are HTTP statuses before the socket opens.

    Authorization is checked again every ``stream_reauth_s`` while the stream runs: when the
    caller's loan of the device ends (expired or revoked), the stream stops at once with a
    last ``{"eof": true, "reason": "forbidden: …"}`` message and close code 1008.

    In cluster mode any replica serves it: one that does not hold the device's bridge relays
    the stream from the one that does (docs/cluster.md, "Logcat streams")."""
    hub = services_of(websocket).hub
    record = await resolve_device(hub, principal, device)
    params: dict[str, Any] = {} if tail is None else {"tail": tail}
    stream = await hub.device_stream(principal, record.ref, params)
    try:
        await websocket.accept()
        # The client sends nothing; its close (or vanishing) ends the stream.
        closed = asyncio.create_task(_until_closed(websocket))
        revoked = asyncio.create_task(
            _until_unauthorized(services_of(websocket).access, hub, principal, record.ref)
        )
        try:
            while True:
                getter = asyncio.ensure_future(stream.get())
                done, _ = await asyncio.wait(
                    {getter, closed, revoked}, return_when=asyncio.FIRST_COMPLETED
                )
                if closed in done:
                    getter.cancel()
                    return
                if revoked in done:
                    getter.cancel()
                    reason = revoked.result()
                    last = LogChunk(lines=[], eof=True, reason=reason)
                    await websocket.send_text(json.dumps(last.to_json()))
                    await websocket.close(1008, reason[:120])
                    return
                chunk = getter.result()
                if priority is not None:
                    chunk = filter_priority(chunk, priority)
                    if not (chunk.lines or chunk.dropped or chunk.eof or chunk.lost_batches):
                        continue
                await websocket.send_text(json.dumps(chunk.to_json()))
                if chunk.eof:
                    await websocket.close(1000, (chunk.reason or "eof")[:120])
                    return
        finally:
            for task in (closed, revoked):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the client went away mid-send
    finally:
        await hub.unsubscribe(stream)


@router.websocket("/{device}/screen/stream")
async def screen_stream(
    websocket: WebSocket,
    device: str,
    principal: UserPrincipal,
    codec: Annotated[str, Query(pattern="^(jpeg|png|h264)$")] = "jpeg",
) -> None:
    """The device's live screen, and remote control over the same socket (docs/screen.md):
    binary frames (a 4-byte header length, a JSON header, the picture or H.264 access unit),
    text ``{"type": "hello"|"input"|"eof", …}``; the client sends input messages. One bridge
    stream per device and codec, shared by every viewer."""
    from controller.api.screen import serve_screen

    await serve_screen(websocket, services_of(websocket).hub, principal, device, codec)


@router.websocket("/{device}/tunnel")
async def tunnel(websocket: WebSocket, device: str, principal: UserPrincipal) -> None:
    """Remote adb (docs/tunnel.md): the adb streams of ``droidwire device tunnel`` relayed to
    the device's bridge, each checked by its policy. Binary msgpack frames, ``hello`` first."""
    from controller.api.tunnel import serve_tunnel

    await serve_tunnel(websocket, services_of(websocket).hub, principal, device)


@router.get("/{device}/screen/latest", responses={200: {"content": {"image/jpeg": {}}}})
async def screen_latest(device: str, principal: UserPrincipal, request: Request) -> Response:
    """The newest frame of the device's live screen as a picture, without a new ``screencap``
    (409 ``conflict`` when nobody watches the screen: take a screenshot); in cluster mode the
    feed of whichever replica holds the device's bridge (docs/screen.md)."""
    hub = services_of(request).hub
    record = await resolve_device(hub, principal, device)
    action = "device.screen.latest"
    try:
        await authorize(principal, record.ref, Action.USE, store=hub.store)
        frame = await hub.screens.latest_picture(record.ref)
        if frame is None:
            raise RpcError(ErrorCode.CONFLICT, "no live picture of this device: nobody watches "
                           "its screen (take a screenshot instead)", {"reason": "no_live_screen"})
    except RpcError as exc:
        await hub.audit_device(principal, action, record.ref, exc)
        raise
    await hub.audit_device(principal, action, record.ref, None)
    return Response(frame.data, media_type=f"image/{frame.codec}",
                    headers={"X-Frame-Number": str(frame.n), "X-Frame-Time": f"{frame.ts:.0f}",
                             "Cache-Control": "no-store"})


async def _until_unauthorized(
    access: AccessWatch, hub: Hub, principal: Principal, device: DeviceRef
) -> str:
    """The refusal that ends ``principal``'s stream of ``device`` (:func:`until_lapsed`)."""
    return await until_lapsed(access, hub.store,
                              hub.settings.stream_reauth_s, principal, device)


async def _until_closed(websocket: WebSocket) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return


def _rpc_timeout(hub: Hub, command_timeout_s: float | None) -> float | None:
    """A shell command's own timeout plus the usual RPC allowance on top of it."""
    if command_timeout_s is None:
        return None
    return command_timeout_s + hub.settings.rpc_timeout_s
