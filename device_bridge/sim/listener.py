"""A TCP listener for asyncio streams that closes every connection it ever accepted.

``asyncio.start_server`` has two gaps on Python 3.11 that a device adb keeps reconnecting to
falls into: ``Server.close()`` leaves accepted connections open, and a connection accepted just
before ``close()`` fails ``Server._attach()`` inside asyncio, so its socket and half-built
transport are never closed (a ResourceWarning at the next garbage collection). This listener
accepts in its own reader callback (synchronously, so an accepted socket is always in hand,
never in a future a cancellation could drop) and builds each transport with
``loop.connect_accepted_socket``, which involves no ``Server``; :meth:`StreamListener.close`
stops accepting, then closes what it accepted and waits until each is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

__all__ = ["StreamListener"]

log = logging.getLogger(__name__)

ACCEPT_RETRY_S = 0.1

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class StreamListener:
    """``listener = await StreamListener.open(handler, host, port)``; ``await listener.close()``."""

    def __init__(self, handler: Handler, sock: socket.socket) -> None:
        self._handler = handler
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._accepted: set[socket.socket] = set()  # accepted, no transport made yet
        self._connecting: set[asyncio.Task[None]] = set()
        self._transports: set[asyncio.BaseTransport] = set()
        self._none_open = asyncio.Event()
        self._none_open.set()
        self._closing = False
        self._loop.add_reader(sock.fileno(), self._accept_ready)

    @classmethod
    async def open(cls, handler: Handler, host: str, port: int) -> StreamListener:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
        sock.setblocking(False)
        return cls(handler, sock)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every accepted connection and wait (bounded) until it is."""
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for task in list(self._connecting):
            task.cancel()
        await asyncio.gather(*self._connecting, return_exceptions=True)
        for conn in list(self._accepted):  # a connect task cancelled before it ran
            conn.close()
        self._accepted.clear()
        for transport in list(self._transports):
            transport.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._none_open.wait()

    def _accept_ready(self) -> None:
        """The listening socket is readable: take every connection waiting in its backlog."""
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: asyncio's own server waits too
                log.warning("listener on port %d: accept failed (%s); retrying", self.port, exc)
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._resume_accepting)
                return
            conn.setblocking(False)
            self._accepted.add(conn)
            task = self._loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _resume_accepting(self) -> None:
        if not self._closing:
            self._loop.add_reader(self._sock.fileno(), self._accept_ready)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: _Protocol(self), conn)
        except asyncio.CancelledError:
            conn.close()  # its transport, if made, was closed by asyncio
            raise
        except OSError:
            conn.close()  # the peer left before we got to it
        finally:
            self._accepted.discard(conn)

    def _made(self, transport: asyncio.BaseTransport) -> None:
        self._transports.add(transport)
        self._none_open.clear()
        if self._closing:
            transport.close()

    def _lost(self, transport: asyncio.BaseTransport) -> None:
        self._transports.discard(transport)
        if not self._transports:
            self._none_open.set()


class _Protocol(asyncio.StreamReaderProtocol):
    def __init__(self, listener: StreamListener) -> None:
        super().__init__(asyncio.StreamReader(), listener._handler)
        self._listener = listener
        self._made_with: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made_with = transport
        self._listener._made(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._made_with is not None:
            self._listener._lost(self._made_with)
        super().connection_lost(exc)
