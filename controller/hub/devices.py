"""Devices as users see them: the store's record of every device ever seen, overlaid with
the live inventories of connected bridges; and ``{device}`` references resolved to one.

``state`` is adb's (``device``, ``offline``, ``unauthorized``, …) while the device's bridge is
connected and reports it, else ``disconnected`` (docs/design.md §9). A device's ``id`` is
``BRIDGE~SERIAL``: unique and stable, accepted wherever ``{device}`` is. ``{device}`` may
also be the bare serial when only one device the caller can see has it; when several do,
the answer is ``conflict`` (HTTP 409) with the candidates' ids.

Visibility is decided by :func:`controller.auth.authorize` (``view``), the one check: a
device the caller may not see is never listed, never a candidate, and resolves to
``not_found``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.hub.hub import Hub
from controller.hub.inventory import serial_refusal
from controller.store import Bridge, Device
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "DISCONNECTED",
    "DeviceRecord",
    "device_id",
    "list_devices",
    "merge_labels",
    "resolve_device",
]

DISCONNECTED = "disconnected"
SEPARATOR = "~"
_INFO_KEYS = ("model", "release", "sdk", "abi", "battery", "profile", "labels", "pool")


def device_id(bridge: str, serial: str) -> str:
    return f"{bridge}{SEPARATOR}{serial}"


def merge_labels(
    info: Mapping[str, Any], admin: tuple[list[str], str | None] | None
) -> dict[str, Any]:
    """A device's info with the labels an admin set added to its owner's (from the bridge's
    inventory) and the admin's pool put over the owner's (docs/sandbox.md, "Placement")."""
    out = dict(info)
    own = out.get("labels")
    labels = {str(x) for x in own} if isinstance(own, list) else set()
    pool = out.get("pool") if isinstance(out.get("pool"), str) else None
    if admin is not None:
        labels.update(admin[0])
        pool = admin[1] or pool
    out["labels"] = sorted(labels)
    out["pool"] = pool
    return out


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    bridge_id: str
    bridge: str  # the bridge's name
    owner_id: str
    serial: str
    state: str
    info: dict[str, Any]
    uid: str | None = None  # the store's id of the device (opaque: the metrics' device label)

    @property
    def id(self) -> str:
        return device_id(self.bridge, self.serial)

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.bridge_id, self.serial, self.owner_id, self.bridge)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "serial": self.serial,
            "bridge": self.bridge,
            "state": self.state,
            "uid": self.uid,
        }
        for key in _INFO_KEYS:
            out[key] = self.info.get(key)
        if out["profile"] is None:
            out["profile"] = "standard"
        if out["labels"] is None:
            out["labels"] = []
        return out


async def _all_devices(hub: Hub) -> list[DeviceRecord]:
    async with hub.store.session() as session:
        rows = (await session.execute(select(Device, Bridge).join(Bridge))).all()
    records: dict[tuple[str, str], DeviceRecord] = {}
    admin: dict[tuple[str, str], tuple[list[str], str | None]] = {}
    uids = {(bridge.id, device.serial): device.id for device, bridge in rows}
    for device, bridge in rows:
        if serial_refusal(device.serial) is not None:
            continue  # recorded before serials were checked: never a device
        if device.labels or device.pool:
            admin[(bridge.id, device.serial)] = (list(device.labels or []), device.pool)
        records[(bridge.id, device.serial)] = DeviceRecord(
            bridge.id, bridge.name, bridge.owner_id, device.serial, DISCONNECTED,
            dict(device.last_info or {}),
        )
    # Live inventories win (and cover devices whose first store write is still under way):
    # those of bridges held by other replicas (cluster mode), then this replica's own.
    for record in await hub.hooks.remote_devices():
        records[(record.bridge_id, record.serial)] = record
    for entry in hub.entries():
        for serial, info in entry.live_devices().items():
            records[(entry.id, serial)] = DeviceRecord(
                entry.id, entry.name, entry.owner_id, serial, info.state,
                info.model_dump(mode="json"),
            )
        if not entry.is_open:
            # Away: what it last reported, even if the store has not caught up yet.
            for serial, info in entry.devices.items():
                records.setdefault((entry.id, serial), DeviceRecord(
                    entry.id, entry.name, entry.owner_id, serial, DISCONNECTED,
                    info.model_dump(mode="json"),
                ))
    for key, record in records.items():
        records[key] = replace(record, uid=uids.get(key),
                               info=merge_labels(record.info, admin.get(key)))
    return sorted(records.values(), key=lambda r: (r.bridge, r.serial))


async def _visible(principal: Principal, record: DeviceRecord, hub: Hub) -> bool:
    try:
        await authorize(principal, record.ref, Action.VIEW, store=hub.store)
    except RpcError:
        return False
    return True


async def list_devices(hub: Hub, principal: Principal) -> list[DeviceRecord]:
    """Every device ``principal`` may see, sorted by bridge and serial."""
    return [r for r in await _all_devices(hub) if await _visible(principal, r, hub)]


async def resolve_device(hub: Hub, principal: Principal, text: str) -> DeviceRecord:
    """``SERIAL`` or ``BRIDGE~SERIAL`` → the one visible device, or ``not_found``/``conflict``."""
    if not text or len(text) > 400:
        raise RpcError(ErrorCode.BAD_REQUEST, "a device is SERIAL or BRIDGE~SERIAL")
    bridge, sep, serial = text.partition(SEPARATOR)

    def matches(r: DeviceRecord) -> bool:
        return (r.bridge == bridge and r.serial == serial) if sep else r.serial == text

    candidates = [r for r in await list_devices(hub, principal) if matches(r)]
    if len(candidates) > 1 and not principal.is_admin:
        # A loan never makes a borrower's bare serial ambiguous, nor take it elsewhere: their
        # own device wins; a lent one is reached by its full id.
        own = [r for r in candidates if r.owner_id == principal.user_id]
        candidates = own or candidates
    if not candidates:
        raise RpcError(ErrorCode.NOT_FOUND, f"no device {text[:200]!r}")
    if len(candidates) > 1:
        ids = [r.id for r in candidates]
        raise RpcError(
            ErrorCode.CONFLICT,
            f"{len(ids)} devices have serial {text[:200]!r}: name one as BRIDGE~SERIAL",
            {"candidates": ids},
        )
    return candidates[0]
