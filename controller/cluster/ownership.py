"""Bridge ownership: which replica holds each bridge's one session, and what the others see
of it (``P:bridge:BID``, ``P:bridges``: :mod:`controller.cluster.wire`).

The hub tells the cluster when a bridge's connection is accepted here (:meth:`claimed`), when
its inventory changes (:meth:`inventory`) and when the connection ends (:meth:`released`);
the other replicas read the registry to route calls (:meth:`owner_elsewhere`) and to list the
bridges and devices held elsewhere (:meth:`remote_bridges`, :meth:`remote_devices`). A newer
session of a bridge elsewhere closes ours with 4409 (:meth:`_replaced`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from controller.cluster.core import ClusterCore
from controller.cluster.wire import as_text, json_map, pack
from controller.hub.devices import DeviceRecord
from controller.hub.entry import BridgeEntry
from controller.hub.hooks import RemoteBridge
from protocol.closecodes import CloseCode

log = logging.getLogger("droidwire.controller.cluster")


@dataclass(slots=True)
class Claiming:
    """A bridge's claims in flight on this replica: one at a time, counted."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Ownership(ClusterCore):
    """Claims, renewals (by the heartbeat) and releases of bridge sessions; the registry."""

    async def claimed(self, entry: BridgeEntry) -> None:
        """A connection of ``entry`` was accepted here: it holds the bridge's one session."""
        if self._closed or entry.conn is None:
            return
        # One claim of a bridge in flight at a time, and no heartbeat renewal meanwhile: two
        # claim scripts (or a claim and the heartbeat's re-claim of a "missing" hash) may reach
        # Redis in either order over the pool's connections, and the hash would then name a
        # claim we no longer hold — the next heartbeat would close our own bridge with 4409.
        held = self._claiming.setdefault(entry.id, Claiming())
        held.users += 1
        try:
            async with held.lock:
                if entry.conn is None:
                    return
                claim = f"{self.replica_id}/{uuid.uuid4().hex}"
                self._claims[entry.id] = (entry.conn, claim)
                old = await self._claim(
                    keys=[self._k("bridge", entry.id), self._k("bridges")],
                    args=[claim, self._ttl_ms, self.replica_id, entry.name, entry.owner_id,
                          entry.id],
                )
        finally:
            held.users -= 1
            if not held.users:
                del self._claiming[entry.id]
        if isinstance(old, bytes):
            old_replica = old.decode(errors="replace").partition("/")[0]
            if old_replica and old_replica != self.replica_id:
                log.info("cluster: bridge %s moved here from replica %s", entry.name,
                         old_replica)
                await self.redis.publish(self.channel(old_replica),
                                         pack({"k": "replace", "bridge": entry.id,
                                                "by": self.replica_id}))

    async def inventory(self, entry: BridgeEntry) -> None:
        """The bridge's device inventory changed: publish it for the other replicas."""
        held = self._claims.get(entry.id)
        if self._closed or held is None:
            return
        devices = {s: d.model_dump(mode="json") for s, d in entry.devices.items()}
        caps = entry.caps.model_dump(mode="json") if entry.caps is not None else {}
        await self._inventory(keys=[self._k("bridge", entry.id)],
                              args=[held[1], json.dumps(devices), json.dumps(caps)])

    async def released(self, entry: BridgeEntry) -> None:
        """The bridge's connection here ended (it may be reconnecting elsewhere): the calls it
        leaves in flight are shared in ``P:awaits:BID`` (for ``AWAIT_TTLS`` TTLs), so that
        a replica it reconnects to relays their results here."""
        held = self._claims.pop(entry.id, None)
        if self._closed or held is None:
            return
        sent = {rid: f"{self.replica_id} {p.sent_session}" for rid in entry.session.pending_ids()
                if rid not in self._awaits and (p := entry.session.pending(rid)) is not None
                and p.sent_session is not None}
        if sent:
            key = self._awaits_key(entry.id)
            async with self.redis.pipeline(transaction=True) as pipe:
                for request_id, value in sent.items():
                    pipe.hset(key, request_id, value)
                pipe.pexpire(key, self._await_ttl_ms)
                await pipe.execute()
        await self._release(keys=[self._k("bridge", entry.id), self._k("bridges")],
                            args=[held[1], entry.id])

    async def owner_elsewhere(self, bridge_id: str) -> str | None:
        """The live replica holding ``bridge_id``'s session, when it is not this one."""
        if self._closed:
            return None
        try:
            replica = await self.redis.hget(self._k("bridge", bridge_id), "replica")
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry (routing locally): %s", exc)
            return None
        if not isinstance(replica, bytes):
            return None
        text = replica.decode(errors="replace")
        return None if text == self.replica_id else text

    async def remote_devices(self) -> list[DeviceRecord]:
        """Live devices of bridges held by other replicas (the cluster-wide overlay); none
        while Redis is unreachable (the store's list, all ``disconnected``, still answers)."""
        if self._closed:
            return []
        try:
            return await self._remote_devices()
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry: %s", exc)
            return []

    async def _remote_devices(self) -> list[DeviceRecord]:
        records: list[DeviceRecord] = []
        for bridge_id, fields, devices in await self._held_elsewhere():
            for serial, info in devices.items():
                if not isinstance(info, dict):
                    continue
                records.append(DeviceRecord(
                    bridge_id, fields.get("name", bridge_id), fields.get("owner_id", ""),
                    str(serial), str(info.get("state", "unknown")), info,
                ))
        return records

    async def remote_bridges(self) -> dict[str, RemoteBridge]:
        """Bridges whose one session another live replica holds, by bridge id (for
        ``GET /v1/bridges``); none while Redis is unreachable."""
        if self._closed:
            return {}
        try:
            held = await self._held_elsewhere()
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry: %s", exc)
            return {}
        return {
            bridge_id: RemoteBridge(fields.get("replica", ""), len(devices),
                                    fields.get("name", bridge_id), fields.get("owner_id", ""),
                                    json_map(fields.get("caps")))
            for bridge_id, fields, devices in held
        }

    async def _held_elsewhere(self) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
        """(bridge id, its registry fields, its live inventory) for each bridge held by
        another replica; ids whose hash expired are pruned from ``P:bridges``."""
        ids = sorted(as_text(b) for b in await self.redis.smembers(self._k("bridges")))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for bridge_id in ids:
                pipe.hgetall(self._k("bridge", bridge_id))
            rows = await pipe.execute()
        held: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        missing = []
        for bridge_id, row in zip(ids, rows, strict=True):
            if not row:
                missing.append(bridge_id)
                continue
            fields = {k.decode(): v.decode(errors="replace") for k, v in row.items()}
            if fields.get("replica") == self.replica_id:
                continue  # ours: the hub's own live view covers it
            held.append((bridge_id, fields, json_map(fields.get("devices"))))
        if missing:
            await self.redis.srem(self._k("bridges"), *missing)
        return held

    def _replaced(self, bridge_id: str, by: str) -> None:
        held = self._claims.pop(bridge_id, None)
        entry = self.hub.entry(bridge_id)
        if entry is None or entry.conn is None or (held is not None and held[0] is not entry.conn):
            return
        log.info("cluster: bridge %s: a newer session on replica %s replaces ours (4409)",
                 entry.name, by)
        entry.conn.kick(CloseCode.REPLACED, "replaced by a newer session of this bridge")
