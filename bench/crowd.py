"""The load generator's bridges: lightweight protocol clients, many per process.

:class:`BridgeClient` makes the real handshake (``Authorization: Bearer``, subprotocol
``droidwire.v1``, no compression, the protocol's keepalive settings) and the real
``hello``/``welcome``, then answers application pings and nothing else. :class:`BareClient` is
the same loop against a bare websockets server (:mod:`bench.stack`'s ``bare``): one message
echoed in place of ``hello``/``welcome`` (the same number of round trips), then idle. A crowd
of either is opened with :func:`open_crowd` at a bounded concurrency and counted in a
:class:`Tally` (connections, refusals by reason, clients back after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BareClient", "BridgeClient", "Tally", "close_crowd", "open_crowd"]


@dataclass
class Tally:
    """What a crowd of clients did: connections made, refusals (failed attempts) by reason."""

    open: int = 0
    refused: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    late: int = 0  # not open when the ramp's time ran out (stopped, not retried)
    back: int = 0  # (re)connected since :meth:`mark`
    epoch: int = 0
    all_back: asyncio.Event = field(default_factory=asyncio.Event)
    target: int = 0

    def refuse(self, exc: BaseException) -> None:
        self.refused += 1
        reason = type(exc).__name__
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status is not None:
            reason += f" {status}"
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def mark(self, target: int) -> None:
        """Start counting clients that come back (after a restart)."""
        self.epoch += 1
        self.back = 0
        self.target = target
        self.all_back.clear()


class _Client:
    """One reconnecting client: connect, handshake, stay until closed, back off, again."""

    def __init__(self, url: str, tally: Tally, rng: Callable[[], float]) -> None:
        self.url = url
        self.tally = tally
        self.rng = rng
        self.epoch = -1  # the tally epoch of the last successful handshake
        self.task: asyncio.Task[None] | None = None
        self.opened = asyncio.Event()

    async def _open(self) -> Any:  # the connection, handshake done
        raise NotImplementedError

    async def _idle(self, ws: Any) -> None:
        await ws.wait_closed()

    async def run(self, *, reconnect: bool) -> None:
        from protocol.settings import DEFAULTS, backoff

        delays = None
        while True:
            try:
                ws = await self._open()
            except Exception as exc:  # refused, reset, timed out, a bad welcome: all count
                self.tally.refuse(exc)
                if not reconnect:
                    return
                if delays is None:
                    delays = backoff(DEFAULTS, self.rng, quick_first=False)
                await asyncio.sleep(next(delays))
                continue
            delays = None
            self.tally.open += 1
            if self.epoch != self.tally.epoch:
                self.epoch = self.tally.epoch
                self.tally.back += 1
                if self.tally.back >= self.tally.target > 0:
                    self.tally.all_back.set()
            self.opened.set()
            try:
                await self._idle(ws)
            finally:
                self.tally.open -= 1
                await ws.close()
            if not reconnect:
                return
            # The session had opened: the first retry comes quickly (the bridge's policy).
            delays = backoff(DEFAULTS, self.rng)
            await asyncio.sleep(next(delays))

    def start(self, *, reconnect: bool) -> _Client:
        self.task = asyncio.create_task(self.run(reconnect=reconnect))
        return self


class BridgeClient(_Client):
    """A lightweight bridge: the real handshake and hello/welcome, then pongs to pings."""

    def __init__(self, url: str, token: str, tally: Tally, rng: Callable[[], float]) -> None:
        from protocol.codec import Codec
        from protocol.envelope import Hello, new_request_id

        super().__init__(url.rstrip("/") + "/v1/bridge", tally, rng)
        self.token = token
        self.codec = Codec()
        self.hello = self.codec.encode(Hello(session=new_request_id(), software="bench"))

    async def _open(self) -> Any:
        from websockets.asyncio.client import connect

        from protocol.envelope import SUBPROTOCOL, Welcome
        from protocol.settings import DEFAULTS

        ws = await connect(
            self.url, subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers={"Authorization": f"Bearer {self.token}"},
            compression=None, max_size=DEFAULTS.max_frame_bytes,
            ping_interval=DEFAULTS.ping_interval_s, ping_timeout=DEFAULTS.ping_timeout_s,
            close_timeout=DEFAULTS.close_timeout_s, open_timeout=DEFAULTS.handshake_timeout_s,
        )
        try:
            await ws.send(self.hello)
            async with asyncio.timeout(DEFAULTS.handshake_timeout_s):
                raw = await ws.recv()
                if not isinstance(raw, bytes):
                    raise RuntimeError("expected a binary welcome frame")
                frame = self.codec.decode(raw)
            if not isinstance(frame, Welcome):
                raise RuntimeError(f"expected welcome, got {frame.t}")
        except BaseException:
            await ws.close()
            raise
        return ws

    async def _idle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        from protocol.envelope import Ping, Pong

        with contextlib.suppress(ConnectionClosed):
            async for data in ws:
                frame = self.codec.decode(data)
                if isinstance(frame, Ping):
                    await ws.send(self.codec.encode(Pong(id=frame.id)))


class BareClient(_Client):
    """A bare websockets client: one echoed message (as hello/welcome), then idle."""

    HELLO = secrets.token_bytes(120)  # about the size of our hello

    async def _open(self) -> Any:
        from websockets.asyncio.client import connect

        from protocol.settings import DEFAULTS

        ws = await connect(
            self.url, compression=None, max_size=DEFAULTS.max_frame_bytes,
            ping_interval=DEFAULTS.ping_interval_s, ping_timeout=DEFAULTS.ping_timeout_s,
            close_timeout=DEFAULTS.close_timeout_s, open_timeout=DEFAULTS.handshake_timeout_s,
        )
        try:
            await ws.send(self.HELLO)
            async with asyncio.timeout(DEFAULTS.handshake_timeout_s):
                await ws.recv()
        except BaseException:
            await ws.close()
            raise
        return ws


async def open_crowd(clients: list[_Client], *, reconnect: bool, concurrency: int = 100,
                     timeout_s: float | None = None) -> int:
    """Start ``clients`` at most ``concurrency`` handshakes at a time; return when each has
    opened once or given up (without ``reconnect``), or when ``timeout_s`` (default: a minute
    plus 50 ms a client) has passed: clients not open by then are stopped and counted (the
    return value)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(client: _Client) -> None:
        async with gate:
            client.start(reconnect=reconnect)
            assert client.task is not None
            opened = asyncio.create_task(client.opened.wait())
            try:
                await asyncio.wait({opened, client.task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                opened.cancel()

    if not clients:
        return 0
    limit = 60.0 + 0.05 * len(clients) if timeout_s is None else timeout_s
    waiters = [asyncio.create_task(one(c)) for c in clients]
    _, pending = await asyncio.wait(waiters, timeout=limit)
    for waiter in pending:
        waiter.cancel()
    late = [c for c in clients if not c.opened.is_set() and c.task is not None
            and not c.task.done()] + [c for c in clients if c.task is None]
    for client in late:
        if client.task is not None:
            client.task.cancel()
    await asyncio.gather(*pending, *(c.task for c in late if c.task is not None),
                         return_exceptions=True)
    return len(late)


async def close_crowd(clients: list[_Client]) -> None:
    tasks = [c.task for c in clients if c.task is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
