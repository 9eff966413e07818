"""Logcat subscriptions of the bridge: one device stream each, sent as ``evt`` batches.

:class:`LogcatStreams` holds the subscriptions the :class:`~device_bridge.rpc.Dispatcher`
opened (after the policy's checks and the logcat scope): each streams ``evt`` batches on a
channel of its own (``d`` = :class:`protocol.methods.LogBatch`, ``seq`` in the envelope),
read from a bounded buffer whose overflow becomes a ``dropped`` count, never silent loss. A
subscription ends on unsubscribe (a last batch with ``eof`` and reason ``unsubscribed``), when
the owner pauses sharing (reason ``paused``), when the device's stream ends, or when the link
drops (:meth:`LogcatStreams.end_all`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import ErrorCode, RpcError
from protocol.methods import LogBatch

if TYPE_CHECKING:
    from device_bridge.adb import LineStream

__all__ = ["MAX_SUBSCRIPTIONS", "EventSink", "LogcatStreams", "StreamStats", "Subscription",
           "only_pids"]

log = logging.getLogger("droidwire.bridge.rpc")

MAX_SUBSCRIPTIONS = 32

_THREADTIME_PID = re.compile(r"^\S+ +\S+ +(\d+) ")


class EventSink(Protocol):
    """Where stream batches go: the link (``emit`` waits for room; False once it is down)."""

    async def emit(self, channel: str, data: Any) -> bool: ...


@dataclass(eq=False)
class StreamStats:
    """Counters of one subscription (logs, metrics, tests). ``overflowed`` is set the first
    time the link fell behind and the stream had to wait for it; ``dropped_lines`` counts the
    lines the device layer dropped because it stayed behind longer than its ``stall_s``."""

    sent_batches: int = 0
    dropped_lines: int = 0
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False)
class Subscription:
    channel: str
    serial: str
    stream: LineStream
    pids: frozenset[int] | None = None  # instrument-only scope: keep only these processes
    unsubscribed: bool = False
    stats: StreamStats = field(default_factory=StreamStats)
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


def only_pids(lines: list[str], pids: frozenset[int] | None) -> list[str]:
    """Keep the lines of ``pids``' processes (threadtime format); all when ``pids`` is None."""
    if pids is None:
        return lines
    out = []
    for line in lines:
        match = _THREADTIME_PID.match(line)
        if match is not None and int(match[1]) in pids:
            out.append(line)
    return out


class LogcatStreams:
    """The open subscriptions, by channel. ``paused`` says whether the owner has paused
    sharing (checked for every batch: the kill switch ends live streams too); at most
    ``queue_batches`` batches wait for the link per subscription."""

    def __init__(self, *, queue_batches: int, paused: Callable[[], bool]) -> None:
        self.queue_batches = queue_batches
        self._paused = paused
        self.subs: dict[str, Subscription] = {}

    def check_room(self) -> None:
        """``busy`` when no other subscription may open (checked before the device's stream)."""
        if len(self.subs) >= MAX_SUBSCRIPTIONS:
            raise RpcError(ErrorCode.BUSY, f"at most {MAX_SUBSCRIPTIONS} logcat subscriptions")

    def start(self, serial: str, stream: LineStream, pids: frozenset[int] | None,
              sink: EventSink) -> str:
        """Stream ``stream`` to ``sink`` on a new channel; returns the channel."""
        sub = Subscription(channel=f"lc-{uuid.uuid4().hex}", serial=serial, stream=stream)
        sub.pids = pids
        self.subs[sub.channel] = sub
        # The result (with the channel) is queued before the first batch: the pump starts
        # on the next loop turn, after the link completed this request.
        sub.task = asyncio.get_running_loop().create_task(
            self._pump(sub, sink), name=f"droidwire-logcat-{serial}"
        )
        log.info("logcat of %s streaming on %s", serial, sub.channel)
        return sub.channel

    async def _pump(self, sub: Subscription, sink: EventSink) -> None:
        """Read the device's stream; send batches as the link allows.

        Between the two, at most ``queue_batches`` batches wait. When the link is slower than
        the device the reader waits for room, so the device layer's buffer fills and then the
        adb stream itself pushes back (as a phone's logd holds lines for a slow reader). Only
        a link that stays behind for the device layer's ``stall_s`` costs lines, and those
        are counted: the next batch carries ``dropped``, so the consumer sees an explicit
        gap, never silent loss. (Dropping here instead lost lines to any momentary slowness
        of a loaded host.)
        """
        queue: collections.deque[LogBatch] = collections.deque()
        ready = asyncio.Event()
        room = asyncio.Event()
        finished = False

        async def read() -> None:
            nonlocal finished
            try:
                async for batch in sub.stream:
                    if self._paused():
                        # The owner's kill switch ends live streams too, not only new calls.
                        queue.append(LogBatch(lines=[], eof=True, reason="paused"))
                        ready.set()
                        break
                    lines = only_pids(batch.lines, sub.pids)
                    reason = "unsubscribed" if batch.eof and sub.unsubscribed else batch.reason
                    if not lines and not batch.dropped and not batch.eof:
                        continue
                    while len(queue) >= self.queue_batches and not batch.eof:
                        sub.stats.overflowed.set()  # the link is behind: hold the device back
                        room.clear()
                        await room.wait()
                    sub.stats.dropped_lines += batch.dropped
                    queue.append(
                        LogBatch(lines=lines, dropped=batch.dropped, eof=batch.eof, reason=reason)
                    )
                    ready.set()
                    if batch.eof:
                        break
            finally:
                finished = True
                ready.set()

        reader = asyncio.create_task(read(), name=f"droidwire-logcat-read-{sub.serial}")
        try:
            await asyncio.sleep(0)  # let the subscribe result go out first
            while True:
                while not queue:
                    if finished:
                        return
                    ready.clear()
                    await ready.wait()
                out = queue.popleft()
                room.set()
                if not await sink.emit(sub.channel, out.to_wire()):
                    return  # the link is down: the subscription ends with it
                sub.stats.sent_batches += 1
                if out.eof:
                    return
        except Exception:
            log.exception("logcat stream %s failed", sub.channel)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            with contextlib.suppress(Exception):
                await sub.stream.aclose()
            self.subs.pop(sub.channel, None)
            sub.done.set()

    async def unsubscribe(self, channel: str) -> None:
        sub = self.subs.get(channel)
        if sub is None:
            return  # idempotent: already ended
        sub.unsubscribed = True
        await sub.stream.aclose()  # the pump forwards what is left, then the eof batch
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await sub.done.wait()
        if sub.task is not None and not sub.task.done():
            sub.task.cancel()

    async def end_all(self) -> None:
        """The link dropped: end every subscription (the controller subscribes again)."""
        subs = list(self.subs.values())
        for sub in subs:
            if sub.task is not None:
                sub.task.cancel()
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.stream.aclose()
            if sub.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sub.task
        self.subs.clear()

    @property
    def channels(self) -> list[str]:
        return list(self.subs)

    def stats(self, channel: str) -> StreamStats | None:
        sub = self.subs.get(channel)
        return sub.stats if sub is not None else None
