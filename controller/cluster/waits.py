"""Held results: who waits for a request, whichever replica its bridge reaches
(``P:awaits:BID``: :mod:`controller.cluster.wire`; docs/cluster.md).

A call a run may be resumed from is shared before it goes out (:meth:`awaiting`), so that a
survivor can take it over if this replica dies (:meth:`adopt`), and a replica the bridge
reconnects to lists it in its ``welcome`` (:meth:`foreign`) and relays its result to the
waiter (:meth:`relay`, received by :meth:`_relayed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from redis.exceptions import RedisError

from controller.auth.authorization import DeviceRef
from controller.cluster.core import ClusterCore
from controller.cluster.wire import as_text, pack, wire_error
from controller.hub.entry import BridgeEntry
from protocol.envelope import Hello, Res
from protocol.errors import ErrorCode, RpcError
from protocol.methods import timeout_for
from protocol.session import Completion

log = logging.getLogger("droidwire.controller.cluster")


class HeldResults(ClusterCore):
    """The shared waits for results a bridge holds across reconnects and replicas."""

    async def awaiting(self, bridge_id: str, request_id: str, session: str | None) -> None:
        """This replica waits for ``request_id``, sent on the bridge's ``session``: a replica
        the bridge reconnects to lists it in its ``welcome`` and relays the result here, and a
        survivor adopting our run after our death takes the wait over."""
        if self._closed:
            return
        self._awaits[request_id] = bridge_id
        key = self._awaits_key(bridge_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, request_id, f"{self.replica_id} {session or '-'}")
            pipe.pexpire(key, self._await_ttl_ms)
            await pipe.execute()

    async def settled(self, bridge_id: str, request_id: str) -> None:
        """The wait for ``request_id`` ended (result, error, or given up)."""
        self._awaits.pop(request_id, None)
        if not self._closed:
            await self.redis.hdel(self._awaits_key(bridge_id), request_id)

    def adopt(
        self,
        device: DeviceRef,
        request_id: str,
        method: str,
        params: dict[str, Any],
        *,
        sent_session: str,
        timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Wait for the result of a request a dead replica sent (``Hub.adopt`` in cluster
        mode): whichever replica the bridge reaches relays it here. Fails ``unavailable`` when
        the bridge came back without it (``bridge_restarted``/``result_lost``), or was held by
        no replica for ``grace_period_s`` (``bridge_disconnected``)."""
        del params  # never sent again: the bridge's outbox is the only source of the result
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._awaits[request_id] = device.bridge_id
        return asyncio.get_running_loop().create_task(
            self._adopted(device, request_id, method, sent_session, timeout_s, future))

    async def _adopted(
        self, device: DeviceRef, request_id: str, method: str, sent_session: str,
        timeout_s: float | None, future: asyncio.Future[dict[str, Any]],
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        bridge_id = device.bridge_id
        try:
            lost = await self._adopt(keys=[self._awaits_key(bridge_id)],
                                     args=[request_id, f"{self.replica_id} {sent_session}",
                                           self._await_ttl_ms])
            if isinstance(lost, bytes):
                reason = lost.decode(errors="replace").partition(" ")[2] or "result_lost"
                raise RpcError(ErrorCode.UNAVAILABLE, f"the bridge of {device} came back "
                               "without the request's result", {"reason": reason})
            log.info("cluster: adopted request %s %s on %s", request_id, method, device)
            away: float | None = None
            async with asyncio.timeout(timeout_for(method, self.settings, timeout_s)):
                while True:
                    done, _ = await asyncio.wait({future},
                                                 timeout=self.settings.cluster_heartbeat_s)
                    if done:
                        return future.result()
                    local = self.hub.entry(bridge_id)
                    held = (local is not None and local.conn is not None) or bool(
                        await self.redis.exists(self._k("bridge", bridge_id)))
                    if held:
                        away = None
                    elif away is None:
                        away = loop.time()
                    elif loop.time() - away >= self.settings.grace_period_s:
                        raise RpcError(ErrorCode.UNAVAILABLE, f"the bridge of {device} did not "
                                       "come back", {"reason": "bridge_disconnected"})
        except TimeoutError:
            raise RpcError(ErrorCode.TIMEOUT, f"{method} on {device} timed out",
                           {"request": request_id}) from None
        except (RedisError, OSError) as exc:
            raise RpcError(ErrorCode.UNAVAILABLE, f"cluster routing failed: {exc}",
                           {"reason": "redis_unavailable"}) from exc
        finally:
            self._waiting.pop(request_id, None)
            with contextlib.suppress(RedisError, OSError):
                await self.settled(bridge_id, request_id)

    async def foreign(self, entry: BridgeEntry, hello: Hello) -> set[str]:
        """The ids other replicas (or our adopted runs) wait for on this bridge, which its
        ``hello`` says it holds: the ``welcome`` lists them so the bridge keeps and re-sends
        their results. One it does not hold is marked lost, and its waiter told."""
        if self._closed:
            return set()
        try:
            rows = await self.redis.hgetall(self._awaits_key(entry.id))
            held = set(hello.held)
            listed: set[str] = set()
            for raw_id, raw in rows.items():
                request_id, value = as_text(raw_id), as_text(raw)
                replica, _, session = value.partition(" ")
                if replica == "lost" or (replica == self.replica_id
                                         and entry.session.pending(request_id) is not None):
                    continue  # gone, or our own call: the session decides for those
                if request_id in held:
                    listed.add(request_id)
                    continue
                reason = "result_lost" if session == hello.session else "bridge_restarted"
                waiter = await self._lose(keys=[self._awaits_key(entry.id)],
                                          args=[request_id, f"lost {reason}"])
                if isinstance(waiter, bytes):
                    error = RpcError(ErrorCode.UNAVAILABLE, "the bridge no longer holds the "
                                     "request's result", {"reason": reason})
                    await self._send_res(as_text(waiter).partition(" ")[0], {
                        "k": "res", "id": request_id, "bridge": entry.id, "e": error.to_wire()})
            return listed
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the waits on bridge %s: %s", entry.name, exc)
            return set()

    async def relay(self, entry: BridgeEntry, res: Res) -> bool:
        """Pass a held result to the replica waiting for it. True once it reached it (a
        subscriber got the message, or it is us): the caller acks it to the bridge. While the
        waiter is dead and not yet replaced by an adopter, tried again every heartbeat;
        False (not acked: the bridge keeps it) when nobody waits any more."""
        conn = entry.conn
        body: dict[str, Any] = {"k": "res", "id": res.id, "bridge": entry.id}
        if res.error is not None:
            body["e"] = res.error.to_error().to_wire()
        else:
            body["r"] = res.result
        loop = asyncio.get_running_loop()
        unreached: float | None = None
        while not self._closed and entry.conn is conn:
            try:
                value = await self.redis.hget(self._awaits_key(entry.id), res.id)
                replica = as_text(value).partition(" ")[0] if value is not None else "lost"
                if replica == "lost":
                    return False
                if await self._send_res(replica, body):
                    log.info("cluster: bridge %s: result %s relayed to replica %s", entry.name,
                             res.id, replica)
                    return True
            except (RedisError, OSError, TypeError, ValueError) as exc:
                log.warning("cluster: result %s not relayed: %s", res.id, exc)
            now = loop.time()
            if unreached is None:
                unreached = now
            elif now - unreached >= self._await_ttl_ms / 1000:
                return False
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
        return False

    async def _send_res(self, replica: str, body: dict[str, Any]) -> bool:
        if replica == self.replica_id:
            self._dispatch(body)
            return True
        return bool(await self.redis.publish(self.channel(replica), pack(body)))

    def _relayed(self, body: dict[str, Any]) -> None:
        request_id = str(body.get("id"))
        if body.get("e") is not None:
            completion = Completion(request_id, "", error=wire_error(body["e"]))
        else:
            result = body.get("r")
            completion = Completion(request_id, "", result if isinstance(result, dict) else {})
        self.hub.deliver(str(body["bridge"]), completion)
