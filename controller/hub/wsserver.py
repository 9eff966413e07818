"""``/v1/bridge`` on websockets' own server connection, on the controller's port.

The HTTP API (and every other WebSocket route) stays on FastAPI/uvicorn; a bridge's WebSocket
does not go through ASGI at all. uvicorn parses the HTTP request of every connection as
usual; when it is a WebSocket upgrade it hands the connection to its ``ws=`` protocol class,
which here is :class:`controller.ws_protocol.RoutingProtocol`: it reads the request's path
and gives a ``/v1/bridge`` upgrade to a :class:`BridgeConnection` — a websockets
:class:`~websockets.asyncio.server.ServerConnection`, the same code as the bare websockets
server the benchmarks compare against — and anything else to uvicorn's own protocol.

Why: the ASGI hand-off cost a bridge's round trip one extra event-loop wake-up per frame
(uvicorn queues each message for the app, the app's task then wakes the caller), plus
uvicorn's and Starlette's per-message work, and it kept uvicorn's per-connection objects
alive for an idle bridge's whole life (docs/benchmarks.md).

What stays the same as the ASGI endpoint (:mod:`controller.hub.endpoint`, still used when
the app runs on another server, e.g. Starlette's test client):

* the refusals before the socket opens, by the same functions and the app's own exception
  handlers: HTTP 401 (missing, unknown or revoked token; ``WWW-Authenticate``), 403 (not a
  bridge token), 400 (no ``droidwire.v1`` subprotocol, a token in the URL), with the same
  JSON body; the token is read from the ``Authorization`` header only;
* the subprotocol ``droidwire.v1``, no compression, ``max_size`` = the protocol's frame cap,
  websockets' keepalive with the settings' interval and timeout, the settings' close timeout;
* reading pauses once the frames waiting for the hub reach :data:`QUEUE_HIGH_BYTES` or
  :data:`QUEUE_HIGH_MESSAGES` and resumes when the hub has taken them all — the bound
  :class:`controller.ws_protocol.WebSocketProtocol` keeps on uvicorn's side;
* a server shutdown closes open bridges with 1012 (service restart) as uvicorn does, and
  uvicorn waits for their tasks like for its own.

The hub sees a :class:`BridgeConnection` through the three methods it uses on any socket
(``receive``, ``send_bytes``, ``close``: :class:`controller.hub.connection.BridgeSocket`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import struct
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.requests import HTTPConnection
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.messages import Assembler
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, ProtocolError
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import OPEN, Event, State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from controller.auth.http import current_bridge, current_principal
from controller.auth.tokens import Unauthenticated
from controller.services.container import services_of
from protocol.envelope import SUBPROTOCOL
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "QUEUE_HIGH_BYTES",
    "QUEUE_HIGH_MESSAGES",
    "BridgeConnection",
    "BridgeServer",
    "is_bridge_upgrade",
]

log = logging.getLogger("droidwire.controller.hub")

QUEUE_HIGH_BYTES = 1 << 20
QUEUE_HIGH_MESSAGES = 64

_BRIDGE_PATH = b"/v1/bridge"
_DATA = operator.attrgetter("data")
_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error",
            503: "Service Unavailable"}


def is_bridge_upgrade(request_head: bytes) -> bool:
    """Whether the HTTP request starting ``request_head`` is for ``/v1/bridge`` (any query).

    uvicorn replays the request line as it received it; the path is compared percent-decoded,
    as Starlette routes it (``root_path`` is not part of the request line)."""
    line_end = request_head.find(b"\r\n")
    line = request_head[: line_end if line_end >= 0 else len(request_head)]
    parts = line.split(b" ")
    if len(parts) != 3:
        return False
    target = parts[1].split(b"?", 1)[0]
    if target == _BRIDGE_PATH:
        return True
    return b"%" in target and unquote(target.decode("latin-1")) == "/v1/bridge"


class _FrameQueue(Assembler):
    """websockets' message assembler, paused by the bytes queued (not only by frames)."""

    def maybe_pause(self) -> None:
        if self.paused:
            return
        queue = self.frames.queue
        # The bytes summed in C (map, attrgetter): no Python step per queued frame, on every
        # frame received.
        if len(queue) >= QUEUE_HIGH_MESSAGES or (
            sum(map(len, map(_DATA, queue))) >= QUEUE_HIGH_BYTES
        ):
            self.paused = True
            self.pause()

    def maybe_resume(self) -> None:
        if self.paused and not self.frames.queue:
            self.paused = False
            self.resume()


