"""``/v1/bridges``: the bridges the caller owns (all of them for an admin), with their state.

``state``: ``connected``, ``reconnecting`` (dropped less than the grace period ago: calls
wait for it), or ``disconnected``. In cluster mode (docs/cluster.md) a bridge connected to
another replica is listed ``connected`` with that ``replica`` and its live device count (its
software and toolchain are known only to that replica).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from sqlalchemy import select

from controller.api.refusals import audited_refusal
from controller.auth import UserPrincipal
from controller.hub import BridgeState, Hub
from controller.hub.retire import forget_bridge
from controller.store import Bridge, User

__all__ = ["BridgeOut", "router"]

router = APIRouter(prefix="/v1/bridges", tags=["bridges"])


class BridgeOut(BaseModel):
    id: str
    name: str
    owner: str
    state: str
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
    hub: Hub = request.app.state.hub
    query = select(Bridge, User.name).join(User, Bridge.owner_id == User.id)
    if not principal.is_admin:
        query = query.where(Bridge.owner_id == principal.user_id)
    async with hub.store.session() as session:
        rows = (await session.execute(query.order_by(Bridge.name))).all()
    remote_bridges = getattr(hub.cluster, "remote_bridges", None)
    elsewhere = await remote_bridges() if remote_bridges is not None else {}
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
    state = request.app.state
    named = bridge[:64] if bridge.isprintable() else ascii(bridge[:64])
    async with audited_refusal(state.audit, principal, "bridge.forget", bridge=named):
        forgotten = await forget_bridge(state.hub, principal, bridge)
    await state.audit.record(principal, "bridge.forget", detail={"bridge": forgotten})
    return Response(status_code=204)
