"""What the hub writes as bridges come and go: last seen times, and the devices they report.

Devices are upserted by ``(bridge, serial)`` with the inventory's latest facts (model,
release, SDK, …) so lending, history and the dashboard can name a device whose bridge is away.
Only one live session exists per bridge, so two writers for one bridge do not race; a lost
race with a replica's stale session still ends in a consistent row (the unique constraint).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from controller.store.models import Bridge, Device, utcnow
from controller.store.store import Store

__all__ = ["bridge_seen", "devices_seen", "known_devices"]


async def bridge_seen(store: Store, bridge_id: str, *, at: datetime | None = None) -> None:
    async with store.session() as session, session.begin():
        await session.execute(
            update(Bridge).where(Bridge.id == bridge_id).values(last_seen_at=at or utcnow())
        )


async def devices_seen(
    store: Store,
    bridge_id: str,
    inventory: Mapping[str, Mapping[str, Any]],
    *,
    at: datetime | None = None,
) -> dict[str, str]:
    """Record ``{serial: info}`` as seen now; returns ``{serial: device id}``."""
    now = at or utcnow()
    ids: dict[str, str] = {}
    async with store.session() as session, session.begin():
        existing = {
            d.serial: d
            for d in (
                await session.execute(
                    select(Device).where(
                        Device.bridge_id == bridge_id, Device.serial.in_(list(inventory))
                    )
                )
            ).scalars()
        }
        for serial, info in inventory.items():
            device = existing.get(serial)
            if device is None:
                device = Device(bridge_id=bridge_id, serial=serial, first_seen_at=now)
                session.add(device)
            device.last_info = dict(info)
            device.last_seen_at = now
            await session.flush()
            ids[serial] = device.id
    return ids


async def known_devices(store: Store, bridge_id: str) -> list[Device]:
    """Every device this bridge ever reported, oldest first."""
    async with store.session() as session:
        query = select(Device).where(Device.bridge_id == bridge_id).order_by(Device.first_seen_at)
        return list((await session.execute(query)).scalars())
