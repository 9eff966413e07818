"""The reverse link's figures (docs/design.md §9), each against a bare websockets baseline measured
in the same run on the same loopback:

* ``rpc_rtt_p50`` / ``rpc_rtt_p99``: a ``ping`` RPC with a 200-byte payload from inside the
  controller (``Hub.call``) to a real bridge and back, sequential — against a bare websockets
  client/server echo of the same payload (one hop each way, like the link);
* ``logcat_lines_per_s``: logcat batches (100 lines) from the bridge's link to a consumer of
  the controller's stream — against a bare websockets stream of the same msgpack batches.

Controller (real uvicorn, SQLite in a temporary directory) and bridge (the real
``device_bridge.bridge.Bridge``, no adb) run in this process on one event loop, as do both
ends of the baselines, so the ratios compare the software, not the machine. Each figure is the
median of ``REPEATS`` interleaved repetitions (baseline, link, baseline, link, …).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import uvicorn
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from bench.common import figure, median, percentile
from bench.stack import noted
from controller.services import services_of
from protocol.methods import PING, LogBatch, PingParams

__all__ = ["run"]

PAYLOAD = secrets.token_bytes(200)
LINE = "11-30 10:00:00.000  1234  1234 I BenchTag: a logcat line of ordinary length, {i}"
BATCH = 100
REPEATS = 5


@contextlib.asynccontextmanager
async def _controller_and_bridge() -> AsyncIterator[tuple[Any, Any]]:
    """A controller on uvicorn and a bridge connected to it: (hub, bridge)."""
    from controller.config import ControllerConfig
    from device_bridge.bridge import Bridge
    from device_bridge.config import load_host_config
    from droidwire.serve import uvicorn_config

    admin = "bench-" + secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        config = ControllerConfig(db_url=f"sqlite:///{Path(tmp) / 'c.db'}", bootstrap_token=admin)
        # Served as `droidwire controller` serves (its uvicorn options, its WebSocket protocol).
        uv = uvicorn_config(config, log_level="warning", log_config=None)
        app: Any = uv.app  # the ControllerApp uvicorn_config made
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
        # accepted sockets inherit it (without it, Nagle adds ~40 ms to small frames).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uv)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {admin}"}
            ) as http:
                created = await http.post("/v1/tokens", json={"kind": "bridge", "name": "bench"})
                token = created.json()["token"]
            host = load_host_config(None, {"controller.url": [url]})
            async with Bridge(host, token=token, devices=None, build=None) as bridge:
                await bridge.wait_open()
                yield services_of(app).hub, bridge
        finally:
            server.should_exit = True
            await task
            sock.close()


@contextlib.asynccontextmanager
async def _bare_server(handler: Any) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


async def _echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


async def _rtt_baseline(n: int) -> list[float]:
    samples: list[float] = []
    async with _bare_server(_echo) as url, connect(url, compression=None) as ws:
        for _ in range(n):
            started = time.perf_counter()
            await ws.send(PAYLOAD)
            await ws.recv()
            samples.append(time.perf_counter() - started)
    return samples


async def _rtt_link(hub: Any, n: int) -> list[float]:
    [entry] = hub.entries()
    samples: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        result = await hub.call(entry.id, PING, PingParams(payload=PAYLOAD))
        samples.append(time.perf_counter() - started)
        assert result.payload == PAYLOAD
    return samples


def _batches(lines: int) -> list[list[str]]:
    text = [LINE.format(i=i) for i in range(BATCH)]
    return [text] * (lines // BATCH)


async def _stream_baseline(lines: int) -> float:
    done = asyncio.Event()
    received = 0

    async def sink(ws: ServerConnection) -> None:
        nonlocal received
        async for message in ws:
            assert isinstance(message, bytes)
            frame = msgpack.unpackb(message, raw=False)
            received += len(frame["d"]["lines"])
            if received >= lines:
                done.set()

    async with _bare_server(sink) as url, connect(url, compression=None) as ws:
        started = time.perf_counter()
        for seq, batch in enumerate(_batches(lines)):
            d = {"lines": batch, "dropped": 0}
            await ws.send(msgpack.packb({"t": "evt", "ch": "c", "seq": seq, "d": d}))
        await asyncio.wait_for(done.wait(), 120)
        return lines / (time.perf_counter() - started)


async def _stream_link(hub: Any, bridge: Any, lines: int) -> float:
    from controller.hub import LogStream

    [entry] = hub.entries()
    # A fresh channel per repetition: its seq starts at 0 like a real subscription's.
    channel = f"bench-{secrets.token_hex(4)}"
    stream = LogStream(channel=channel, bridge_id=entry.id, serial="bench",
                       max_batches=hub.settings.stream_queue_batches)
    entry.streams[channel] = stream
    received = dropped = 0

    async def consume() -> None:
        nonlocal received, dropped
        while received + dropped < lines:
            chunk = await stream.get()
            received += len(chunk.lines)
            dropped += chunk.dropped

    consumer = asyncio.create_task(consume())
    started = time.perf_counter()
    for batch in _batches(lines):
        if not await bridge.link.emit(channel, LogBatch(lines=batch).to_wire()):
            raise RuntimeError("the link closed during the benchmark")
    await asyncio.wait_for(consumer, 120)
    elapsed = time.perf_counter() - started
    entry.streams.pop(channel, None)
    bridge.link.session.close_channel(channel)
    if dropped:
        raise RuntimeError(f"{dropped} lines dropped by the controller's stream")
    return lines / elapsed


async def _run(quick: bool) -> list[dict[str, Any]]:
    # Medians of REPEATS interleaved repetitions: baseline, link, baseline, link …
    # so a noisy neighbour on a shared machine hits both sides alike.
    pings = 200 if quick else 2000
    lines = 20_000 if quick else 200_000
    base_p50: list[float] = []
    base_p99: list[float] = []
    link_p50: list[float] = []
    link_p99: list[float] = []
    base_rate: list[float] = []
    link_rate: list[float] = []
    async with _controller_and_bridge() as (hub, bridge):
        await _rtt_link(hub, 20)  # warm-up
        for _ in range(REPEATS):
            base = await _rtt_baseline(pings)
            link = await _rtt_link(hub, pings)
            base_p50.append(percentile(base, 50))
            base_p99.append(percentile(base, 99))
            link_p50.append(percentile(link, 50))
            link_p99.append(percentile(link, 99))
            base_rate.append(await _stream_baseline(lines))
            link_rate.append(await _stream_link(hub, bridge, lines))
    ms = 1000.0
    rtt = f"median of {REPEATS} alternating repetitions of {pings} sequential pings"
    rate = f"median of {REPEATS} alternating repetitions of {lines} lines"
    return [
        noted(figure("rpc_rtt_p50", median(link_p50) * ms, "ms", median(base_p50) * ms),
              rtt, n=pings),
        noted(figure("rpc_rtt_p99", median(link_p99) * ms, "ms", median(base_p99) * ms),
              rtt, n=pings),
        noted(figure("logcat_lines_per_s", median(link_rate), "lines/s", median(base_rate)),
              rate, n=lines),
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return asyncio.run(_run(quick))
