"""uvicorn's sans-I/O websockets protocol, with flow control by the bytes queued.

uvicorn (0.54) stops reading a WebSocket after *every* message it queues for the app and
starts again when the app has taken it: two ``epoll_ctl`` system calls per message, about a
tenth of a bridge's RPC round trip (docs/benchmarks.md). This subclass stops reading only when
the messages waiting for the app add up to :data:`QUEUE_HIGH_BYTES` (or
:data:`QUEUE_HIGH_MESSAGES`), and starts again, as uvicorn does, once the app has taken them
all. Memory per connection stays bounded: that budget plus one message of at most
``ws_max_size``, where uvicorn's own bound is one message.

uvicorn takes the class as ``ws=`` (see :func:`controller.cli.serve.uvicorn_config`).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["QUEUE_HIGH_BYTES", "QUEUE_HIGH_MESSAGES", "WebSocketProtocol"]

QUEUE_HIGH_BYTES = 1 << 20
QUEUE_HIGH_MESSAGES = 64


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
