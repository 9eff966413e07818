"""Relayed logcat streams: a stream on a bridge another replica holds (``sub``, ``chunk``,
``unsub`` on pub/sub: :mod:`controller.cluster.wire`; docs/cluster.md, "Logcat streams").

The requesting side (:meth:`StreamRelays.stream`) reads a :class:`RemoteLogStream`, which
reads like a local one; the holding side (:meth:`StreamRelays._serve_stream`) subscribes
locally and publishes the chunks, bounded by its local stream's queue.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from controller.auth.authorization import DeviceRef
from controller.cluster.core import ClusterCore, answering, device_in
from controller.cluster.wire import as_text, pack
from controller.hub.streams import LogChunk, LogStream
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_SUBSCRIBE, LogBatch, parse_log_batch, timeout_for

log = logging.getLogger("droidwire.controller.cluster")


class RemoteLogStream(LogStream):
    """A logcat stream on a bridge another replica (``replica``) holds: that replica runs an
    ordinary local subscription and publishes each of its chunks here, numbered from 0
    (``chunk`` messages); this object reads like a local :class:`LogStream` (same bounded
    queue, same markers), so the API handler and the dashboard need not know.

    A chunk's number is its ``seq``: a gap (a message lost on the way, e.g. while our
    subscription to Redis was being re-established) becomes ``lost_batches``, never silent
    loss; the holder's own ``dropped`` and ``lost_batches`` are passed on."""

    def __init__(self, *, stream_id: str, replica: str, bridge_id: str, serial: str,
                 max_batches: int, params: dict[str, Any]) -> None:
        super().__init__(channel="", bridge_id=bridge_id, serial=serial,
                         max_batches=max_batches, params=params)
        self.stream_id = stream_id
        self.replica = replica
        self.watch: asyncio.Task[None] | None = None

    def take(self, body: dict[str, Any]) -> None:
        """One ``chunk`` message from the holder (never raises). A malformed one with a
        usable number counts as one lost batch; one without is dropped (the next number
        shows the gap)."""
        seq = body.get("seq")
        if type(seq) is not int or seq < 0:
            log.warning("cluster: stream %s: dropped a chunk without a sequence number",
                        self.stream_id)
            return
        lost = body.get("lost")
        try:
            batch = parse_log_batch(body.get("d"), seq=seq)
        except RpcError:
            log.warning("cluster: stream %s: malformed chunk %d", self.stream_id, seq)
            self.feed(LogBatch([], seq=seq), lost_batches=1)
            return
        self.feed(batch, lost_batches=lost if type(lost) is int else 0)


def chunk_body(stream_id: str, sender: str, seq: int, chunk: LogChunk) -> dict[str, Any]:
    d: dict[str, Any] = {"lines": chunk.lines, "dropped": chunk.dropped}
    if chunk.eof:
        d["eof"] = True
        d["reason"] = chunk.reason or "eof"
    return {"k": "chunk", "id": stream_id, "from": sender, "seq": seq, "d": d,
            "lost": chunk.lost_batches}


@dataclass(slots=True)
class Served:
    """A stream this replica runs for another one (the holding side)."""

    stream: LogStream | None = None
    stopped: bool = False


