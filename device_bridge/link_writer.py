"""The link's send queue and its one writer (a part of :class:`device_bridge.connection.Link`).

docs/design.md §3–4. One writer at a time sends the send queue in order, and only while it is
not empty: it starts in the step that queued a frame and runs up to its first real suspension
(a send waits only when the socket pushes back), then a task carries it on — so a result
usually leaves in the step that produced it (the controller's hub does the same, the "eager
writer"). A writer sends only for the connection it started on; a broken send reports the
failure to the link's guard (:meth:`~device_bridge.connection.Link.drop`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State as WsState

from device_bridge.link_failure import Failure, classify_failure
from protocol.codec import Codec
from protocol.eager import start_eagerly
from protocol.envelope import Res
from protocol.errors import EncodeError, FrameTooLarge
from protocol.session import BridgeSession
from protocol.settings import Settings

__all__ = ["LinkWriter"]

# Link._writer while a writer runs eagerly, in the step that queued a frame.
_EAGER = object()


class LinkWriter:
    """Moving the session's frames to the send queue, and the writer that sends it.

    The lowest layer of :class:`~device_bridge.connection.Link`, which owns the state below
    (reset per connection) and the guard ``drop``.
    """

    session: BridgeSession
    codec: Codec
    settings: Settings
    log: logging.LoggerAdapter[Any]
    drop: Callable[[Failure | str], bool]
    _ws: ClientConnection | None
    _out: collections.deque[bytes]
    _writer: asyncio.Task[None] | object | None  # _EAGER, a task, or None
    _room: asyncio.Event

    def _flush(self, res: Res | None = None, encoded: bytes | None = None) -> None:
        """Move the session's queued frames to this connection's send queue (``encoded``:
        ``res`` as :meth:`_fit` encoded it already, so a result is not encoded twice)."""
        frames = self.session.frames_to_send()
        if self._ws is None:
            return
        for frame in frames:
            if frame is res and encoded is not None:
                self._out.append(encoded)
                continue
            try:
                self._out.append(self.codec.encode(frame))
            except (FrameTooLarge, EncodeError) as exc:  # pre-checked for results; never a crash
                self.log.error("dropping an unsendable %s frame: %s", frame.t, exc)
        if self._out:
            self._write_soon()

    def _send_direct(self, res: Res) -> None:
        if self._ws is not None and self.session.is_open:
            self._out.append(self.codec.encode(res))
            self._write_soon()

    def _write_soon(self) -> None:
        """The send queue has frames: send them now, unless a writer is already at it (it
        sends everything queued before it returns).

        An eager start (3.12's eager tasks, by hand for 3.11, as the hub's writer): the
        writer runs in the caller's step up to its first real suspension — ``ws.send``
        suspends only while the transport pushes back — and a task carries it on from there.
        Not while the connection is closing: websockets then waits for the close under a
        timeout bound to the *current* task, which must be the writer's own.
        """
        ws = self._ws
        if self._writer is not None or ws is None:
            return
        if ws.state is not WsState.OPEN:
            task = asyncio.get_running_loop().create_task(
                self._write(ws), name="droidwire-link-writer"
            )
            self._writer = task
            task.add_done_callback(self._written)
            return
        self._writer = _EAGER
        carried = start_eagerly(
            self._write(ws),
            lambda rest: asyncio.get_running_loop().create_task(rest, name="droidwire-link-writer"),
        )
        if carried is None:
            return  # all sent in this step (_write reset self._writer)
        self._writer = carried
        carried.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        if self._writer is task:
            self._writer = None

    async def _write(self, ws: ClientConnection) -> None:
        """Send the queue until it is empty; the only writer while it runs, and only for
        ``ws`` (it stops when that connection is no longer the current one)."""
        try:
            while self._out and self._ws is ws:
                await ws.send(self._out[0])
                self._out.popleft()
                if len(self._out) < self.settings.send_queue_frames:
                    self._room.set()
            self._room.set()
        except ConnectionClosed as exc:
            if self._ws is ws:
                self.drop(classify_failure(exc))
        except Exception as exc:
            self.log.exception("link writer failed")
            if self._ws is ws:
                self.drop(f"writer failed: {type(exc).__name__}")
        finally:
            # In the same step as the last look at the queue: a frame queued from now on
            # starts a new writer.
            self._writer = None
