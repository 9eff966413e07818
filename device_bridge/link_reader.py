"""Frames in (a part of :class:`device_bridge.connection.Link`).

docs/design.md §3–4. The reader decodes each frame within the frame cap and hands it to the
session; what the outcome asks (run a request, cancel one, the ``welcome``) is done in the same
step. A malformed request whose id can be read gets an error result; any other malformed or
unexpected frame is a protocol violation (close 4400, reconnect). A small ``req`` or ``ack``
may be handled in the transport's read callback instead (:meth:`LinkReader._frame_now`, the
fast path of :class:`~device_bridge.link_dial.LinkConnection`). Whatever ends the reading is
reported to the link's guard.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from device_bridge.link_dial import FAST_FRAME_BYTES
from device_bridge.link_failure import Failure, classify_failure
from device_bridge.link_handlers import LinkHandlers
from protocol.closecodes import CloseCode, describe, is_terminal
from protocol.envelope import Ack, Req, Res, Welcome, is_request_id
from protocol.errors import (
    DecodeError,
    ErrorCode,
    HandshakeRefused,
    RpcError,
    UnexpectedFrame,
)
from protocol.session import Admission, WelcomeOutcome

__all__ = ["LinkReader"]


class LinkReader(LinkHandlers):
    """Reading one connection's frames and doing what they ask.

    A layer of :class:`~device_bridge.connection.Link` (over its handlers and its writer),
    which owns the state below and what a ``welcome`` changes (``_welcome``).
    """

    _background: set[asyncio.Task[Any]]
    _welcome: Callable[[Welcome, WelcomeOutcome], None]

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                if isinstance(message, str):
                    await self._violation(ws, "text frame: droidwire frames are binary")
                    return
                if not await self._on_frame(ws, message):
                    return
        except ConnectionClosed as exc:
            self.drop(classify_failure(exc))
            return
        except Exception as exc:  # a bug in a frame handler must end the connection, not hang
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
            return
        # The iterator ended: a normal close (1000/1001) was received.
        code = ws.close_code
        reason = f" ({ws.close_reason[:200]})" if ws.close_reason else ""
        self.drop(
            Failure(
                f"connection closed: {describe(code)}{reason}",
                terminal=is_terminal(code),
                close_code=code,
            )
        )

    async def _on_frame(self, ws: ClientConnection, data: bytes) -> bool:
        """Handle one frame; False when the connection must end."""
        now = self._clock()
        try:
            frame = self.codec.decode(data)
        except DecodeError as exc:
            if exc.kind == "req" and exc.frame_id is not None and is_request_id(exc.frame_id):
                # A malformed request whose id can be read gets an error result, never a crash.
                if self.session.is_open:
                    self.session.reject(
                        exc.frame_id, RpcError(ErrorCode.BAD_REQUEST, str(exc)), now
                    )
                    self._flush()
                    return True
            await self._violation(ws, f"malformed frame: {exc}")
            return False
        try:
            outcome = self.session.receive(frame, now)
        except HandshakeRefused as exc:
            self.drop(Failure(str(exc), terminal=True, close_code=exc.close_code))
            await _close(ws, exc.close_code, str(exc))
            return False
        except UnexpectedFrame as exc:
            await self._violation(ws, str(exc))
            return False
        if isinstance(outcome, WelcomeOutcome):
            assert isinstance(frame, Welcome)
            self._welcome(frame, outcome)
        else:
            self._outcome(frame, outcome)
        self._flush()
        return True

    def _frame_now(self, ws: ClientConnection, data: bytes) -> bool:
        """A ``req`` (up to a tunnel's write) or ``ack`` handled in the transport's read
        callback — the reader is idle with nothing queued (:class:`LinkConnection` checks
        that), so frames keep their order — instead of one more trip through the event loop
        to wake the reader.
        The same steps as :meth:`_on_frame`; False (anything else, or a frame that does not
        decode): the reader reads it as usual."""
        if self._ws is not ws or len(data) > FAST_FRAME_BYTES or not self.session.is_open:
            return False
        try:
            frame = self.codec.decode(data)
        except DecodeError:
            return False
        if not isinstance(frame, Req | Ack):
            return False
        try:
            outcome = self.session.receive(frame, self._clock())
        except (HandshakeRefused, UnexpectedFrame) as exc:
            # The reader would close: the same, in a task (closing waits for the peer).
            task = asyncio.get_running_loop().create_task(self._violation(ws, str(exc)))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return True
        except Exception as exc:  # as in the reader: a bug ends the connection, not the loop
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
            return True
        try:
            self._outcome(frame, outcome)
            self._flush()
        except Exception as exc:
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
        return True

    def _outcome(self, frame: Any, outcome: Any) -> None:
        """What a frame's outcome (other than ``welcome``'s) asks of the link."""
        if isinstance(outcome, Admission):
            assert isinstance(frame, Req)
            if outcome is Admission.RUN:
                self._start(frame)
            else:
                self.log.debug("request %s %s: %s", frame.id, frame.method, outcome.value)
        elif outcome is True:  # a cancel of a running request
            rid = getattr(frame, "id", "")
            task = self._tasks.get(rid)
            if task is not None:
                task.cancel()
            # Answer it, outside the outbox (nobody waits: the controller drops it as a duplicate).
            self._send_direct(Res.failure(rid, RpcError(ErrorCode.CANCELLED, "cancelled")))

    async def _violation(self, ws: ClientConnection, message: str) -> None:
        """The controller broke the protocol: close with 4400 and reconnect (our close)."""
        self.log.warning("protocol violation by the controller: %s", message)
        self.drop(Failure(f"protocol violation by the controller: {message}"))
        await _close(ws, CloseCode.BAD_REQUEST, message)



async def _close(ws: ClientConnection, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await ws.close(int(code), reason[:120])
