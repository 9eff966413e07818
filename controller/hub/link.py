"""Frames in and out of a bridge's connection (``hub.link``): the ``hello`` that must come
first, decoding within limits (large frames in a worker thread), the reader that feeds the
session and acts on its outcomes, the fast path for small results in the transport's read
callback, and the writer that alone drains the session's frames (docs/design.md §3–4,
docs/protocol.md). What an outcome means for calls, streams and inventories is the hub's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from controller.hub.connection import BridgeSocket, Connection
from controller.hub.entry import BridgeEntry
from protocol.closecodes import CloseCode
from protocol.codec import Codec, event_of, frame_of
from protocol.envelope import PROTOCOL_VERSION, Evt, Hello, Req, Res
from protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    HandshakeRefused,
    InvalidState,
    RpcError,
    UnexpectedFrame,
)
from protocol.session import ACK_BATCH, Completion, Duplicate, Relay, Resume

if TYPE_CHECKING:
    from controller.hub.hub import Hub

__all__ = ["FAST_RESULT_BYTES", "LARGE_FRAME_BYTES", "BridgeLink", "is_disconnect"]

log = logging.getLogger("droidwire.controller.hub")

# Frames larger than this are decoded in a worker thread, at most _LARGE_DECODES at once.
LARGE_FRAME_BYTES = 256 * 1024
_LARGE_DECODES = 2
# Results up to this size may be handled in the read callback (BridgeLink.result_now); larger
# ones are left to the reader.
FAST_RESULT_BYTES = 64 * 1024
# How a ``res`` frame starts as the bridge's encoders write it (a map whose first key is
# ``t``): anything else is left to the reader, without decoding it here first.
_RES_HEAD = b"\xa1t\xa3res"


class BridgeLink:
    """The frame I/O of every bridge connection of one hub."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.codec = Codec(max_frame_bytes=hub.settings.max_frame_bytes)
        self._large_decodes = asyncio.Semaphore(_LARGE_DECODES)

    async def await_hello(self, websocket: BridgeSocket, name: str) -> Hello | None:
        """The first frame of a new connection, if it is a valid ``hello`` of our protocol
        version; else the connection is closed (4400 garbage, 4426 another version, 1013 no
        hello in time, 1001 shutting down) and None returned."""
        code, reason = CloseCode.BAD_REQUEST, ""
        try:
            async with asyncio.timeout(self.hub.settings.handshake_timeout_s):
                message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return None
            data = message.get("bytes")
            if data is None:
                reason = "frames are binary msgpack maps"
            else:
                frame = await self.decode(data)
                if not isinstance(frame, Hello):
                    reason = f"the first frame must be hello, not {frame.t}"
                elif frame.protocol != PROTOCOL_VERSION:
                    code = CloseCode.INCOMPATIBLE
                    reason = (f"bridge speaks protocol {frame.protocol}, controller "
                              f"{PROTOCOL_VERSION}")
                elif self.hub._closing:
                    code, reason = CloseCode.GOING_AWAY, "controller shutting down"
                else:
                    return frame
        except TimeoutError:
            code, reason = CloseCode.TRY_AGAIN_LATER, "no hello in time"
        except DecodeError as exc:
            reason = f"bad hello: {exc}"
        except Exception as exc:
            if not is_disconnect(exc):
                log.warning("bridge %s: handshake failed: %r", name, exc)
            return None
        log.info("bridge %s: connection refused before hello: %s (%s)", name, code, reason)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.hub.settings.close_timeout_s):
                await websocket.close(code, reason[:120])
        return None

    async def decode(self, data: bytes) -> Any:
        """One frame from a bridge: small ones here, large ones in a worker thread (at most
        ``_LARGE_DECODES`` at once), so a 16 MiB frame never stalls the event loop and a crowd
        of them never multiplies its memory (docs/protocol.md, "Limits")."""
        if len(data) <= LARGE_FRAME_BYTES:
            return self.codec.decode(data)
        async with self._large_decodes:
            return await asyncio.to_thread(self.codec.decode, data)

    async def read(self, entry: BridgeEntry, conn: Connection, hello: Hello) -> None:
        """Frames in until the peer goes or a rule is broken (``conn.kick`` says how to close);
        ``hello`` is the first, read and checked already (:meth:`await_hello`)."""
        session = entry.session
        loop = asyncio.get_running_loop()
        first = True
        message: Any = None
        frame: Any = None
        outcome: Any = None
        raw: Any = None
        payload: Any = None
        while True:
            # Nothing of the previous frame stays alive while this waits (for hours, on an
            # idle bridge: the hello, the welcome): about 2.5 KB per idle bridge.
            message = frame = outcome = data = raw = payload = None
            if first:
                frame = hello
                del hello  # not kept for the connection's life (~2 KB per idle bridge)
            else:
                message = await conn.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                if data is None:
                    conn.kick(CloseCode.BAD_REQUEST, "frames are binary msgpack maps")
                    return
                try:
                    if len(data) <= LARGE_FRAME_BYTES:
                        raw = self.codec.decode_raw(data)
                        if raw["t"] == "evt":
                            # The relay's path (a log batch): no frame model, no outcome.
                            channel, seq, payload = event_of(raw)
                            raw = None
                            if entry.conn is not conn:
                                return
                            try:
                                session.event_arrived(loop.time())
                            except UnexpectedFrame as exc:
                                conn.kick(CloseCode.BAD_REQUEST, str(exc))
                                return
                            first = False
                            pending = self.hub._on_event(entry, channel, seq, payload)
                            payload = None
                            if pending is not None:
                                await pending
                            continue
                        frame = frame_of(raw)
                        raw = None
                    else:
                        frame = await self.decode(data)
                except DecodeError as exc:
                    if not self._bad_frame(entry, conn, exc, first):
                        return
                    continue
            if first and isinstance(frame, Hello):
                session.foreign = await self.hub.hooks.foreign(entry, frame)
            if entry.conn is not conn:
                return  # replaced: frames still arriving here are the new connection's business
            try:
                outcome = session.receive(frame, loop.time())
            except HandshakeRefused as exc:
                conn.kick(exc.close_code, str(exc))
                return
            except (UnexpectedFrame, InvalidState) as exc:
                conn.kick(CloseCode.BAD_REQUEST, str(exc))
                return
            first = False
            if isinstance(outcome, Completion):
                self.hub._complete(entry, outcome)
                if entry.conn is conn:
                    self.ack(entry, conn)
            elif isinstance(outcome, Relay):
                self.hub._spawn(self._relay(entry, conn, outcome.res))
            elif isinstance(outcome, Duplicate):
                log.debug("bridge %s: duplicate result %s (acked)", entry.name, outcome.id)
                self.ack(entry, conn)
            elif isinstance(outcome, Evt):  # a large one, decoded in a worker thread
                pending = self.hub._on_event(entry, outcome.channel, outcome.seq, outcome.data)
                if pending is not None:
                    await pending
            elif isinstance(outcome, Resume):
                conn.wake()  # welcome and re-sent requests go first
                await self.hub._on_resume(entry, outcome)
            else:
                conn.wake()  # a pong to the bridge's ping

    def result_now(self, entry: BridgeEntry, conn: Connection, data: bytes) -> bool:
        """A small ``res`` frame, handled in the transport's read callback — the reader task
        is idle with nothing queued (the connection checks that), so the order of frames is
        the same as if it had read it — instead of one more trip through the event loop to
        wake the reader. The same steps as :meth:`read` for a result; False (anything else:
        hello, events, pongs, a frame that does not decode, a large one): the reader reads
        it as usual."""
        if (len(data) > FAST_RESULT_BYTES or data[1:7] != _RES_HEAD or entry.conn is not conn
                or conn.ending or not entry.session.is_open):
            return False  # not a result as our encoders write one (a log batch …): the reader's
        try:
            frame = self.codec.decode(data)
        except DecodeError:
            return False
        if not isinstance(frame, Res):
            return False
        try:
            outcome = entry.session.receive(frame, asyncio.get_running_loop().time())
        except HandshakeRefused as exc:
            conn.kick(exc.close_code, str(exc))
            return True
        except (UnexpectedFrame, InvalidState) as exc:
            conn.kick(CloseCode.BAD_REQUEST, str(exc))
            return True
        except Exception as exc:  # as in the reader: a bug ends the connection, not the loop
            conn.failed(exc)
            return True
        try:
            if isinstance(outcome, Completion):
                self.hub._complete(entry, outcome)
                if entry.conn is conn:
                    self.ack(entry, conn)
            elif isinstance(outcome, Relay):
                self.hub._spawn(self._relay(entry, conn, outcome.res))
            elif isinstance(outcome, Duplicate):
                log.debug("bridge %s: duplicate result %s (acked)", entry.name, outcome.id)
                self.ack(entry, conn)
        except Exception as exc:
            conn.failed(exc)
        return True

    def _bad_frame(
        self, entry: BridgeEntry, conn: Connection, exc: DecodeError, first: bool
    ) -> bool:
        """A frame that did not decode: close 4400 if we cannot tell what it was (or it was
        the first), else fail the one call it answers. True: keep reading."""
        if first or exc.kind is None:
            conn.kick(CloseCode.BAD_REQUEST, str(exc)[:120])
            return False
        log.warning("bridge %s: malformed %s frame: %s", entry.name, exc.kind, exc)
        if exc.kind == "res" and exc.frame_id is not None:
            completion = entry.session.fail(
                exc.frame_id,
                RpcError(ErrorCode.INTERNAL, "the bridge sent a malformed result"),
            )
            if completion is not None:
                self.hub._complete(entry, completion)
                conn.wake()
        return True

    async def write(self, entry: BridgeEntry, conn: Connection) -> None:
        """The only drain of the session's outgoing frames while ``conn`` is current: runs
        while there is something to send (``conn.writer``; see :meth:`Connection.wake`)."""
        # websockets' own connection writes a large payload without joining it to its frame
        # (controller.hub.wsserver.BridgeConnection.send_parts); Starlette's has no such call.
        send_parts = getattr(conn.ws, "send_parts", None)
        try:
            while entry.conn is conn:
                conn.again = False
                acks = conn.ack_due
                conn.ack_due = False
                for frame in entry.session.frames_to_send(acks=acks):
                    try:
                        parts = self.codec.encode_parts(frame) if send_parts else None
                        data = self.codec.encode(frame) if parts is None else b""
                    except (EncodeError, DecodeError) as exc:  # FrameTooLarge: a DecodeError
                        self._unsendable(entry, frame, exc)
                        continue
                    if parts is not None and send_parts is not None:
                        # A tunnel's write: its megabyte goes to the socket as it came.
                        await send_parts(*parts)
                    else:
                        await conn.ws.send_bytes(data)
                if not conn.again:
                    return
        finally:
            # In the same step as the last check of ``again`` (one drain at a time): a wake
            # from now on starts a new one.
            conn.writer = None

    def ack(self, entry: BridgeEntry, conn: Connection) -> None:
        if entry.session.acks_waiting >= ACK_BATCH:
            conn.stop_timers()
            conn.ack_due = True
            conn.wake()
        else:
            conn.ack_soon()

    async def _relay(self, entry: BridgeEntry, conn: Connection, res: Res) -> None:
        """A held result for a wait elsewhere in the cluster: acked once it reached it."""
        try:
            reached = await self.hub.hooks.relay(entry, res)
        except Exception:
            log.exception("bridge %s: relaying result %s failed", entry.name, res.id)
            return
        if reached and entry.conn is conn:
            entry.session.ack(res.id)
            self.ack(entry, conn)

    def _unsendable(self, entry: BridgeEntry, frame: Any, exc: Exception) -> None:
        log.warning("bridge %s: cannot send %s frame: %s", entry.name, frame.t, exc)
        if isinstance(frame, Req):
            completion = entry.session.fail(
                frame.id, RpcError(ErrorCode.BAD_REQUEST, f"request cannot be sent: {exc}")
            )
            if completion is not None:
                self.hub._complete(entry, completion)


def is_disconnect(exc: BaseException) -> bool:
    """A send or receive on a socket that is already gone: the normal end, not a failure."""
    from starlette.websockets import WebSocketDisconnect

    return isinstance(exc, WebSocketDisconnect | RuntimeError | OSError)
