"""A bridge channel's end on the controller, as live screens (:mod:`controller.hub.screen`)
and tunnel streams (:mod:`controller.hub.tunnel`) both hold one: only the replica holding the
bridge serves it; the subscribe (or open) result names the channel, whose ``evt`` frames the
hub then hands to the end registered for it (``BridgeEntry.screens``), in order and once; the
end is forgotten when it is over, and the bridge told to stop in the background."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from controller.auth.authorization import DeviceRef
    from controller.hub.entry import ScreenChannel
    from controller.hub.hub import Hub
    from protocol.envelope import Evt
    from protocol.methods import Method

__all__ = ["FrameOutbox", "attach", "channel_in", "close_later", "detach", "next_event",
           "require_local"]

log = logging.getLogger("droidwire.controller.channels")

T = TypeVar("T")
P = TypeVar("P", bound=BaseModel)


class _Ordered(Protocol):
    next_seq: int  # the next ``seq`` the end has not seen


def require_local(hub: Hub, device: DeviceRef, what: str) -> None:
    """In cluster mode, ``unavailable`` (``other_replica``) unless this replica holds the
    device's bridge: ``what`` (e.g. ``live screens``) is served there."""
    if hub.cluster is None:
        return
    entry = hub.entry(device.bridge_id)
    if entry is None or entry.conn is None:
        raise RpcError(ErrorCode.UNAVAILABLE,
                       f"{what} are served by the replica that holds the device's bridge",
                       {"reason": "other_replica"})


def channel_in(result: Mapping[str, Any]) -> str | None:
    """The channel a subscribe or open result names, or None when it names none (or one of
    the hub's own, ``$…``)."""
    channel = result.get("channel")
    return channel if isinstance(channel, str) and not channel.startswith("$") else None


def attach(hub: Hub, bridge_id: str, channel: str, end: ScreenChannel) -> None:
    """From now on ``channel``'s ``evt`` frames go to ``end`` (while the bridge is known)."""
    entry = hub.entry(bridge_id)
    if entry is not None:
        entry.screens[channel] = end


def detach(hub: Hub, bridge_id: str, channel: str | None) -> None:
    """``channel``'s frames go nowhere any more."""
    entry = hub.entry(bridge_id)
    if entry is not None and channel is not None:
        entry.screens.pop(channel, None)


def close_later(hub: Hub, bridge_id: str, method: Method[P, Any], params: P) -> None:
    """Ask the bridge to stop a channel (``method``), in the background and only while its
    connection is open: never waits, never fails."""
    entry = hub.entry(bridge_id)
    if entry is None or not entry.is_open:
        return

    async def close() -> None:
        with contextlib.suppress(RpcError):
            await hub.call(bridge_id, method, params, timeout_s=hub.settings.rpc_timeout_s)

    hub._spawn(close())


def next_event(end: _Ordered, evt: Evt, parse: Callable[..., T], what: str) -> T | None:
    """``evt``'s payload (``parse(evt.data, seq=evt.seq)``), or None: malformed (logged as a
    ``what``) or a duplicate of one ``end`` has already seen."""
    try:
        item = parse(evt.data, seq=evt.seq)
    except RpcError as exc:
        log.warning("malformed %s on %s: %s", what, evt.channel, exc.message)
        return None
    if evt.seq < end.next_seq:
        return None
    end.next_seq = evt.seq + 1
    return item


class FrameOutbox:
    """Frames queued for a tunnel's client, then the ``end`` frame last: the local tunnel
    (:mod:`controller.hub.tunnel`) and a relayed one (:mod:`controller.cluster.tunnels`) both
    hold one. ``queued`` counts the bytes each frame was put with (its device bytes), which may
    not pass ``limit``: the tunnel's windows bound them, so more is a bridge overrunning them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._frames: collections.deque[tuple[bytes, int]] = collections.deque()
        self.queued = 0
        self._final: bytes | None = None
        self._ended = False
        self._wake = asyncio.Event()

    def put(self, frame: bytes, size: int) -> bool:
        """Queue ``frame``; False (and nothing queued) when its ``size`` would pass the limit."""
        if self.queued + size > self.limit:
            return False
        self._frames.append((frame, size))
        self.queued += size
        self._wake.set()
        return True

    def finish(self, final: bytes | None, *, drop_queued: bool = False) -> None:
        """``final`` (if any) goes out after what is queued (or instead of it:
        ``drop_queued``); then :meth:`next_frame` answers None."""
        if drop_queued:
            self._frames.clear()
            self.queued = 0
        self._final = final
        self._ended = True
        self._wake.set()

    async def next_frame(self) -> bytes | None:
        """The next frame for the client; None once the final one went out."""
        while True:
            if self._frames:
                frame, size = self._frames.popleft()
                self.queued -= size
                return frame
            if self._final is not None:
                frame, self._final = self._final, None
                return frame
            if self._ended:
                return None
            self._wake.clear()
            await self._wake.wait()
