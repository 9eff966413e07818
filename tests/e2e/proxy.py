"""A loopback TCP proxy that can cut, stall (half-open) and delay the path between a bridge
and the controller, and be pointed at another upstream (a restarted controller).

* :meth:`Proxy.cut` aborts every open connection (both sides get a reset, no close frame);
* :meth:`Proxy.stall` freezes the open connections: sockets stay open, no byte moves in
  either direction — what a dead NAT mapping or a pulled cable looks like to both ends.
  New connections flow normally, so a bridge that notices can come back;
* :meth:`Proxy.hold` makes new connections wait (accepted, not forwarded) until
  :meth:`Proxy.release` — a controller that is unreachable for a while;
* ``delay_s`` adds latency to every chunk forwarded.

Everything runs on the caller's event loop; ``connections`` counts accepted connections and
``accepted`` is set on each one (tests wait on it instead of sleeping).
"""

from __future__ import annotations

import asyncio
import contextlib

from device_bridge.sim.listener import StreamListener

__all__ = ["Proxy"]

_CHUNK = 64 * 1024


class _Pipe:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer


class _Link:
    """One proxied connection: client side, upstream side, and whether it is frozen."""

    def __init__(self, client: _Pipe) -> None:
        self.client = client
        self.upstream: _Pipe | None = None
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for pipe in (self.client, self.upstream):
            if pipe is not None:
                pipe.writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class Proxy:
    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.delay_s = 0.0
        self.connections = 0
        self.accepted = asyncio.Event()
        self._links: set[_Link] = set()
        self._open = asyncio.Event()
        self._open.set()
        self._server: StreamListener | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> Proxy:
        self._server = await StreamListener.open(self._accept, self.host, 0)
        self.port = self._server.port
        return self

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            await self._server.close()

    async def __aenter__(self) -> Proxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- faults

    def cut(self) -> None:
        """Reset every open connection."""
        for link in list(self._links):
            link.abort()
        self._links.clear()

    def stall(self) -> None:
        """Freeze every open connection (half-open); new ones still flow."""
        for link in self._links:
            link.flowing.clear()

    def hold(self) -> None:
        """New connections are accepted but wait, unforwarded, until :meth:`release`."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def retarget(self, upstream_port: int) -> None:
        """New connections go to ``upstream_port`` (a restarted controller)."""
        self.upstream_port = upstream_port

    # -- plumbing

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.accepted.set()
        link = _Link(_Pipe(reader, writer))
        self._links.add(link)
        try:
            await self._open.wait()
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
            link.upstream = _Pipe(up_reader, up_writer)
            link.tasks = [
                asyncio.create_task(self._pump(link, link.client, link.upstream)),
                asyncio.create_task(self._pump(link, link.upstream, link.client)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._links.discard(link)
            link.abort()

    async def _pump(self, link: _Link, src: _Pipe, dst: _Pipe) -> None:
        while True:
            data = await src.reader.read(_CHUNK)
            await link.flowing.wait()  # a stalled link holds the bytes forever
            if not data:
                with contextlib.suppress(OSError):
                    dst.writer.write_eof()
                return
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            dst.writer.write(data)
            await dst.writer.drain()
