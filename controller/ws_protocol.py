"""uvicorn's sans-I/O websockets protocol, with flow control by the bytes queued.

uvicorn (0.54) stops reading a WebSocket after *every* message it queues for the app and
starts again when the app has taken it: two ``epoll_ctl`` system calls per message, about a
tenth of a bridge's RPC round trip (docs/benchmarks.md). This subclass stops reading only when
the messages waiting for the app add up to :data:`QUEUE_HIGH_BYTES` (or
:data:`QUEUE_HIGH_MESSAGES`), and starts again, as uvicorn does, once the app has taken them
all. Memory per connection stays bounded: reading stops in the read that crosses the budget,
and the messages that read completes are queued as uvicorn queues them, so the queue holds
less than the budget plus one message of at most ``ws_max_size`` plus one read (asyncio reads
at most :data:`READ_MAX_BYTES` a time, a tunnel's WebSocket :data:`TUNNEL_READ_BYTES`);
uvicorn's own bound is the same without the budget.

uvicorn takes :class:`RoutingProtocol` as ``ws=`` (see
:func:`droidwire.serve.uvicorn_config`): it serves ``/v1/bridge`` with websockets' own
server connection (:mod:`controller.hub.wsserver`) and every other WebSocket with
:class:`WebSocketProtocol`.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["QUEUE_HIGH_BYTES", "QUEUE_HIGH_MESSAGES", "READ_MAX_BYTES", "TUNNEL_READ_BYTES",
           "RoutingProtocol", "WebSocketProtocol", "is_tunnel_upgrade"]

QUEUE_HIGH_BYTES = 1 << 20
QUEUE_HIGH_MESSAGES = 64
READ_MAX_BYTES = 256 * 1024  # what asyncio's socket transport asks one recv() for
# … and on a tunnel's WebSocket, whose client frames are up to 1 MiB (docs/tunnel.md): one or
# two reads each instead of four or five, each a pass through the event loop and the parser.
TUNNEL_READ_BYTES = 1 << 20
_TUNNEL_TARGET = re.compile(rb"/v1/devices/[^/?]+/tunnel(?:\?.*)?")


def _size(message: Any) -> int:
    body = message.get("bytes") or message.get("text") or b""
    return len(body)


class WebSocketProtocol(WebSocketsSansIOProtocol):
    queued_bytes = 0

    def send_receive_event_to_app(self) -> None:
        before = self.queue.qsize()
        size = sum(len(frame) for frame in self.frames)
        paused = self.read_paused
        self.read_paused = True  # uvicorn pauses unless it believes it already has
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = paused
        if self.queue.qsize() > before:
            self.queued_bytes += size
        over = (self.queued_bytes >= QUEUE_HIGH_BYTES
                or self.queue.qsize() >= QUEUE_HIGH_MESSAGES)
        if over and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    async def receive(self) -> Any:
        message = await super().receive()  # resumes reading once the queue is empty
        if self.queue.empty():
            self.queued_bytes = 0
        else:  # a text message counts its UTF-8 bytes in and its characters out: never below 0
            self.queued_bytes = max(0, self.queued_bytes - _size(message))
        return message


class RoutingProtocol(asyncio.Protocol):
    """uvicorn's ``ws=`` protocol: picks the real one from the upgrade request's path.

    uvicorn builds it with the connection's transport, replays the request it parsed into
    :meth:`data_received`, then makes it the transport's protocol. A ``/v1/bridge`` request
    goes to a :class:`controller.hub.wsserver.BridgeConnection` (when the app is the
    controller's), anything else to :class:`WebSocketProtocol`; from then on this object only
    passes the transport's calls on (one call per read).
    """

    __slots__ = ("app_state", "config", "inner", "server_state", "transport")

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: Any = None) -> None:
        self.config = config
        self.server_state = server_state
        self.app_state = app_state
        self.transport: Any = None
        self.inner: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            inner = self.inner = self._choose(data)
            inner.connection_made(self.transport)
        inner.data_received(data)

    def _choose(self, request_head: bytes) -> asyncio.Protocol:
        from controller.hub.wsserver import BridgeServer, is_bridge_upgrade

        app = self.config.app
        # The controller's app: its lifespan published its services (controller.services).
        if is_bridge_upgrade(request_head) and hasattr(getattr(app, "state", None), "services"):
            bridges = getattr(self.server_state, "droidwire_bridges", None)
            if bridges is None or bridges.app is not app:
                bridges = BridgeServer(app, self.server_state)
                self.server_state.droidwire_bridges = bridges
            return bridges.connection()
        if is_tunnel_upgrade(request_head) and hasattr(self.transport, "max_size"):
            self.transport.max_size = TUNNEL_READ_BYTES
        return WebSocketProtocol(config=self.config, server_state=self.server_state,
                                 app_state=self.app_state)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


def is_tunnel_upgrade(request_head: bytes) -> bool:
    """Whether the HTTP request starting ``request_head`` is for a tunnel's WebSocket
    (``/v1/devices/{device}/tunnel``, as uvicorn replays the request line)."""
    line_end = request_head.find(b"\r\n")
    parts = request_head[: line_end if line_end >= 0 else len(request_head)].split(b" ")
    return len(parts) == 3 and _TUNNEL_TARGET.fullmatch(parts[1]) is not None