class BridgeServer:
    """What every :class:`BridgeConnection` of one uvicorn server shares: the app, uvicorn's
    server state (its connections and tasks, so shutdown treats bridges as its own), and
    what ``websockets`` asks of a server (``handler``, ``handler_tasks``, ``is_serving``)."""

    def __init__(self, app: Any, server_state: Any) -> None:
        self.app = app
        self.connections: set[Any] = server_state.connections
        self.handler_tasks: set[asyncio.Task[Any]] = server_state.tasks
        self.serving = True

    def is_serving(self) -> bool:
        return self.serving

    def connection(self) -> BridgeConnection:
        settings = self.app.state.config.settings
        protocol = ServerProtocol(
            subprotocols=[Subprotocol(SUBPROTOCOL)],
            extensions=None,  # no permessage-deflate
            max_size=settings.max_frame_bytes,
            logger=log,
        )
        return BridgeConnection(
            protocol,
            self,
            ping_interval=settings.ping_interval_s,
            ping_timeout=settings.ping_timeout_s,
            close_timeout=settings.close_timeout_s,
            max_queue=(QUEUE_HIGH_MESSAGES, 0),
        )

    async def handler(self, conn: BridgeConnection) -> None:
        """The connection's one task: the opening handshake, then the hub's reader."""
        try:
            settings = self.app.state.config.settings
            principal = None
            try:
                async with asyncio.timeout(settings.handshake_timeout_s):
                    await conn.handshake(self.process_request, None, None)
                principal = conn.principal
            except Exception:
                log.debug("bridge handshake failed", exc_info=True)
            if principal is None or conn.protocol.state is not OPEN:
                conn.transport.abort()
                return
            # The handshake's response (its headers) is not read again, and an idle bridge
            # holds its connection for hours (docs/benchmarks.md). (The request stays:
            # websockets' frame parser holds it anyway.)
            conn.response = None
            conn.start_keepalive()
            try:
                async with conn:  # closes the socket on the way out, whatever happened
                    await services_of(self.app).hub.serve(conn, principal)
            except Exception:
                log.exception("bridge connection handler failed")
        finally:
            task = asyncio.current_task()
            if task is not None:
                self.handler_tasks.discard(task)


    async def process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        path, _, query = request.path.partition("?")
        offered = [
            p.strip()
            for value in request.headers.get_all("Sec-WebSocket-Protocol")
            for p in value.split(",")
        ]
        scope: dict[str, Any] = {
            "type": "websocket",
            "app": self.app,
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in request.headers.raw_items()
            ],
            "subprotocols": offered,
            # Refusals are answered as HTTP responses (what _problem() checks for).
            "extensions": {"websocket.http.response": {}},
        }
        connection = HTTPConnection(scope)
        try:
            principal = await current_bridge(await current_principal(connection))
            if SUBPROTOCOL not in offered:
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"the bridge endpoint speaks the {SUBPROTOCOL} subprotocol only",
                    {"rule": "subprotocol"},
                )
        except (RpcError, Unauthenticated) as exc:
            return await self._refusal(connection, exc)
        assert isinstance(conn, BridgeConnection)
        conn.principal = principal
        return None

    async def _refusal(self, connection: HTTPConnection, exc: Exception) -> Response:
        """The app's exception handler's response for ``exc``, as websockets sends it."""
        handlers = self.app.exception_handlers
        handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
        if handler is None:
            raise exc
        answer = await handler(connection, exc)
        headers = Headers()
        for name, value in answer.raw_headers:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        headers["Connection"] = "close"
        status = int(answer.status_code)
        return Response(status, _REASONS.get(status, "Error"), headers, bytes(answer.body))