class StreamRelays(ClusterCore):
    """Logcat streams relayed between replicas, both sides."""

    async def stream(self, replica: str, device: DeviceRef,
                     params: dict[str, Any]) -> RemoteLogStream:
        """Ask ``replica`` (which holds the device's bridge) to subscribe to its logcat and
        relay the chunks here. The caller authorized the user already.

        Raises :class:`RpcError`: the subscription's own typed error, or ``unavailable`` when
        the replica is unreachable or dies before it answers. Once open, the stream ends with
        an ``eof`` of its own when the holder dies (``replica_lost``) or shuts down
        (``replica_shutdown``, sent by it), the bridge moves to
        another replica (``bridge_moved``) or Redis stays unreachable for ``cluster_ttl_s``
        (``redis_unavailable``), checked every heartbeat; :meth:`stop_stream` ends it here and
        tells the holder."""
        stream_id = uuid.uuid4().hex
        stream = RemoteLogStream(stream_id=stream_id, replica=replica, bridge_id=device.bridge_id,
                                 serial=device.serial,
                                 max_batches=self.settings.stream_queue_batches, params=params)
        message: dict[str, Any] = {"k": "sub", "id": stream_id, "from": self.replica_id,
                                   "p": params, "bridge": device.bridge_id,
                                   "serial": device.serial, "owner_id": device.owner_id,
                                   "name": device.bridge_name}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[stream_id] = future
        self._streams[stream_id] = stream  # before the sub: chunks follow its answer at once
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {device} "
                        "is unreachable", {"reason": "replica_unreachable"})
        deadline = (timeout_for(LOGCAT_SUBSCRIBE.name, self.settings)
                    + self.settings.cluster_ttl_s)
        opened = False
        try:
            answer = await self._ask(replica, message, future, deadline, gone,
                                     f"logcat subscription on replica {replica}")
            channel = answer.get("channel")
            stream.channel = channel if isinstance(channel, str) else ""
            watch = stream.watch = asyncio.get_running_loop().create_task(
                self._watch(stream), name=f"cluster-stream-{stream_id[:8]}")
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
            opened = True
            log.info("cluster: logcat of %s relayed from replica %s (stream %s)", device,
                     replica, stream_id)
            return stream
        finally:
            self._waiting.pop(stream_id, None)
            if not opened:  # failed or cancelled: the holder may have subscribed already
                self._streams.pop(stream_id, None)
                stream.end("unsubscribed")
                self._tell(replica, {"k": "unsub", "id": stream_id, "from": self.replica_id})

    @property
    def streams_relayed(self) -> int:
        """Logcat streams read here from bridges other replicas hold."""
        return len(self._streams)

    @property
    def streams_served(self) -> int:
        """Logcat streams this replica subscribes to for other replicas."""
        return len(self._served)

    def stop_stream(self, stream: LogStream) -> bool:
        """``hub.unsubscribe`` of a relayed stream: ended here, and the holder told to stop
        (in the background: the consumer's handler never waits for Redis). False for a
        local stream."""
        if not isinstance(stream, RemoteLogStream):
            return False
        stream.end("unsubscribed")
        if self._streams.pop(stream.stream_id, None) is not None:
            self._tell(stream.replica,
                       {"k": "unsub", "id": stream.stream_id, "from": self.replica_id})
        if stream.watch is not None:
            stream.watch.cancel()
        return True


    async def _watch(self, stream: RemoteLogStream) -> None:
        """Every heartbeat: is the holder alive, and does it still hold the bridge? Pub/sub
        says nothing when a publisher dies, so without this a consumer would wait forever."""
        unreachable: float | None = None
        loop = asyncio.get_running_loop()
        key = self._k("bridge", stream.bridge_id)
        reason: str | None = None
        while reason is None:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            if stream.ended or self._streams.get(stream.stream_id) is not stream:
                return
            try:
                alive = await self.replica_alive(stream.replica)
                holder = await self.redis.hget(key, "replica")
            except (RedisError, OSError) as exc:
                now = loop.time()
                unreachable = now if unreachable is None else unreachable
                if now - unreachable >= self.settings.cluster_ttl_s:
                    log.warning("cluster: stream %s ends: %s", stream.stream_id, exc)
                    reason = "redis_unavailable"
                continue
            unreachable = None
            if not alive:
                reason = "replica_lost"
            elif holder is not None and as_text(holder) != stream.replica:
                reason = "bridge_moved"  # the old holder ends it after its grace; we end now
        if self._streams.pop(stream.stream_id, None) is not None:
            log.info("cluster: logcat stream %s from replica %s ends: %s", stream.stream_id,
                     stream.replica, reason)
            stream.end(reason)
            self._tell(stream.replica,
                       {"k": "unsub", "id": stream.stream_id, "from": self.replica_id})

    def _chunk(self, body: dict[str, Any]) -> None:
        stream = self._streams.get(str(body.get("id")))
        if stream is None:
            # A stream we no longer read (its stop was lost, or we gave up on it): say so.
            sender = body.get("from")
            if isinstance(sender, str):
                self._tell(sender, {"k": "unsub", "id": str(body.get("id")),
                                    "from": self.replica_id})
            return
        stream.take(body)
        if stream.ended:
            self._streams.pop(stream.stream_id, None)
            if stream.watch is not None:
                stream.watch.cancel()

    # -- logcat streams: the holding side

    async def _serve_stream(self, body: dict[str, Any], served: Served) -> None:
        """Subscribe locally for another replica and publish the chunks to it, each once, in
        order. Bounded: the next chunk is taken only when the last ``PUBLISH`` returned, so a
        slow requester (or Redis) costs lines in our local stream's bounded queue, counted
        there as ``dropped``, never memory. Ends when the requester says ``unsub``, when a
        ``PUBLISH`` reaches nobody (the requester is gone), when its liveness key expires
        (checked every heartbeat while no line comes), or at the stream's ``eof``."""
        sender, stream_id = str(body["from"]), str(body["id"])
        channel = self.channel(sender)
        reply: dict[str, Any] = {"k": "res", "id": stream_id}
        stream: LogStream | None = None
        with answering(reply, "logcat stream", sender):
            params = body.get("p")
            if not isinstance(params, dict):
                raise RpcError(ErrorCode.BAD_REQUEST, "malformed stream request")
            device = device_in(body, "stream")
            stream = served.stream = await self.hub.subscribe_logcat(device, params,
                                                                     route=False)
            reply["r"] = {"channel": stream.channel}
        try:
            if served.stopped or not await self.redis.publish(channel, pack(reply)) \
                    or stream is None:
                return
            log.info("cluster: relaying logcat of %s to replica %s (stream %s)", stream.serial,
                     sender, stream_id)
            seq = 0
            while True:
                try:
                    async with asyncio.timeout(self.settings.cluster_heartbeat_s):
                        chunk = await stream.get()
                except TimeoutError:
                    if served.stopped:
                        return
                    if not await self.replica_alive(sender):
                        log.info("cluster: stream %s: replica %s is gone", stream_id, sender)
                        return
                    continue
                if served.stopped:
                    return
                reached = await self.redis.publish(
                    channel, pack(chunk_body(stream_id, self.replica_id, seq, chunk)))
                seq += 1
                if chunk.eof:
                    return
                if not reached:
                    log.info("cluster: stream %s: nobody listens for replica %s any more",
                             stream_id, sender)
                    return
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: stream %s for replica %s ends: %s", stream_id, sender, exc)
        finally:
            if stream is not None:
                await self.hub.unsubscribe(stream)

    def _stop_serving(self, body: dict[str, Any]) -> None:
        served = self._served.get((str(body.get("from")), str(body.get("id"))))
        if served is None:
            return
        served.stopped = True
        if served.stream is not None:
            served.stream.end("unsubscribed")  # wakes the relay, which unsubscribes
