"""The controller's WebSocket protocol: uvicorn's, paused by the bytes queued for the app rather
than after every message; a real uvicorn server and a real websockets client on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import connect

from controller.ws_protocol import QUEUE_HIGH_BYTES, READ_MAX_BYTES, WebSocketProtocol
from tests.conftest import TIME_SCALE
from tests.faults.timing import wait_until

WAIT_S = 10 * TIME_SCALE


class App:
    """Accepts, takes no message until ``reading`` is set, then answers how many it took
    (when ``answer``)."""

    def __init__(self, *, answer: bool = True) -> None:
        self.answer = answer
        self.reading = asyncio.Event()
        self.taken: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await self.reading.wait()
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            body = message.get("bytes")
            self.taken.append(body if body is not None else message["text"].encode())
            if self.answer:
                await send({"type": "websocket.send", "text": str(len(self.taken))})


@contextlib.asynccontextmanager
async def served(app: App) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(
        app, ws=WebSocketProtocol, lifespan="off", log_level="warning", log_config=None,
        ws_per_message_deflate=False, timeout_graceful_shutdown=WAIT_S,
    ))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await wait_until(lambda: server.started, "uvicorn started", WAIT_S)
        yield f"ws://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        await task
        sock.close()


def the_protocol(server: uvicorn.Server) -> WebSocketProtocol:
    [protocol] = server.server_state.connections
    assert isinstance(protocol, WebSocketProtocol)
    return protocol


async def test_small_messages_do_not_pause_reading() -> None:
    app = App()
    app.reading.set()
    async with served(app) as (url, server), connect(url, compression=None) as ws:
        for i in range(1, 51):
            await ws.send(b"x" * 200)
            assert await ws.recv() == str(i)
            protocol = the_protocol(server)
            assert not protocol.read_paused and protocol.queued_bytes == 0
        assert len(app.taken) == 50


async def test_reading_pauses_at_the_byte_budget_and_nothing_is_lost() -> None:
    app = App(answer=False)
    size = 64 * 1024
    count = 3 * QUEUE_HIGH_BYTES // size  # three budgets' worth, more than the socket buffers
    async with served(app) as (url, server), connect(url, compression=None) as ws:
        sender = asyncio.create_task(_send_numbered(ws, count, size))
        protocol: WebSocketProtocol | None = None

        def paused() -> bool:
            nonlocal protocol
            protocol = the_protocol(server) if server.server_state.connections else None
            return protocol is not None and protocol.read_paused

        await wait_until(paused, "reading paused", WAIT_S)
        assert protocol is not None
        # Reading stops in the read that crossed the budget; the messages that read completed
        # are queued too (a read is at most READ_MAX_BYTES), and nothing after them.
        at_pause = protocol.queued_bytes
        assert QUEUE_HIGH_BYTES <= at_pause < QUEUE_HIGH_BYTES + size + READ_MAX_BYTES
        # Whether the rest fits in the kernel's buffers or the sender blocks on them, it waits
        # there and not in the queue: give it the time to arrive if reading went on.
        await asyncio.wait({sender}, timeout=0.5)
        assert protocol.read_paused
        assert protocol.queued_bytes == at_pause
        assert protocol.queue.qsize() * size == protocol.queued_bytes
        app.reading.set()
        await asyncio.wait_for(sender, WAIT_S)
        await wait_until(lambda: len(app.taken) == count, "all taken", WAIT_S)
        assert [int.from_bytes(m[:4], "big") for m in app.taken] == list(range(count))
        assert not protocol.read_paused and protocol.queued_bytes == 0


async def _send_numbered(ws: Any, count: int, size: int) -> None:
    for i in range(count):
        await ws.send(i.to_bytes(4, "big") + b"y" * (size - 4))


@pytest.mark.parametrize("text", ["ascii", "ünïcödé ✓"])
async def test_text_messages_are_counted_and_released(text: str) -> None:
    app = App()
    app.reading.set()
    async with served(app) as (url, server), connect(url, compression=None) as ws:
        for i in range(1, 4):
            await ws.send(text)
            assert await ws.recv() == str(i)
            assert the_protocol(server).queued_bytes == 0
        assert app.taken == [text.encode()] * 3
