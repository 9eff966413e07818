"""Live screens on the controller: one bridge stream per device and codec, fanned out.

:class:`ScreenFeeds` (``hub.screens``) hands out :class:`Viewer` objects. The first viewer of a
device (for a codec) subscribes on its bridge (``device.screen.subscribe``); every later viewer
shares that :class:`ScreenFeed`; when the last viewer leaves, the feed unsubscribes at once.

Nothing here queues stale frames (docs/screen.md):

* pictures (``jpeg``/``png``): a viewer holds only the newest frame it has not shown yet; a
  slower viewer simply shows fewer frames;
* ``h264``: a frame refers to the ones before it back to the last key frame, so the feed keeps
  the current group of pictures (key frame onwards, bounded) for a viewer that joins, and a
  viewer that falls more than :data:`MAX_BEHIND` frames behind drops what it holds and waits
  for the next key frame.

Feeding never blocks the hub's reader (``on_event`` is synchronous). A feed ends with the
bridge's connection (``bridge_disconnected``), an ``eof`` from the bridge, or the controller's
shutdown; its viewers then get an ``eof`` frame with the reason.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from controller.hub.channels import (
    attach,
    channel_in,
    close_later,
    detach,
    next_event,
    require_local,
)
from protocol.envelope import Evt
from protocol.errors import ErrorCode, RpcError
from protocol.screen_methods import (
    SCREEN_SUBSCRIBE,
    SCREEN_UNSUBSCRIBE,
    ScreenFrame,
    ScreenUnsubscribeParams,
    parse_screen_frame,
)

if TYPE_CHECKING:
    from controller.auth.authorization import DeviceRef
    from controller.hub.hub import Hub

__all__ = ["MAX_BEHIND", "FrameQueue", "ScreenFeed", "ScreenFeeds", "ScreenView", "Viewer"]

log = logging.getLogger("droidwire.controller.screen")

#: An H.264 viewer this many frames behind skips to the next key frame.
MAX_BEHIND = 30
#: The most frames of one group of pictures kept for viewers that join.
MAX_GOP = 300


class FrameQueue:
    """What a viewer holds for its consumer, bounded by the screen's rules (docs/screen.md):
    :meth:`offer` a frame (never blocks), :meth:`get` the next one to show. A local
    :class:`Viewer` and a relayed one (:class:`controller.cluster.screens.RemoteViewer`) both
    are one."""

    def __init__(self) -> None:
        self._pending: collections.deque[ScreenFrame] = collections.deque()
        self._wake = asyncio.Event()
        self.shown = 0
        self.skipped = 0
        self._need_key = True  # an H.264 viewer starts (and restarts) at a key frame

    def offer(self, frame: ScreenFrame) -> None:
        if self._pending and self._pending[-1].eof:
            return  # ended: nothing after the eof, and the first reason stays
        if frame.eof:
            self._pending.append(frame)
        elif frame.codec == "h264":
            if len(self._pending) >= MAX_BEHIND:
                self.skipped += len(self._pending)
                self._pending.clear()
                self._need_key = True
            if self._need_key and not frame.key:
                self.skipped += 1  # undecodable without the frames it refers to
                return
            self._need_key = False
            self._pending.append(frame)
        else:
            self.skipped += len(self._pending)
            self._pending.clear()
            self._pending.append(frame)
        self._wake.set()

    async def get(self) -> ScreenFrame:
        """The next frame to show; after the feed ended, an ``eof`` frame (on every call)."""
        while True:
            if self._pending:
                frame = self._pending.popleft()
                if frame.eof:
                    self._pending.appendleft(frame)
                else:
                    self.shown += 1
                return frame
            self._wake.clear()
            await self._wake.wait()


class ScreenView(Protocol):
    """What the screen's WebSocket handler reads: a local :class:`Viewer`, or one relayed
    from the replica holding the bridge (cluster mode)."""

    @property
    def codec(self) -> str: ...
    @property
    def source(self) -> str: ...
    async def get(self) -> ScreenFrame: ...
    async def close(self) -> None: ...


class Viewer(FrameQueue):
    """One consumer of a feed: :meth:`get` the next frame to show (skipping what it missed)."""

    def __init__(self, feed: ScreenFeed) -> None:
        super().__init__()
        self.feed = feed
        self.closed = False

    @property
    def codec(self) -> str:
        return self.feed.codec

    @property
    def source(self) -> str:
        return self.feed.source

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.feed.leave(self)


@dataclass(eq=False)
class ScreenFeed:
    """One bridge screen stream and its viewers."""

    feeds: ScreenFeeds
    device: DeviceRef
    codec: str
    source: str = "screencap"
    channel: str | None = None
    viewers: set[Viewer] = field(default_factory=set)
    gop: list[ScreenFrame] = field(default_factory=list)
    latest: ScreenFrame | None = None
    ended: str | None = None
    received: int = 0
    next_seq: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.device.bridge_id, self.device.serial, self.codec)

    def on_event(self, evt: Evt) -> None:
        frame = next_event(self, evt, parse_screen_frame, "screen frame")
        if frame is None:
            return
        if frame.eof:
            self.end(frame.reason or "eof")
            return
        self.received += 1
        self.latest = frame
        if frame.codec == "h264":
            if frame.key:
                self.gop = [frame]
            elif self.gop and len(self.gop) < MAX_GOP:
                self.gop.append(frame)
            else:
                self.gop = []  # too long a group: joiners wait for the next key frame
        for viewer in self.viewers:
            viewer.offer(frame)

    def join(self, viewer: Viewer) -> None:
        self.viewers.add(viewer)
        if self.ended is not None:
            viewer.offer(ScreenFrame(eof=True, reason=self.ended))
        elif self.codec == "h264":
            for frame in self.gop:
                viewer.offer(frame)
        elif self.latest is not None:
            viewer.offer(self.latest)

    async def leave(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        if not self.viewers:
            await self.feeds.stop(self)

    def end(self, reason: str) -> None:
        if self.ended is not None:
            return
        self.ended = reason
        self.feeds.forget(self)
        for viewer in self.viewers:
            viewer.offer(ScreenFrame(eof=True, reason=reason))


class ScreenFeeds:
    """Every live screen of a hub, by (bridge, serial, codec)."""

    def __init__(self, hub: Hub, *, max_fps: int = 10, max_side: int = 720) -> None:
        self.hub = hub
        self.max_fps = max_fps
        self.max_side = max_side
        self._feeds: dict[tuple[str, str, str], ScreenFeed] = {}
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self.subscribes = 0  # bridge subscriptions made (tests, metrics)

    def feed(self, device: DeviceRef, codec: str) -> ScreenFeed | None:
        return self._feeds.get((device.bridge_id, device.serial, codec))

    async def watch(self, device: DeviceRef, codec: str) -> Viewer:
        """A viewer of ``device``'s screen (the caller is authorized already)."""
        key = (device.bridge_id, device.serial, codec)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            feed = self._feeds.get(key)
            if feed is None or feed.ended is not None:
                feed = await self._start(device, codec)
            viewer = Viewer(feed)
            feed.join(viewer)
            return viewer

    async def _start(self, device: DeviceRef, codec: str) -> ScreenFeed:
        hub = self.hub
        require_local(hub, device, "live screens")
        feed = ScreenFeed(self, device, codec)

        def register(result: dict[str, Any]) -> None:
            # Before the first frame is read: the bridge sends the result first.
            channel = channel_in(result)
            if channel is None or hub.entry(device.bridge_id) is None:
                return
            feed.channel = channel
            feed.source = str(result.get("source", "screencap"))
            feed.codec = str(result.get("codec", codec))
            attach(hub, device.bridge_id, channel, feed)

        await hub.call_wire(
            device,
            SCREEN_SUBSCRIBE.name,
            {"codec": codec, "max_fps": self.max_fps, "max_side": self.max_side},
            on_result=register,
        )
        if feed.channel is None:
            raise RpcError(ErrorCode.INTERNAL, "the bridge answered without a valid channel")
        self.subscribes += 1
        # A feed that fell back to another codec is still found under the one asked for.
        self._feeds[(device.bridge_id, device.serial, codec)] = feed
        return feed

    def forget(self, feed: ScreenFeed) -> None:
        for key, known in list(self._feeds.items()):
            if known is feed:
                del self._feeds[key]
        detach(self.hub, feed.device.bridge_id, feed.channel)

    async def stop(self, feed: ScreenFeed) -> None:
        """The last viewer left: stop the bridge's stream now (in the background)."""
        was_live = feed.ended is None
        feed.end("unsubscribed")
        if was_live and feed.channel is not None:
            close_later(self.hub, feed.device.bridge_id, SCREEN_UNSUBSCRIBE,
                        ScreenUnsubscribeParams(channel=feed.channel))

    def feeds(self) -> list[ScreenFeed]:
        """The live feeds (each once, whatever codec it was asked for under)."""
        return list({id(f): f for f in self._feeds.values()}.values())

    async def latest_picture(self, device: DeviceRef, *,
                             route: bool = True) -> ScreenFrame | None:
        """The newest picture of a live feed of ``device`` (no new screencap; the caller is
        authorized already): a JPEG/PNG feed's last frame, or an H.264 feed's pictures since
        its last key frame decoded (off the loop) into a JPEG. None when nobody watches.

        In cluster mode, for a bridge another replica holds, that replica's answer (its feeds
        are the device's; docs/cluster.md, "Live screens"); ``route=False``: the answering
        end, which never routes again. Raises :class:`RpcError` only then (the holder
        unreachable or silent: :meth:`controller.cluster.screens.ScreenRelays.latest_picture`)."""
        if route:
            replica = await self.hub.held_elsewhere(device.bridge_id)
            if replica is not None:
                return await self.hub.hooks.latest_picture(replica, device)
        for codec in ("jpeg", "png"):
            feed = self.feed(device, codec)
            if feed is not None and feed.ended is None and feed.latest is not None:
                return feed.latest
        feed = self.feed(device, "h264")
        if feed is None or feed.ended is not None or not feed.gop:
            return None
        gop = list(feed.gop)
        try:
            data = await asyncio.to_thread(_decode_last, [f.data for f in gop])
        except Exception as exc:  # a broken stream is "no picture", never a crash
            log.info("cannot decode the live H.264 of %s: %s", device.serial, exc)
            return None
        if data is None:
            return None
        last = gop[-1]
        return ScreenFrame(codec="jpeg", data=data, w=last.w, h=last.h, n=last.n, ts=last.ts)

    @property
    def live(self) -> int:
        return len({id(f) for f in self._feeds.values()})


def _decode_last(units: list[bytes]) -> bytes | None:
    """Decode H.264 access units (a key frame first) and return the last picture as JPEG."""
    import io

    import av

    decoder: Any = av.CodecContext.create("h264", "r")
    last = None
    for unit in units:
        for frame in decoder.decode(av.Packet(unit)):
            last = frame
    for frame in decoder.decode(None):
        last = frame
    if last is None:
        return None
    out = io.BytesIO()
    last.to_image().save(out, "JPEG", quality=80)
    return out.getvalue()
