"""Logcat streams on the controller: the bridge's ``evt`` batches to one consumer, bounded.

One :class:`LogStream` per ``device.logcat.subscribe``. The hub's reader feeds it every batch
of its channel (synchronously, never blocking the bridge's link); the consumer (a REST
WebSocket) awaits :meth:`LogStream.get`. Rules (docs/protocol.md "Streams"):

* bounded: at most ``max_batches`` batches wait for the consumer; past that, whole batches are
  dropped and *counted*, and the next batch handed out carries the count (``dropped``) — an
  explicit marker, never silent loss;
* sequence numbers: the envelope's ``seq`` counts a channel's batches from 0 and survives a
  resumed connection (the bridge's session keeps it). A batch at or below the last seen
  ``seq`` is a duplicate and ignored; a jump means batches were lost on the way and is
  reported as ``lost_batches``. ``dropped`` reported by the bridge (lines it could not send
  while the link was down or the queue full) is passed on, added to ours.

Across a reconnect the bridge ends its streams (its logcat readers die with the link) and the
hub subscribes again on a new channel, asking for the last lines of the device's buffer
(``tail``). :meth:`LogStream.resync` then holds the new lines back until it finds the last
lines this consumer already got, and passes on only what follows them: no duplicate, and no
gap as long as fewer than ``tail`` lines were logged while the link was down. If they are not
found within ``tail`` lines, everything is passed on behind a ``lost_batches`` marker.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

from protocol.methods import LogBatch

__all__ = ["LogChunk", "LogStream"]


@dataclass(frozen=True, slots=True)
class LogChunk:
    """What a consumer gets: ``lines`` in order, preceded by ``dropped`` lost lines and
    ``lost_batches`` lost batches (of unknown size); ``eof`` ends the stream."""

    lines: list[str]
    dropped: int = 0
    lost_batches: int = 0
    eof: bool = False
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"lines": self.lines, "dropped": self.dropped}
        if self.lost_batches:
            out["lost_batches"] = self.lost_batches
        if self.eof:
            out["eof"] = True
            out["reason"] = self.reason
        return out


class LogStream:
    """One subscription's bounded buffer between the hub's reader and one consumer."""

    #: How many of the last delivered lines identify the resume point.
    ANCHOR_LINES = 3

    def __init__(
        self,
        *,
        channel: str,
        bridge_id: str,
        serial: str,
        max_batches: int,
        params: dict[str, Any] | None = None,
    ) -> None:
        if max_batches < 1:
            raise ValueError("max_batches must be >= 1")
        self.channel = channel
        self.bridge_id = bridge_id
        self.serial = serial
        self.params = dict(params or {})  # the subscribe params (without the serial)
        self.max_batches = max_batches
        self.resubscribed = 0
        self._anchor: collections.deque[str] = collections.deque(maxlen=self.ANCHOR_LINES)
        self._held: list[str] | None = None  # lines held back while resyncing
        self._held_max = 0
        self.next_seq = 0
        self.duplicates = 0
        self.dropped_total = 0
        self._queue: collections.deque[LogChunk] = collections.deque()
        self._dropped = 0  # lines lost since the last chunk queued
        self._lost = 0  # batches lost since the last chunk queued
        self._eof: str | None = None
        self._wake = asyncio.Event()

    @property
    def ended(self) -> bool:
        return self._eof is not None

    @property
    def queued(self) -> int:
        """Chunks waiting for the consumer."""
        return len(self._queue)

    def feed(self, batch: LogBatch, *, lost_batches: int = 0) -> None:
        """Take one batch from the bridge (never blocks, never raises). ``lost_batches``: the
        source already lost that many batches before this one (a stream relayed from another
        replica passes its own markers on this way)."""
        if self._eof is not None:
            return
        seq = batch.seq
        if seq != self.next_seq:
            if seq < self.next_seq:
                self.duplicates += 1
                return
            self._lost += seq - self.next_seq
        if lost_batches > 0:
            self._lost += lost_batches
        self.next_seq = seq + 1
        if batch.dropped:
            self._dropped += batch.dropped
        lines = batch.lines
        if self._held is not None:
            lines = self._resynced(lines, final=batch.eof)
        if lines:
            queue = self._queue
            if len(queue) >= self.max_batches:
                # Full: the lines are lost, and said so by the next chunk — at the latest the
                # consumer's next get(), even if no other line ever comes.
                self._dropped += len(lines)
                self.dropped_total += len(lines)
            elif self._dropped or self._lost:
                queue.append(LogChunk(lines, self._dropped, self._lost))
                self._dropped = self._lost = 0
                self._anchor.extend(lines[-self.ANCHOR_LINES:])
            else:  # the usual case, on every batch: nothing lost to report
                queue.append(LogChunk(lines))
                self._anchor.extend(lines[-self.ANCHOR_LINES:])
        if batch.eof:
            self._eof = batch.reason or "eof"
        self._wake.set()

    def resync(self, channel: str, tail: int) -> None:
        """The stream continues on ``channel``, starting with the device's last ``tail``
        lines; skip those this consumer already got."""
        self.channel = channel
        self.next_seq = 0
        self.resubscribed += 1
        if self._anchor:
            self._held = []
            self._held_max = tail

    def _resynced(self, lines: list[str], *, final: bool) -> list[str]:
        held = self._held
        assert held is not None
        held.extend(lines)
        anchor = list(self._anchor)
        n = len(anchor)
        for i in range(len(held) - n, -1, -1):
            if held[i:i + n] == anchor:
                self._held = None
                return held[i + n:]
        if len(held) >= self._held_max or final:
            self._held = None
            self._lost += 1  # the resume point was not found: some lines are missing
            return held
        return []

    def end(self, reason: str) -> None:
        """The stream ends here (bridge gone, restarted, unsubscribed): consumers drain, then
        get an ``eof`` chunk with ``reason``."""
        if self._eof is None:
            self._eof = reason
            self._wake.set()

    async def get(self) -> LogChunk:
        """The next chunk; after the last one, an ``eof`` chunk (again on every call)."""
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._dropped or self._lost:
                chunk = LogChunk([], self._dropped, self._lost)
                self._dropped = self._lost = 0
                return chunk
            if self._eof is not None:
                chunk = LogChunk([], self._dropped, self._lost, eof=True, reason=self._eof)
                self._dropped = self._lost = 0
                return chunk
            self._wake.clear()
            await self._wake.wait()
