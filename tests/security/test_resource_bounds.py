"""Bounded resources against a real controller process (docs/security.md, "Bounds and secrets").

* a 16 MiB frame of containers from any bridge token — as the first frame, as a result, as an
  event — costs the controller at most 300 MB more resident memory (its kernel-reported peak,
  ``VmHWM``, against its resident size before), and ``/healthz`` keeps answering meanwhile;
* an unauthenticated 150 MB POST is refused ``413`` before it is read: with a
  ``Content-Length`` at once, chunked after at most the route's limit.

Figures go to ``make faults`` (area "hostile tenants"): attempts, leaks (must be 0), peak RSS,
``/healthz`` p99 during the bombs. Times are figures, never assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import httpx
import msgpack
import pytest

from protocol.codec import decode, encode
from protocol.envelope import Capabilities, Hello, Ping, Pong, Welcome, new_request_id
from tests.adb_support import free_port
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.faults.figures import percentile, record
from tests.security.procs import SecurityController as ControllerProcess
from tests.security.support import WAIT_S, raw_bridge_client

AREA = "hostile tenants"
MIB = 1024 * 1024
RSS_BUDGET = 300 * 1000 * 1000


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"{key} not in /proc/{pid}/status")


def _bomb(kind: str) -> bytes:
    """A frame of ``kind`` just under 16 MiB, nearly all of it empty arrays."""
    inner = [[]] * 10_000
    payload = [inner] * 1_650  # 16.5 M one-byte arrays, each array under any per-array cap
    fields: dict[str, object]
    if kind == "res":
        fields = {"t": "res", "id": new_request_id(), "r": {"x": payload}}
    elif kind == "evt":
        fields = {"t": "evt", "ch": "c1", "seq": 0, "d": {"lines": payload}}
    else:
        fields = {"t": "hello", "session": new_request_id(), "software": "x",
                  "devices": payload}
    data = bytes(msgpack.packb(fields))
    assert 15 * MIB < len(data) <= 16 * MIB, len(data)
    return data


def _poll_health(url: str, latencies: list[float], stop: threading.Event) -> None:
    """``/healthz`` from a thread of its own: the test's event loop, busy sending 16 MiB
    frames, must not be what is measured."""
    with httpx.Client(base_url=url, timeout=WAIT_S) as http:
        while not stop.is_set():
            t = time.perf_counter()
            response = http.get("/healthz")
            latencies.append(time.perf_counter() - t)
            assert response.status_code == 200
            stop.wait(0.02)


@pytest.mark.timeout(300)
async def test_a_frame_bomb_and_a_huge_body_cost_the_controller_little(tmp_path: Path) -> None:
    controller = ControllerProcess(free_port(), f"sqlite:///{tmp_path / 'c.db'}", ADMIN_TOKEN,
                                   tmp_path / "controller.log")
    await controller.start()
    leaks = attempts = 0
    try:
        assert controller.proc is not None
        pid = controller.proc.pid
        async with httpx.AsyncClient(base_url=controller.url, headers=bearer(ADMIN_TOKEN),
                                     timeout=WAIT_S) as http:
            made = await http.post("/v1/tokens", json={"kind": "bridge", "name": "mallory-br"})
            assert made.status_code == 201, made.text
            token = made.json()["token"]
        bombs = {kind: _bomb(kind) for kind in ("hello", "res", "evt")}  # built beforehand
        # /healthz at rest first, for comparison: the machine may be loaded by others.
        resting: list[float] = []
        rest = threading.Event()
        baseline = threading.Thread(target=_poll_health, args=(controller.url, resting, rest))
        baseline.start()
        await asyncio.to_thread(rest.wait, 2.0)
        rest.set()
        await asyncio.to_thread(baseline.join)
        before = _status(pid, "VmRSS")
        latencies: list[float] = []
        stop = threading.Event()
        poller = threading.Thread(target=_poll_health, args=(controller.url, latencies, stop))
        poller.start()
        try:
            # The bomb as the very first frame: refused, the connection closed.
            attempts += 1
            async with raw_bridge_client(controller.url, token) as ws:
                await ws.send(bombs["hello"])
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(WAIT_S):
                        while True:
                            await ws.recv()
                if ws.close_code != 4400:
                    leaks += 1
            # After a valid hello: as a result, then as an event; the link stays usable.
            async with raw_bridge_client(controller.url, token) as ws:
                await ws.send(encode(Hello(session=new_request_id(), software="x",
                                           caps=Capabilities(devices=True))))
                assert isinstance(decode(await asyncio.wait_for(ws.recv(), WAIT_S)), Welcome)
                for kind in ("res", "evt"):
                    attempts += 1
                    await ws.send(bombs[kind])
                    ping = Ping(id=new_request_id())
                    await ws.send(encode(ping))  # answered only once the bomb was dealt with
                    async with asyncio.timeout(WAIT_S):
                        while True:
                            frame = decode(await ws.recv())
                            if isinstance(frame, Pong) and frame.id == ping.id:
                                break
        finally:
            stop.set()
            await asyncio.to_thread(poller.join)
        peak = _status(pid, "VmHWM")
        growth = peak - before
        if growth > RSS_BUDGET:
            leaks += 1

        # An unauthenticated 150 MB body: refused before it is read.
        for chunked in (False, True):
            attempts += 1
            status, sent = await _huge_post(controller.port, 150 * 1000 * 1000, chunked=chunked)
            if status != 413 or sent > 32 * MIB:  # socket buffers hold a few MiB
                leaks += 1
        after_posts = _status(pid, "VmHWM")
        if after_posts - before > RSS_BUDGET:
            leaks += 1
    finally:
        await controller.stop()
    record(AREA, "frame bombs and huge bodies: attempts", attempts)
    record(AREA, "frame bombs and huge bodies: leaks", leaks, must_be_zero=True)
    record(AREA, "controller RSS before the bombs", round(before / 1e6, 1), unit="MB")
    record(AREA, "peak controller RSS under the 16 MiB frame bomb", round(peak / 1e6, 1),
           unit="MB")
    record(AREA, "/healthz p99 at rest (same run)",
           round(percentile(resting, 0.99) * 1000, 1), unit="ms")
    record(AREA, "/healthz p99 during the bombs", round(percentile(latencies, 0.99) * 1000, 1),
           unit="ms")
    record(AREA, "/healthz slowest during the bombs", round(max(latencies) * 1000, 1), unit="ms")
    assert growth <= RSS_BUDGET, f"the bombs cost {growth / 1e6:.0f} MB"
    assert leaks == 0, f"{leaks} of {attempts} hostile inputs were not refused as they must be"
    assert latencies


async def _huge_post(port: int, size: int, *, chunked: bool) -> tuple[int, int]:
    """POST ``size`` bytes of JSON-ish junk, no token; (status, bytes sent before the answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = ("POST /v1/sandbox/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + ("Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n")
            + "\r\n")
    writer.write(head.encode())
    sent = 0
    chunk = b"[" * MIB
    status_line = asyncio.create_task(reader.readline())
    try:
        while sent < size and not status_line.done():
            if chunked:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                writer.write(chunk)
            sent += len(chunk)
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                break
            if not chunked:
                # With a Content-Length over the limit the answer comes before any body.
                await asyncio.wait({status_line}, timeout=0.05)
        line = await asyncio.wait_for(status_line, WAIT_S)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    parts = line.decode(errors="replace").split()
    return (int(parts[1]) if len(parts) > 1 else 0), sent
