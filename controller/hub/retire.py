"""Retiring what is gone for good (``droidwire device forget``, docs/security.md): a device
that will not come back, or a bridge and every device it had.

A device can be forgotten while it is not attached (``disconnected``: its bridge is away, or
the bridge no longer lists it); a bridge while no replica holds its session and it is not in
its grace period. Forgetting deletes the store's rows — the device (or the bridge's devices),
the grants on them, and for a bridge its tokens (it can no longer connect) — and what every
replica's hub remembers of them. Runs keep their records (a run names its device by text).
Only the bridge's owner or an admin may forget.
"""

from __future__ import annotations

from sqlalchemy import delete, or_, select, update

from controller.auth.authorization import Principal
from controller.hub.devices import DISCONNECTED, resolve_device
from controller.hub.hub import BridgeState, Hub
from controller.store import Bridge, Device, Grant, Run, Token
from protocol.errors import ErrorCode, RpcError

__all__ = ["forget_bridge", "forget_device"]


def _may_retire(principal: Principal, owner_id: str) -> None:
    if not (principal.is_admin or principal.user_id == owner_id):
        raise RpcError(ErrorCode.FORBIDDEN, "only the bridge's owner or an admin may forget it",
                       {"rule": "owner_only"})


async def forget_device(hub: Hub, principal: Principal, text: str) -> str:
    """Forget one device (``SERIAL`` or ``BRIDGE~SERIAL``); its id. ``conflict`` while it is
    attached: it would only come back."""
    record = await resolve_device(hub, principal, text)
    _may_retire(principal, record.owner_id)
    if record.state != DISCONNECTED:
        raise RpcError(ErrorCode.CONFLICT,
                       f"{record.id} is attached ({record.state}): unplug it, or hide it in "
                       "its bridge's config, before forgetting it")
    async with hub.store.session() as session, session.begin():
        ids = (await session.execute(select(Device.id).where(
            Device.bridge_id == record.bridge_id, Device.serial == record.serial))).scalars().all()
        if ids:
            await session.execute(delete(Grant).where(Grant.device_id.in_(ids)))
            await session.execute(update(Run).where(Run.device_id.in_(ids)).values(device_id=None))
            await session.execute(delete(Device).where(Device.id.in_(ids)))
    hub.forget(record.bridge_id, record.serial)
    await hub.hooks.forgotten(record.bridge_id, record.serial)  # and the other replicas
    return record.id


async def forget_bridge(hub: Hub, principal: Principal, text: str) -> str:
    """Forget a bridge (its name or id) with its devices and tokens; its name. ``not_found``
    for a bridge the caller may not forget and does not own; ``conflict`` while it is
    connected (to any replica) or inside its grace period."""
    if not text or len(text) > 64:
        raise RpcError(ErrorCode.BAD_REQUEST, "a bridge is its name or id (1-64 chars)")
    async with hub.store.session() as session:
        bridge = (await session.execute(
            select(Bridge).where(or_(Bridge.name == text, Bridge.id == text))
        )).scalars().first()
    if bridge is None or not (principal.is_admin or principal.user_id == bridge.owner_id):
        raise RpcError(ErrorCode.NOT_FOUND, "no such bridge")
    entry = hub.entry(bridge.id)
    held_elsewhere = bridge.id in await hub.hooks.remote_bridges()
    if held_elsewhere or (entry is not None and entry.state is not BridgeState.DISCONNECTED):
        raise RpcError(ErrorCode.CONFLICT,
                       f"bridge {bridge.name} is connected or reconnecting: revoke its token "
                       "(droidwire token revoke) and stop it before forgetting it")
    async with hub.store.session() as session, session.begin():
        ids = (await session.execute(
            select(Device.id).where(Device.bridge_id == bridge.id))).scalars().all()
        if ids:
            await session.execute(delete(Grant).where(Grant.device_id.in_(ids)))
            await session.execute(update(Run).where(Run.device_id.in_(ids)).values(device_id=None))
            await session.execute(delete(Device).where(Device.id.in_(ids)))
        await session.execute(delete(Token).where(Token.bridge_id == bridge.id))
        await session.execute(delete(Bridge).where(Bridge.id == bridge.id))
    hub.forget(bridge.id)
    await hub.hooks.forgotten(bridge.id, None)  # and the other replicas
    return str(bridge.name)

