"""``/v1/bridges``: the bridges the caller owns (all of them for an admin), with their state.

``PATCH /v1/bridges/{bridge}`` (admins only; the bridge by id or name) with
``{"shared": true|false}`` marks a build bridge shared: it may then compile for every
user's runs. Any other build bridge compiles only for its owner's runs and for runs on its
owner's devices (docs/security.md, "Threat model"); the executor reads the flag at each run.

``DELETE /v1/bridges/{bridge}`` (its owner or an admin) forgets a bridge that is gone for
good, with its devices, their grants and its tokens (409 while it is connected or
reconnecting).

``state``: ``connected``, ``reconnecting`` (dropped less than the grace period ago: calls
wait for it), or ``disconnected``. In cluster mode (docs/cluster.md) a bridge connected to
another replica is listed ``connected`` with that ``replica`` and its live device count (its
software and toolchain are known only to that replica).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from sqlalchemy import or_, select

from controller.api.refusals import audited_refusal
from controller.auth.http import Admin, UserPrincipal
from controller.hub import BridgeState, Hub
from controller.hub.retire import forget_bridge
from controller.services import services_of
from controller.store import Bridge, User
from protocol.errors import ErrorCode, RpcError

__all__ = ["BridgeOut", "BridgePatch", "router"]

router = APIRouter(prefix="/v1/bridges", tags=["bridges"])


class BridgeOut(BaseModel):
    id: str
    name: str
    owner: str
    state: str
    shared: bool = False
    software: str | None = None
    toolchain: str | None = None
    build: bool = False
    devices: int = 0
    pending: int = 0
    connections: int = 0
    last_seen_at: datetime | None = None
    replica: str | None = None  # cluster mode: the replica holding its connection, if another


@router.get("", response_model=list[BridgeOut])
async def get_bridges(principal: UserPrincipal, request: Request) -> list[dict[str, Any]]:
    hub: Hub = services_of(request).hub
    query = select(Bridge, User.name).join(User, Bridge.owner_id == User.id)
    if not principal.is_admin:
        query = query.where(Bridge.owner_id == principal.user_id)
    async with hub.store.session() as session:
        rows = (await session.execute(query.order_by(Bridge.name))).all()
    elsewhere = await hub.hooks.remote_bridges()
    out: list[dict[str, Any]] = []
    for bridge, owner in rows:
        entry = hub.entry(bridge.id)
        remote = elsewhere.get(bridge.id)
        if remote is not None and (entry is None or entry.conn is None):
            toolchain = remote.caps.get("toolchain")
            out.append({
                "id": bridge.id,
                "name": bridge.name,
                "owner": owner,
                "state": BridgeState.CONNECTED.value,
                "devices": remote.devices,
                "last_seen_at": bridge.last_seen_at,
                "replica": remote.replica,
                "shared": bridge.shared,
                # As its hello announced them (published with its inventory).
                "toolchain": toolchain if isinstance(toolchain, str) else None,
                "build": remote.caps.get("build") is True,
            })
            continue
        item: dict[str, Any] = {
            "id": bridge.id,
            "name": bridge.name,
            "owner": owner,
            "state": BridgeState.DISCONNECTED.value,
            "last_seen_at": bridge.last_seen_at,
            "shared": bridge.shared,
        }
        if entry is not None:
            item.update(
                state=entry.state.value,
                software=entry.software,
                toolchain=entry.caps.toolchain if entry.caps else None,
                build=bool(entry.caps and entry.caps.build),
                devices=len(entry.live_devices()),
                pending=entry.session.pending_count,
                connections=entry.connections,
                last_seen_at=entry.last_seen_at or bridge.last_seen_at,
            )
        out.append(item)
    return out


@router.delete("/{bridge}", status_code=204)
async def delete_bridge(bridge: str, principal: UserPrincipal, request: Request) -> Response:
    """Forget a bridge that is gone for good, with its devices, their grants and its tokens
    (its owner or an admin; 409 while it is connected or reconnecting)."""
    services = services_of(request)
    named = bridge[:64] if bridge.isprintable() else ascii(bridge[:64])
    async with audited_refusal(services.audit, principal, "bridge.forget", bridge=named):
        forgotten = await forget_bridge(services.hub, principal, bridge)
    await services.audit.record(principal, "bridge.forget", detail={"bridge": forgotten})
    return Response(status_code=204)


class BridgePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shared: StrictBool = Field(description="may build for every user's runs")


@router.patch("/{bridge}", response_model=BridgeOut)
async def patch_bridge(
    bridge: str, body: BridgePatch, principal: Admin, request: Request
) -> dict[str, Any]:
    """Mark a build bridge shared, or not (admins only): the bridge's id or name."""
    services = services_of(request)
    hub = services.hub
    if not bridge or len(bridge) > 64 or not bridge.isprintable():
        raise RpcError(ErrorCode.NOT_FOUND, "no such bridge")
    async with audited_refusal(services.audit, principal, "bridge.share", bridge=bridge):
        async with hub.store.session() as session, session.begin():
            row = (await session.execute(
                select(Bridge).where(or_(Bridge.id == bridge, Bridge.name == bridge))
            )).scalar_one_or_none()
            if row is None:
                raise RpcError(ErrorCode.NOT_FOUND, f"no bridge {bridge!r}")
            row.shared = body.shared
            bridge_id = row.id
    await services.audit.record(
        principal, "bridge.share", detail={"bridge_id": bridge_id, "shared": body.shared}
    )
    return next(b for b in await get_bridges(principal, request) if b["id"] == bridge_id)