class BridgeConnection(ServerConnection):
    """One bridge's WebSocket: websockets' server connection, plus the socket interface the
    hub uses (``receive`` → an ASGI-style message, ``send_bytes``; ``close`` is websockets')
    and what uvicorn asks of its connections (``shutdown``)."""

    # Slots, not the instance dict: three more keys in websockets' large instance dict made
    # it grow, about 1.8 KB per idle bridge (docs/benchmarks.md).
    __slots__ = ("bridges", "frame_hook", "principal")

    def __init__(self, protocol: ServerProtocol, server: BridgeServer, **kwargs: Any) -> None:
        self.principal: Any = None  # the token's principal, once the handshake checked it
        # Set by the hub (Hub.serve): a binary frame handled in the read callback when the
        # hub's reader is idle; True when it was (see BridgeLink.result_now).
        self.frame_hook: Callable[[bytes], bool] | None = None
        self.bridges = server
        super().__init__(protocol, server, **kwargs)  # type: ignore[arg-type]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # starts BridgeServer.handler in a task
        queue = self.recv_messages
        self.recv_messages = _FrameQueue(
            queue.high, queue.low, pause=queue.pause, resume=queue.resume
        )
        self.bridges.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.bridges.connections.discard(self)
        super().connection_lost(exc)

    def process_event(self, event: Event) -> None:
        hook = self.frame_hook
        if (hook is not None and isinstance(event, Frame) and event.opcode is Opcode.BINARY
                and event.fin):
            queue = self.recv_messages
            # Only while the reader waits with nothing queued: frames stay in order.
            if queue.get_in_progress and not queue.frames.queue and not queue.paused:
                data = event.data
                if hook(data if isinstance(data, bytes) else bytes(data)):
                    return
        super().process_event(event)

    def shutdown(self) -> None:
        """uvicorn is stopping: close with 1012 (service restart), as uvicorn closes its own
        WebSockets; a handshake in progress is dropped (the bridge retries either way)."""
        if self.protocol.state is OPEN:
            with contextlib.suppress(Exception):
                self.protocol.send_close(1012)
                self.send_data()
        if self.protocol.state is not State.CLOSED:
            self.transport.close()

    async def receive(self) -> dict[str, Any]:
        try:
            data = await self.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            return {"type": "websocket.disconnect", "code": code}
        if isinstance(data, bytes):
            return {"type": "websocket.receive", "bytes": data}
        return {"type": "websocket.receive", "text": data}

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.send(data)
        except ConnectionClosed as exc:
            raise WebSocketDisconnect(exc.rcvd.code if exc.rcvd is not None else 1006) from None

    async def send_parts(self, head: bytes, payload: memoryview) -> None:
        """One binary message, ``head + payload`` (``payload`` a byte view), written without
        joining the two: the frame's header and ``head`` in one write, then ``payload`` as it
        is (a megabyte a tunnel's write carries, no copy of it on its way to the socket).
        websockets' ``send`` would copy it twice (into the frame, then into the frame's bytes).
        The same checks and flow control as ``send``: after any fragmented message, inside its
        send context (the connection open, what websockets queued written first, the transport
        drained after). The frame is a plain one (RSV1 clear), valid with or without an
        extension (none is negotiated: no compression)."""
        try:
            while self.send_in_progress is not None:
                await asyncio.shield(self.send_in_progress)
            async with self.send_context():
                if self.protocol.expect_continuation_frame:
                    raise ProtocolError("expected a continuation frame")
                self.send_data()  # what websockets queued (a pong …) goes first
                self.transport.write(_binary_frame_header(len(head) + payload.nbytes) + head)
                self.transport.write(payload)
        except ConnectionClosed as exc:
            raise WebSocketDisconnect(exc.rcvd.code if exc.rcvd is not None else 1006) from None


def _binary_frame_header(size: int) -> bytes:
    """A server's unmasked, final binary frame's header for a payload of ``size`` bytes
    (RFC 6455 §5.2), as websockets' ``Frame.serialize`` writes it."""
    if size < 126:
        return struct.pack("!BB", 0x82, size)
    if size < 1 << 16:
        return struct.pack("!BBH", 0x82, 126, size)
    return struct.pack("!BBQ", 0x82, 127, size)
