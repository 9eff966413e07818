"""Logcat subscriptions on the bridges (``hub.logcat``): started, resumed after a reconnect,
stopped, and the per-tenant stream quotas (docs/security.md, "Bounds and secrets").

The streams themselves (:class:`~controller.hub.streams.LogStream`) are fed by the hub's reader;
in cluster mode a stream on a bridge another replica holds is relayed from there
(:meth:`ClusterHooks.stream <controller.hub.hooks.ClusterHooks.stream>`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller.auth.authorization import DeviceRef
from controller.hub.entry import BridgeEntry
from controller.hub.streams import LogStream
from protocol.envelope import is_channel
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_SUBSCRIBE, LOGCAT_UNSUBSCRIBE, LogcatUnsubscribeParams

if TYPE_CHECKING:
    from controller.hub.hub import Hub

__all__ = ["RESYNC_TAIL_MAX", "LogcatStreams", "StreamHold"]

log = logging.getLogger("droidwire.controller.hub")

# protocol's bound on ``tail``).
RESYNC_TAIL_MAX = 5000


@dataclass(eq=False, slots=True)
class StreamHold:
    """A user's logcat stream (or one being opened), for the quotas."""

    user_id: str
    bridge_id: str
    borrower: bool
    stream: LogStream | None = None



class LogcatStreams:
    """The hub's logcat subscriptions and their quotas."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._holds: set[StreamHold] = set()

    async def subscribe(
        self, device: DeviceRef, params: dict[str, Any] | None = None, *, route: bool = True
    ) -> LogStream:
        """Start a logcat stream on ``device`` (caller authorized already); see LogStream.

        In cluster mode, for a bridge connected to another replica, that replica subscribes
        and relays the chunks here (``route=False``: the relaying end, which never routes
        again); the stream returned reads the same way (docs/cluster.md)."""
        made: list[LogStream] = []

        params = {k: v for k, v in (params or {}).items() if k != "serial"}
        if route:
            replica = await self.hub.held_elsewhere(device.bridge_id)
            if replica is not None:
                return await self.hub.hooks.stream(replica, device, params)

        def register(result: dict[str, Any]) -> None:
            channel = result.get("channel")
            entry = self.hub.entry(device.bridge_id)
            if entry is None or not isinstance(channel, str) or not usable(channel):
                return
            stream = LogStream(
                channel=channel,
                bridge_id=device.bridge_id,
                serial=device.serial,
                max_batches=self.hub.settings.stream_queue_batches,
                params=params,
            )
            entry.streams[channel] = stream
            entry.subscriptions.add(stream)
            made.append(stream)

        await self.hub.call_wire(device, LOGCAT_SUBSCRIBE.name, params, on_result=register)
        if not made:
            raise RpcError(ErrorCode.INTERNAL, "the bridge answered without a valid channel")
        return made[0]

    async def resubscribe(self, entry: BridgeEntry, stream: LogStream) -> None:
        """After a reconnect: the bridge ended its streams with the link; subscribe again,
        with the buffer's tail so the stream resumes where the consumer stopped."""
        settings = self.hub.settings
        tail = min(RESYNC_TAIL_MAX, settings.logcat_batch_lines * settings.stream_queue_batches)
        params = {**stream.params, "tail": tail}

        def reroute(result: dict[str, Any]) -> None:
            channel = result.get("channel")
            if stream.ended or not isinstance(channel, str) or not usable(channel):
                return
            stream.resync(channel, tail)
            entry.streams[channel] = stream

        device = DeviceRef(entry.id, stream.serial, entry.owner_id, entry.name)
        try:
            result = await self.hub.call_wire(device, LOGCAT_SUBSCRIBE.name, params,
                                              on_result=reroute)
        except RpcError as exc:
            log.info("bridge %s: logcat of %s not resumed: %s", entry.name, stream.serial, exc)
            stream.end(f"resume_failed: {exc.code.value}")
            entry.subscriptions.discard(stream)
            return
        channel = result.get("channel")
        if stream.ended and isinstance(channel, str) and usable(channel):
            # The consumer left while we were subscribing again: stop the new stream too.
            with contextlib.suppress(RpcError):
                await self.hub.call(entry.id, LOGCAT_UNSUBSCRIBE,
                                    LogcatUnsubscribeParams(channel=channel))

    async def unsubscribe(self, stream: LogStream) -> None:
        """Stop a stream: at once here; on the bridge's side in the background (best effort:
        it may be gone already, and it ends its streams with the link anyway). The caller —
        a consumer's socket handler — never waits for the bridge, so a bridge dropping in that
        moment cannot hold the handler (and a controller shutdown) through the grace period."""
        stream.end("unsubscribed")
        if self.hub.hooks.stop_stream(stream):
            return  # relayed from another replica: the cluster tells it to stop
        entry = self.hub.entry(stream.bridge_id)
        if entry is None:
            return
        entry.subscriptions.discard(stream)
        if entry.streams.pop(stream.channel, None) is None:
            return
        if not entry.is_open or self.hub._closing:
            return
        self.hub._spawn(self._unsubscribe_on_bridge(entry.id, stream.channel))

    async def _unsubscribe_on_bridge(self, bridge_id: str, channel: str) -> None:
        with contextlib.suppress(RpcError):
            await self.hub.call(
                bridge_id,
                LOGCAT_UNSUBSCRIBE,
                LogcatUnsubscribeParams(channel=channel),
                timeout_s=self.hub.settings.rpc_timeout_s,
            )

    def reserve(self, hold: StreamHold) -> None:
        """Per-tenant stream quotas, the owner first: a user holds at most
        ``streams_per_user`` live streams; borrowers together hold at most
        ``borrower_streams_per_bridge`` of a bridge's stream slots, the rest stay the
        owner's (docs/security.md, "Bounds and secrets"). ``busy`` (429) beyond."""
        live = {h for h in self._holds if h.stream is None or not h.stream.ended}
        self._holds = live
        mine = sum(1 for h in live if h.user_id == hold.user_id)
        if mine >= self.hub.streams_per_user:
            raise RpcError(ErrorCode.BUSY, f"at most {self.hub.streams_per_user} live logcat "
                           "streams per user", {"rule": "stream_quota",
                                                "limit": self.hub.streams_per_user})
        if hold.borrower:
            lent = sum(1 for h in live if h.borrower and h.bridge_id == hold.bridge_id)
            if lent >= self.hub.borrower_streams_per_bridge:
                raise RpcError(ErrorCode.BUSY, "borrowers hold all the logcat streams this "
                               "device's bridge lends out; its owner's are kept free",
                               {"rule": "borrower_stream_quota",
                                "limit": self.hub.borrower_streams_per_bridge})
        live.add(hold)

    def release(self, hold: StreamHold) -> None:
        """A reserved stream that did not open after all."""
        self._holds.discard(hold)


def usable(channel: str) -> bool:
    """A channel a subscription may use (not malformed, not a reserved ``$name``)."""
    return is_channel(channel) and not channel.startswith("$")
