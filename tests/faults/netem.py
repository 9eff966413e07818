"""A loopback TCP proxy with the faults of a bad network, for a bridge ↔ controller link.

Faults on the connections open *now* (new connections flow normally, so a bridge that notices
can come back):

* :meth:`FaultProxy.cut` — reset both sides at once (RST, no close frame);
* :meth:`FaultProxy.blackhole` — keep both sockets open and discard every byte, both ways
  (a route that went nowhere: only keepalive can notice);
* :meth:`FaultProxy.stall` — keep both sockets open and stop reading (bytes pile up in kernel
  buffers: a frozen peer);
* :meth:`FaultProxy.half_open` — reset the controller's side only; the bridge's side stays
  open and silent (the controller rebooted behind a NAT);

and on every connection while set: ``delay_s`` latency per chunk, ``rate_bps`` a bandwidth
cap per direction. Everything runs on the caller's event loop; ``connections`` counts accepted
connections.

(``tests/e2e/proxy.py`` has cut / stall / hold for the e2e suite; this one adds blackhole,
half-open and bandwidth, and stays self-contained for the fault suite.)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum

from device_bridge.sim.listener import StreamListener

__all__ = ["FaultProxy"]

_CHUNK = 16 * 1024


class _Mode(enum.Enum):
    FLOW = "flow"
    BLACKHOLE = "blackhole"
    STALL = "stall"


class _Link:
    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.mode = _Mode.FLOW
        self.unstalled = asyncio.Event()
        self.unstalled.set()
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.delay_s = 0.0
        self.rate_bps: float | None = None
        self.connections = 0
        self.port = 0
        self._links: set[_Link] = set()
        self._server: StreamListener | None = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    async def __aenter__(self) -> FaultProxy:
        self._server = await StreamListener.open(self._accept, self.host, 0)
        self.port = self._server.port
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        if self._server is not None:
            await self._server.close()

    # -- faults on the open connections

    def cut(self) -> int:
        links = list(self._links)
        for link in links:
            link.abort()
        self._links.clear()
        return len(links)

    def blackhole(self) -> int:
        for link in self._links:
            link.mode = _Mode.BLACKHOLE
        return len(self._links)

    def stall(self) -> int:
        for link in self._links:
            link.mode = _Mode.STALL
            link.unstalled.clear()
        return len(self._links)

    def half_open(self) -> int:
        for link in self._links:
            link.mode = _Mode.BLACKHOLE
            if link.upstream is not None:
                link.upstream.transport.abort()
        return len(self._links)

    def open_links(self) -> int:
        return len(self._links)

    # -- plumbing

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
            link.upstream = up_writer
            link.tasks = [
                asyncio.create_task(self._pump(link, reader, up_writer)),
                asyncio.create_task(self._pump(link, up_reader, writer)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._links.discard(link)
            link.abort()

    async def _pump(
        self, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        while True:
            await link.unstalled.wait()  # a stalled link reads nothing: the sender's buffers fill
            try:
                data = await src.read(_CHUNK)
            except OSError:
                data = b""
            await link.unstalled.wait()  # stalled while this chunk was read: hold it forever
            if link.mode is _Mode.BLACKHOLE:
                if not data:
                    await asyncio.Event().wait()  # stays open and silent until aborted
                continue
            if not data:
                with contextlib.suppress(OSError):
                    dst.write_eof()
                return
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.rate_bps:
                await asyncio.sleep(len(data) / self.rate_bps)
            dst.write(data)
            await dst.drain()
