"""Cluster mode: several controller replicas sharing Redis (routing) and PostgreSQL (state).

docs/design.md §7, docs/cluster.md. One :class:`Cluster` per replica, attached to its hub as
its cluster hooks (:class:`controller.hub.hooks.ClusterHooks`). This module is its lifecycle,
heartbeat, cluster-wide notices (revocations, forgotten bridges) and the listener that
dispatches other replicas' messages to its parts: the key layout and messages
(:mod:`~controller.cluster.wire`), the ownership scripts (:mod:`~controller.cluster.scripts`),
bridge ownership (:mod:`~controller.cluster.ownership`), held results
(:mod:`~controller.cluster.waits`), forwarded calls (:mod:`~controller.cluster.forwarding`),
relayed logcat streams (:mod:`~controller.cluster.streams`), relayed tunnels
(:mod:`~controller.cluster.tunnels`), relayed live screens (:mod:`~controller.cluster.screens`)
and device turns
(:mod:`~controller.cluster.turns`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from redis.exceptions import RedisError

from controller.cluster.forwarding import Forwarding
from controller.cluster.ownership import Ownership
from controller.cluster.screens import ScreenRelays, ServedScreen
from controller.cluster.streams import Served, StreamRelays
from controller.cluster.tunnels import TunnelRelays
from controller.cluster.turns import DeviceTurns
from controller.cluster.waits import HeldResults
from controller.cluster.wire import as_text, pack, unpack, wire_error
from protocol.closecodes import CloseCode
from protocol.errors import ErrorCode, RpcError

__all__ = ["Cluster"]

log = logging.getLogger("droidwire.controller.cluster")


class Cluster(Ownership, HeldResults, Forwarding, StreamRelays, TunnelRelays, ScreenRelays,
              DeviceTurns):
    """One replica's membership: heartbeat, bridge ownership, forwarding. An async context."""

    # -- lifecycle

    async def __aenter__(self) -> Cluster:
        await self.redis.ping()  # fail the start-up loudly when Redis is unreachable
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(self.channel(self.replica_id))
        await self._beat()
        loop = asyncio.get_running_loop()
        self._listener = loop.create_task(self._listen(), name="cluster-listen")
        self._heartbeat = loop.create_task(self._heartbeat_loop(), name="cluster-heartbeat")
        log.info("cluster: replica %s joined (prefix %s)", self.replica_id, self.prefix)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Leave: end the streams we relay (their readers get ``eof`` ``replica_shutdown``),
        stop the loops, fail what waits on other replicas, drop our keys."""
        if self._closed:
            return
        self._closed = True
        relays = []
        for key, served in self._served.items():
            if served.stream is not None and (relay := self._serving.get(key)) is not None:
                served.stream.end("replica_shutdown")
                relays.append(relay)
        relays += self._end_tunnels("replica_shutdown")
        relays += self._end_screens("replica_shutdown")
        if relays:  # each relay publishes its eof, then ends; bounded, as the whole shutdown
            await asyncio.wait(relays, timeout=self.settings.cluster_heartbeat_s)
        tasks = [t for t in (self._listener, self._heartbeat, *self._tasks,
                             *self._serving.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        error = RpcError(ErrorCode.UNAVAILABLE, "the controller is shutting down",
                         {"reason": "shutdown"})
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        for stream in self._streams.values():
            stream.end("shutdown")  # its holder sees our channel go (PUBLISH → 0) and stops
        self._streams.clear()
        with contextlib.suppress(RedisError, OSError):
            for bridge_id, (_conn, claim) in list(self._claims.items()):
                await self._release(keys=[self._k("bridge", bridge_id), self._k("bridges")],
                                    args=[claim, bridge_id])
            await self.redis.delete(self._k("replica", self.replica_id))
            await self.redis.srem(self._k("replicas"), self.replica_id)
        self._claims.clear()
        with contextlib.suppress(RedisError, OSError, RuntimeError):
            await self._pubsub.aclose()
        with contextlib.suppress(RedisError, OSError, RuntimeError):
            await self.redis.aclose()
        log.info("cluster: replica %s left", self.replica_id)

    # -- heartbeat



    async def reports_cluster(self) -> bool:
        """Whether this replica is the one that reports the cluster-wide metrics (runs in the
        store, devices no replica holds): the live replica with the smallest id. False when
        Redis cannot tell: a missing series is noticed, a doubled one is not."""
        if self._closed:
            return False
        try:
            members = sorted(as_text(m) for m in await self.redis.smembers(self._k("replicas")))
            for replica in members:
                if replica == self.replica_id:
                    return True
                if await self.replica_alive(replica):
                    return False
            return True  # not a member yet (before the first heartbeat): alone so far
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the replicas (metrics): %s", exc)
            return False

    async def _beat(self) -> None:
        await self.redis.set(self._k("replica", self.replica_id),
                             json.dumps({"pid": os.getpid()}), px=self._ttl_ms)
        await self.redis.sadd(self._k("replicas"), self.replica_id)
        for bridge_id in set(self._awaits.values()):
            await self.redis.pexpire(self._k("awaits", bridge_id), self._await_ttl_ms)
        for bridge_id, (conn, claim) in list(self._claims.items()):
            if bridge_id in self._claiming:
                continue  # a claim is on its way: renewing now could race it (claimed())
            entry = self.hub.entry(bridge_id)
            if entry is None or entry.conn is not conn:
                self._claims.pop(bridge_id, None)
                continue
            renewed = await self._renew(keys=[self._k("bridge", bridge_id)],
                                        args=[claim, self._ttl_ms])
            if renewed == 0:
                log.info("cluster: bridge %s is held elsewhere now: closing ours (4409)",
                         entry.name)
                self._claims.pop(bridge_id, None)
                conn_obj = entry.conn
                if conn_obj is not None:
                    conn_obj.kick(CloseCode.REPLACED, "replaced by a newer session of this bridge")
            elif renewed == -1:  # expired (we stalled past the TTL) but still ours: claim again
                await self.claimed(entry)
                await self.inventory(entry)

    async def _heartbeat_loop(self) -> None:
        # ``not self._closed``, not ``True``: redis-py may turn a cancellation in the middle
        # of a command into a connection error, which must not keep a leaving replica beating.
        while not self._closed:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            try:
                await self._beat()
                lost = await self._reap()
            except (RedisError, OSError) as exc:
                log.warning("cluster: heartbeat failed: %s", exc)
                continue
            if lost and self._on_replica_lost is not None:
                try:
                    await self._on_replica_lost(lost)
                except Exception:  # a failing clean-up must not stop the heartbeat
                    log.exception("cluster: clean-up after lost replicas %s failed", lost)

    async def _reap(self) -> list[str]:
        """Replicas whose liveness key expired, each reported by exactly one survivor (the
        one whose ``SREM`` removed it)."""
        members = [as_text(m) for m in await self.redis.smembers(self._k("replicas"))]
        lost = []
        for replica in members:
            if replica == self.replica_id or await self.replica_alive(replica):
                continue
            if await self.redis.srem(self._k("replicas"), replica):
                log.warning("cluster: replica %s is gone (no heartbeat for %gs)", replica,
                            self.settings.cluster_ttl_s)
                lost.append(replica)
        return lost


    # -- revocation

    async def revoked(self, token: Any) -> None:
        """A token was revoked (or rotated) on this replica: every other live replica closes
        the bridge sessions it holds with that token (4401), as this replica's hub does.
        Best effort — a replica that misses it refuses the bridge's next handshake anyway."""
        if self._closed:
            return
        body = pack({"k": "revoked", "token": str(token.id), "from": self.replica_id})
        try:
            members = [as_text(m) for m in await self.redis.smembers(self._k("replicas"))]
            for replica in members:
                if replica != self.replica_id:
                    await self.redis.publish(self.channel(replica), body)
        except (RedisError, OSError) as exc:
            log.warning("cluster: could not tell the other replicas of a revocation: %s", exc)

    async def forgotten(self, bridge_id: str, serial: str | None) -> None:
        """A bridge (``serial`` None) or one of its devices was forgotten here: every other
        live replica drops what its hub remembers of it. Best effort, like ``revoked``."""
        await self._tell_all({"k": "forget", "bridge": bridge_id, "serial": serial,
                              "from": self.replica_id}, "a forget")

    async def grant_revoked(self, user_id: str) -> None:
        """A grant to ``user_id`` was revoked on this replica: every other live replica
        re-checks that user's runs and streams (their next periodic check would, later)."""
        await self._tell_all({"k": "revoked", "user": user_id, "from": self.replica_id},
                             "a revocation")

    async def _tell_all(self, message: dict[str, Any], what: str) -> None:
        if self._closed:
            return
        body = pack(message)
        try:
            members = [as_text(m) for m in await self.redis.smembers(self._k("replicas"))]
            for replica in members:
                if replica != self.replica_id:
                    await self.redis.publish(self.channel(replica), body)
        except (RedisError, OSError) as exc:
            log.warning("cluster: could not tell the other replicas of %s: %s", what, exc)


    # -- the listening side

    async def _listen(self) -> None:
        while not self._closed:  # see _heartbeat_loop
            try:
                message = await self._pubsub.get_message(timeout=None)
            except (RedisError, OSError) as exc:
                log.warning("cluster: subscription failed (%s); resubscribing", exc)
                await asyncio.sleep(self.settings.cluster_heartbeat_s)
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.subscribe(self.channel(self.replica_id))
                continue
            if message is None or message.get("type") != "message":
                continue
            body = unpack(message.get("data"))
            if body is None:
                log.warning("cluster: dropped a malformed message")
                continue
            self._dispatch(body)

    def _start_serving(
        self,
        body: dict[str, Any],
        serve: Callable[[tuple[str, str]], Coroutine[Any, Any, None]],
        served: dict[tuple[str, str], Any] | None = None,
    ) -> None:
        """Serve another replica's request ``body`` (a call, a stream, a tunnel, a screen) in
        a task of its own, known by (sender, id) while it runs — a ``cancel`` or the shutdown
        finds it there — and dropped from ``served`` too when it ends. A body without a
        sender or an id is ignored."""
        sender, relay_id = body.get("from"), body.get("id")
        if not isinstance(sender, str) or not isinstance(relay_id, str):
            return
        key = (sender, relay_id)
        task = asyncio.get_running_loop().create_task(serve(key))
        self._serving[key] = task

        def done(_t: asyncio.Task[None]) -> None:
            self._serving.pop(key, None)
            if served is not None:
                served.pop(key, None)

        task.add_done_callback(done)

    def _dispatch(self, body: dict[str, Any]) -> None:
        kind = body.get("k")
        if kind == "res":
            future = self._waiting.get(str(body.get("id")))
            if future is None and isinstance(body.get("bridge"), str):
                self._relayed(body)  # a held result for a call of ours whose bridge moved
                return
            if future is None or future.done():
                return
            if body.get("e") is not None:
                future.set_exception(wire_error(body["e"]))
            else:
                result = body.get("r")
                future.set_result(result if isinstance(result, dict) else {})
        elif kind == "req":
            self._start_serving(body, lambda _key: self._serve(body))
        elif kind == "cancel":
            serving = self._serving.get((str(body.get("from")), str(body.get("id"))))
            if serving is not None:
                serving.cancel()
        elif kind == "chunk":
            self._chunk(body)
        elif kind == "sub":

            def stream(key: tuple[str, str]) -> Coroutine[Any, Any, None]:
                served = self._served[key] = Served()
                return self._serve_stream(body, served)

            self._start_serving(body, stream, self._served)
        elif kind == "unsub":
            self._stop_serving(body)
        elif kind in ("tout", "tfin"):
            self._tunnel_frame(body)
        elif kind == "tin":
            self._tunnel_in(body)
        elif kind == "tend":
            self._tunnel_end(body)
        elif kind == "topen":
            self._start_serving(body, lambda _key: self._serve_tunnel(body))
        elif kind == "vframe":
            self._screen_frame(body)
        elif kind == "vend":
            self._stop_screen(body)
        elif kind == "vopen":

            def screen(key: tuple[str, str]) -> Coroutine[Any, Any, None]:
                served = self._served_screens[key] = ServedScreen()
                return self._serve_screen(body, served)

            self._start_serving(body, screen, self._served_screens)
        elif kind == "vlatest":
            self._start_serving(body, lambda _key: self._serve_latest(body))
        elif kind == "replace":
            self._replaced(str(body.get("bridge")), str(body.get("by")))
        elif kind == "revoked":
            token_id, user_id = body.get("token"), body.get("user")
            if isinstance(token_id, str):
                self.hub.kick_token(token_id)
                if self.access is not None:
                    self.access.token_changed(token_id)
            if isinstance(user_id, str) and self.access is not None:
                self.access.user_changed(user_id)
        elif kind == "forget":
            bridge_id, serial = body.get("bridge"), body.get("serial")
            if isinstance(bridge_id, str) and (serial is None or isinstance(serial, str)):
                self.hub.forget(bridge_id, serial)

