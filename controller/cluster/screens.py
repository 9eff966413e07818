"""Relayed live screens: a screen viewer whose WebSocket reached a replica other than the one
holding the device's bridge (``vopen``, ``vframe``, ``vend`` on pub/sub:
:mod:`controller.cluster.wire`; docs/cluster.md, "Live screens"; docs/screen.md).

The holder runs an ordinary local :class:`~controller.hub.screen.Viewer` of the device's feed —
shared with its own viewers, one bridge stream per device and codec, so the screen's own
back-pressure applies there (the newest picture; H.264 from the last key frame) — and
publishes each frame that viewer yields as a ``vframe``, numbered from 0, one at a time and
awaited: a slow Redis costs frames in the holder's viewer, never memory.

The requesting side reads a :class:`RemoteViewer`: the same bounded queue as a local viewer
(:class:`~controller.hub.screen.FrameQueue`), fed by the listener (which never blocks). Frames
are droppable, unlike a tunnel's bytes: a gap in the numbering (a message lost while a
subscription to Redis was re-established, or a malformed one) is harmless for pictures, and
makes an H.264 viewer wait for the next key frame (a skipped picture breaks the ones that
refer to it).

The latest picture of a device whose bridge another replica holds (``GET
…/screen/latest``, MCP ``live_frame``) is a ``vlatest`` to the holder, answered by a ``res``
with the newest picture of its live feed, or none: :meth:`ScreenRelays.latest_picture`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from redis.exceptions import RedisError

from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.cluster.core import ClusterCore, answering, device_in
from controller.cluster.tunnels import principal_from, principal_wire
from controller.cluster.wire import as_text, pack
from controller.hub.screen import FrameQueue, Viewer
from protocol.errors import ErrorCode, RpcError
from protocol.methods import timeout_for
from protocol.screen_methods import (
    MAX_FRAME_DATA,
    SCREEN_SUBSCRIBE,
    ScreenFrame,
    parse_screen_frame,
)

log = logging.getLogger("droidwire.controller.cluster")

__all__ = ["RemoteViewer", "ScreenRelays", "ServedScreen"]


class RemoteViewer(FrameQueue):
    """A viewer of a feed on ``replica`` (which holds the device's bridge), read here like a
    local :class:`~controller.hub.screen.Viewer`, so the WebSocket handler need not know."""

    def __init__(self, relays: ScreenRelays, replica: str, principal: Principal,
                 device: DeviceRef, codec: str) -> None:
        super().__init__()
        self.relays = relays
        self.replica = replica
        self.principal = principal
        self.device = device
        self.relay = uuid.uuid4().hex  # the relay's id on Redis
        self._codec = codec
        self._source = "screencap"
        self.closed = False
        self.ended: str | None = None
        self.lost = 0  # frames missing from the numbering
        self._seq = 0  # the next vframe's number
        self.watch: asyncio.Task[None] | None = None

    @property
    def codec(self) -> str:
        return self._codec

    @property
    def source(self) -> str:
        return self._source

    async def close(self) -> None:
        """The viewer left: forgotten here, and the holder told to stop (in the background:
        the handler never waits for Redis)."""
        if self.closed:
            return
        self.closed = True
        self.end("unsubscribed")
        self.relays._tell(self.replica, {"k": "vend", "id": self.relay,
                                         "from": self.relays.replica_id})

    def end(self, reason: str) -> None:
        """End here: the consumer gets an ``eof`` with ``reason`` after what is queued."""
        if self.ended is not None:
            return
        self.ended = reason
        self.offer(ScreenFrame(eof=True, reason=reason))
        if self.relays._screens.get(self.relay) is self:
            del self.relays._screens[self.relay]
        if self.watch is not None and self.watch is not asyncio.current_task():
            self.watch.cancel()

    def take(self, body: dict[str, Any]) -> None:
        """One ``vframe`` from the holder (from the listener: never blocks, never raises)."""
        if self.ended is not None:
            return
        seq = body.get("seq")
        if type(seq) is not int or seq < self._seq:
            log.warning("cluster: screen %s: dropped a frame numbered %r", self.relay[:12], seq)
            return
        if seq > self._seq:
            self._gap(seq - self._seq)
        self._seq = seq + 1
        try:
            frame = parse_screen_frame(body.get("f"), seq=seq)
        except RpcError:
            log.warning("cluster: screen %s: malformed frame %d", self.relay[:12], seq)
            self._gap(1)
            return
        if frame.eof:
            self.end(frame.reason or "eof")
            return
        self.offer(frame)

    def _gap(self, missing: int) -> None:
        """Frames that never came: harmless for pictures; an H.264 viewer waits for the next
        key frame (the pictures after the gap refer to the ones it lacks)."""
        self.lost += missing
        self.skipped += missing
        if self._codec == "h264":
            self._need_key = True


class ServedScreen:
    """A viewer this replica runs for another one (the holding side)."""

    def __init__(self) -> None:
        self.viewer: Viewer | None = None
        self.stopped = False


class ScreenRelays(ClusterCore):
    """Live screens relayed between replicas, both sides."""

    async def screen(self, replica: str, principal: Principal, device: DeviceRef,
                     codec: str) -> RemoteViewer:
        """A viewer of ``device``'s screen on ``replica`` (which holds its bridge), for
        ``principal`` (authorized here already; the holder checks again).

        Raises :class:`RpcError`: the holder's typed refusal, or ``unavailable`` when it is
        unreachable or dies before it answers. Once open, the viewer ends with an ``eof`` of
        its own when the holder dies (``replica_lost``) or shuts down (``replica_shutdown``,
        sent by it), the bridge moves (``bridge_moved``) or Redis stays unreachable for
        ``cluster_ttl_s`` (``redis_unavailable``), checked every heartbeat."""
        viewer = RemoteViewer(self, replica, principal, device, codec)
        message: dict[str, Any] = {"k": "vopen", "id": viewer.relay, "from": self.replica_id,
                                   "principal": principal_wire(principal), "codec": codec,
                                   "bridge": device.bridge_id, "serial": device.serial,
                                   "owner_id": device.owner_id, "name": device.bridge_name}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[viewer.relay] = future
        self._screens[viewer.relay] = viewer  # before the vopen: frames follow its answer
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {device} "
                        "is unreachable", {"reason": "replica_unreachable"})
        deadline = timeout_for(SCREEN_SUBSCRIBE.name, self.settings) + self.settings.cluster_ttl_s
        opened = False
        try:
            answer = await self._ask(replica, message, future, deadline, gone,
                                     f"live screen on replica {replica}")
            codec_used, source = answer.get("codec"), answer.get("source")
            if codec_used in ("jpeg", "png", "h264"):
                viewer._codec = codec_used
            if isinstance(source, str):
                viewer._source = source[:64]
            watch = viewer.watch = asyncio.get_running_loop().create_task(
                self._watch_screen(viewer), name=f"cluster-screen-{viewer.relay[:8]}")
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
            opened = True
            log.info("cluster: screen of %s relayed from replica %s (relay %s)", device,
                     replica, viewer.relay[:12])
            return viewer
        finally:
            self._waiting.pop(viewer.relay, None)
            if not opened:  # failed or cancelled: the holder may have started its viewer
                await viewer.close()

    async def latest_picture(self, replica: str, device: DeviceRef) -> ScreenFrame | None:
        """The newest picture of ``device``'s live screen on ``replica`` (which holds its
        bridge; the caller is authorized here already): what its
        :meth:`~controller.hub.screen.ScreenFeeds.latest_picture` answers there, a JPEG or PNG
        of at most :data:`~protocol.screen_methods.MAX_FRAME_DATA` bytes. None when nobody
        watches the screen there.

        Raises :class:`RpcError`: ``unavailable`` when the holder is unreachable or dies before
        it answers, ``timeout`` after ``rpc_timeout_s``, ``internal`` for a malformed answer."""
        request_id = uuid.uuid4().hex
        message = {"k": "vlatest", "id": request_id, "from": self.replica_id,
                   "bridge": device.bridge_id, "serial": device.serial}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {device} "
                        "is unreachable", {"reason": "replica_unreachable"})
        try:
            answer = await self._ask(replica, message, future, self.settings.rpc_timeout_s,
                                     gone, f"latest picture from replica {replica}")
        finally:
            self._waiting.pop(request_id, None)
        if answer.get("frame") is None:
            return None
        try:
            frame = parse_screen_frame(answer["frame"])  # bounded: MAX_FRAME_DATA
            if frame.eof or frame.codec not in ("jpeg", "png"):
                raise RpcError(ErrorCode.BAD_REQUEST, "not a picture")
        except RpcError as exc:
            log.warning("cluster: replica %s sent a malformed latest picture: %s", replica, exc)
            raise RpcError(ErrorCode.INTERNAL, "a replica sent a malformed picture") from None
        return frame

    @property
    def screens_relayed(self) -> int:
        """Screen viewers here whose frames come from another replica's bridge."""
        return len(self._screens)

    @property
    def screens_served(self) -> int:
        """Screen viewers this replica runs for other replicas."""
        return len(self._served_screens)

    async def _watch_screen(self, viewer: RemoteViewer) -> None:
        """Every heartbeat: is the holder alive, and does it still hold the bridge? (Pub/sub
        says nothing when a publisher dies.)"""
        unreachable: float | None = None
        loop = asyncio.get_running_loop()
        key = self._k("bridge", viewer.device.bridge_id)
        while viewer.ended is None:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            try:
                alive = await self.replica_alive(viewer.replica)
                holder = await self.redis.hget(key, "replica")
            except (RedisError, OSError) as exc:
                now = loop.time()
                unreachable = now if unreachable is None else unreachable
                if now - unreachable >= self.settings.cluster_ttl_s:
                    log.warning("cluster: screen %s ends: %s", viewer.relay[:12], exc)
                    viewer.end("redis_unavailable")
                continue
            unreachable = None
            reason = None
            if not alive:
                reason = "replica_lost"
            elif holder is not None and as_text(holder) != viewer.replica:
                reason = "bridge_moved"
            if reason is not None:
                log.info("cluster: screen %s from replica %s ends: %s", viewer.relay[:12],
                         viewer.replica, reason)
                viewer.end(reason)
                self._tell(viewer.replica, {"k": "vend", "id": viewer.relay,
                                            "from": self.replica_id})

    def _screen_frame(self, body: dict[str, Any]) -> None:
        """A ``vframe`` from a holder."""
        viewer = self._screens.get(str(body.get("id")))
        if viewer is None:
            # A viewer we no longer relay (its end was lost): say so again.
            sender = body.get("from")
            if isinstance(sender, str):
                self._tell(sender, {"k": "vend", "id": str(body.get("id")),
                                    "from": self.replica_id})
            return
        viewer.take(body)

    # -- the holding side

    async def _serve_screen(self, body: dict[str, Any], served: ServedScreen) -> None:
        """Watch a device's screen for another replica's viewer: authorize its caller again
        (a refusal is audited here), join the local feed, answer, then publish each frame the
        local viewer yields, in order, each once. Bounded: the next frame is taken only once
        the last ``PUBLISH`` returned, so a slow requester (or Redis) costs frames in the local
        viewer, as a slow local viewer does. Ends with the feed (its ``eof`` relayed), when the
        requester says ``vend``, when a ``PUBLISH`` reaches nobody, or when the requester's
        liveness key expires (checked every heartbeat while no frame comes)."""
        sender, relay_id = str(body["from"]), str(body["id"])
        channel = self.channel(sender)
        reply: dict[str, Any] = {"k": "res", "id": relay_id}
        viewer: Viewer | None = None
        with answering(reply, "live screen", sender):
            principal = principal_from(body.get("principal"))
            codec = body.get("codec")
            if codec not in ("jpeg", "png", "h264"):
                raise RpcError(ErrorCode.BAD_REQUEST, "malformed screen request")
            device = device_in(body, "screen")
            try:
                await authorize(principal, device, Action.USE, store=self.hub.store)
            except RpcError as exc:
                await self.hub.audit_device(principal, "device.screen.view", device, exc)
                raise
            viewer = served.viewer = await self.hub.screens.watch(device, str(codec))
            reply["r"] = {"codec": viewer.codec, "source": viewer.source}
        try:
            if served.stopped or not await self.redis.publish(channel, pack(reply)) \
                    or viewer is None:
                return
            log.info("cluster: relaying the screen of %s to replica %s (relay %s)",
                     viewer.feed.device, sender, relay_id[:12])
            seq = 0
            while True:
                try:
                    async with asyncio.timeout(self.settings.cluster_heartbeat_s):
                        frame = await viewer.get()
                except TimeoutError:
                    if served.stopped:
                        return
                    if not await self.replica_alive(sender):
                        log.info("cluster: screen %s: replica %s is gone", relay_id[:12],
                                 sender)
                        return
                    continue
                if served.stopped:
                    return
                reached = await self.redis.publish(channel, pack(
                    {"k": "vframe", "id": relay_id, "from": self.replica_id, "seq": seq,
                     "f": frame.to_wire()}))
                seq += 1
                if frame.eof:
                    return
                if not reached:
                    log.info("cluster: screen %s: nobody listens for replica %s any more",
                             relay_id[:12], sender)
                    return
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: screen %s for replica %s ends: %s", relay_id[:12], sender,
                        exc)
        finally:
            if viewer is not None:
                await viewer.close()
                log.info("cluster: stopped relaying the screen of %s to replica %s (relay %s)",
                         viewer.feed.device, sender, relay_id[:12])

    async def _serve_latest(self, body: dict[str, Any]) -> None:
        """Answer a ``vlatest``: the newest picture of the device's live feed here (never a
        new ``screencap``), or none. Only a live replica of this cluster (its liveness key
        under our prefix) gets an answer, on its own channel; anything else is ignored. The
        requester authorized its caller and audits the outcome, as for a forwarded call."""
        sender = str(body["from"])
        try:
            if not await self.replica_alive(sender):
                log.warning("cluster: ignored a latest-picture request from %r: not a live "
                            "replica", sender[:64])
                return
        except (RedisError, OSError) as exc:
            log.warning("cluster: latest picture for replica %s not served: %s", sender, exc)
            return
        reply: dict[str, Any] = {"k": "res", "id": body["id"]}
        with answering(reply, "latest picture", sender):
            device = device_in(body, "latest-picture")
            frame = await self.hub.screens.latest_picture(device, route=False)
            if frame is not None and len(frame.data) > MAX_FRAME_DATA:
                raise RpcError(ErrorCode.INTERNAL, "the live picture exceeds "
                               f"{MAX_FRAME_DATA} bytes (take a screenshot instead)")
            reply["r"] = {"frame": None if frame is None else frame.to_wire()}
        try:
            await self.redis.publish(self.channel(sender), pack(reply))
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: latest picture for replica %s not returned: %s", sender, exc)

    def _stop_screen(self, body: dict[str, Any]) -> None:
        """The requester's viewer left (``vend``)."""
        served = self._served_screens.get((str(body.get("from")), str(body.get("id"))))
        if served is None:
            return
        served.stopped = True
        if served.viewer is not None:
            served.viewer.offer(ScreenFrame(eof=True, reason="unsubscribed"))  # wakes the relay

    def _end_screens(self, reason: str) -> list[asyncio.Task[None]]:
        """Leaving: end the viewers relayed to us (``shutdown``), and those we serve (their
        consumers told ``reason``); the relays of the latter, which publish the ``eof``s,
        then finish."""
        for relayed in list(self._screens.values()):
            relayed.end("shutdown")  # its holder sees our channel go (PUBLISH → 0) and stops
        relays = []
        for key, served in list(self._served_screens.items()):
            if served.viewer is not None and (relay := self._serving.get(key)) is not None:
                served.viewer.offer(ScreenFrame(eof=True, reason=reason))
                relays.append(relay)
        return relays
