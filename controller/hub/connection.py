"""One WebSocket of one bridge (:class:`Connection`) and what the hub needs of the socket
(:class:`BridgeSocket`): the writer that alone drains the session's frames, started eagerly,
and the batched acks (docs/design.md §3–4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from protocol.eager import start_eagerly

__all__ = ["ACK_DELAY_S", "BridgeSocket", "Connection"]

# Acks are batched (docs/design.md §3 only needs them eventually: an unacked result is re-sent on
# resume and dropped as no longer waited for): one ``ack`` frame per this delay, or at once
# when ACK_BATCH ids wait, instead of one frame per result on the RPC hot path.
ACK_DELAY_S = 0.02

# Connection.writer while a drain runs eagerly, in the caller's own step.
_EAGER = object()


class BridgeSocket(Protocol):
    """What the hub uses of a bridge's WebSocket: Starlette's (the ASGI endpoint,
    :mod:`controller.hub.endpoint`) or websockets' own server connection
    (:mod:`controller.hub.wsserver`, what ``droidwire controller`` serves)."""

    async def receive(self) -> Any: ...  # an ASGI message: websocket.receive / .disconnect
    async def send_bytes(self, data: bytes) -> None: ...
    async def close(self, code: int = ..., reason: str = ...) -> None: ...


class Connection:
    """One WebSocket of one bridge.

    The task serving the connection reads it (:meth:`Hub.serve`); a writer task exists only
    while the session has frames to send (:meth:`wake`) and ends when it has drained them.
    An idle bridge therefore costs one task and no per-connection events or timers: it is
    what most bridges are most of the time (docs/benchmarks.md, ``idle_bridge_kb``).
    """

    __slots__ = (
        "ack_due", "ack_timer", "again", "close_code", "close_reason", "drain", "ending",
        "failure", "reader", "writer", "ws",
    )

    def __init__(
        self, websocket: BridgeSocket, drain: Callable[[Connection], Coroutine[Any, Any, None]]
    ) -> None:
        self.ws = websocket
        self.drain = drain  # the writer's body: sends what the session has, then returns
        self.reader: asyncio.Task[Any] | None = None  # the serving task, while it reads
        self.writer: asyncio.Task[None] | object | None = None  # _EAGER, a task, or None
        self.again = False  # woken while the writer was sending: it drains once more
        self.ending = False  # kicked, or the writer failed: the reader stops
        self.failure: BaseException | None = None  # what ended the writer, if it failed
        self.close_code: int | None = None
        self.close_reason = ""
        self.ack_due = False  # the batched acks go out with the next drain
        self.ack_timer: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        """The session has frames to send: drain them now, or once more if draining."""
        if self.writer is not None:
            self.again = True
            return
        if self.ending:
            return
        # An eager start (3.12's eager tasks, by hand for 3.11): the drain runs here up to
        # its first real suspension. A send suspends only when the transport pushes back, so
        # a frame usually leaves at once — no task, no extra trip through the event loop on
        # the RPC path; if it does suspend, a task carries the drain on from there.
        self.writer = _EAGER
        try:
            task = start_eagerly(self.drain(self), asyncio.get_running_loop().create_task)
        except Exception as exc:  # e.g. the socket is gone
            self.writer = None
            self.failed(exc)
            return
        if task is None:
            return
        self.writer = task
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        if self.writer is task:
            self.writer = None
        if not task.cancelled() and task.exception() is not None:
            self.failed(task.exception())

    def failed(self, exc: BaseException | None) -> None:
        """End the connection: its writer or its read callback failed with ``exc``."""
        self.failure = exc
        self._end()

    def ack_soon(self) -> None:
        """Results were received: their ack goes out within ACK_DELAY_S."""
        if self.ack_timer is None and not self.ack_due:
            self.ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY_S, self._ack_now)

    def _ack_now(self) -> None:
        self.ack_timer = None
        self.ack_due = True
        self.wake()

    def stop_timers(self) -> None:
        if self.ack_timer is not None:
            self.ack_timer.cancel()
            self.ack_timer = None

    def kick(self, code: int, reason: str) -> None:
        """Close this connection with ``code`` (first decision wins)."""
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason
        self._end()

    def _end(self) -> None:
        """Stop the reader: cancel it, unless it is the caller (it returns by itself then)."""
        if self.ending:
            return
        self.ending = True
        reader = self.reader
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
