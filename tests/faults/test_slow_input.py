"""Slow and greedy peers at the controller: silent handshakes, slowloris clients, a bridge
flooding events at a consumer that does not read.

* A WebSocket that opens ``/v1/bridge`` with a valid token and never says ``hello`` is closed
  by the controller (it does not hold a bridge slot forever).
* While dozens of clients dribble half an HTTP request, real calls still get answered.
* A bridge flooding logcat batches at a consumer that reads nothing: the controller's queue for
  that stream stays at its bound and the overflow is counted as dropped, never buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from protocol import SUBPROTOCOL
from protocol.methods import LogBatch
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import FakeBridge, echo_handler, in_loop_controller
from tests.faults.figures import record, size
from tests.faults.timing import SETTINGS, WAIT_S, wait_until

AREA = "bad input: slow and greedy peers"
# The flood's consumer reads nothing, so it answers no ping either: with the suite's 0.3 s pings
# the controller closed it (rightly) before a flood slowed by a loaded machine had overflowed
# its queue, and the stream ended unsubscribed with nothing dropped. Pings and liveness checks
# that outlast the test keep the queue's bound the only thing under test.
FLOOD_SETTINGS = replace(SETTINGS, ping_interval_s=4 * WAIT_S, ping_timeout_s=4 * WAIT_S,
                         liveness_interval_s=4 * WAIT_S)


async def test_a_silent_bridge_handshake_is_closed(tmp_path: Path) -> None:
    async with in_loop_controller(tmp_path, SETTINGS) as controller:
        token = await controller.bridge_token("mute")
        started = time.monotonic()
        async with connect(f"{controller.ws_url}/v1/bridge",
                           subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
                           additional_headers=bearer(token), open_timeout=WAIT_S,
                           ping_interval=None) as ws:
            try:
                await asyncio.wait_for(ws.wait_closed(), WAIT_S)
                left_open = 0
            except TimeoutError:
                left_open = 1
            took = time.monotonic() - started
            code = ws.close_code
    record(AREA, "silent bridge handshakes left open", left_open, must_be_zero=True)
    record(AREA, f"  closed with {code} after", round(took * 1000, 1), unit="ms")
    assert left_open == 0


def _dribble(port: int, count: int) -> list[socket.socket]:
    """``count`` clients that send the first bytes of a request and then nothing."""
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        s.sendall(b"GET /v1/devices HTTP/1.1\r\nHost: x\r\nX-Slow-" + str(i).encode())
        socks.append(s)
    return socks


async def test_slowloris_clients_do_not_starve_real_calls(tmp_path: Path) -> None:
    slow = size(200, 40)
    async with in_loop_controller(tmp_path, SETTINGS) as controller:
        socks = await asyncio.to_thread(_dribble, controller.port, slow)
        try:
            failures = 0
            for _ in range(20):
                response = await controller.http.get("/v1/devices")
                failures += response.status_code != 200
            bridge = FakeBridge(controller.url, await controller.bridge_token("pi"),
                                settings=SETTINGS)
            await bridge.connect()
            await bridge.close()
        finally:
            for s in socks:
                s.close()
    record(AREA, f"real calls failing while {slow} slowloris clients hang on", failures,
           must_be_zero=True)
    assert failures == 0


async def _drain(ws: Any) -> None:
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass


async def test_an_event_flood_stays_bounded(tmp_path: Path) -> None:
    batches = size(20_000, 2_000)
    lines = [f"11-30 06:00:00.000  100  100 I Flood: {'x' * 90} {i}" for i in range(50)]
    payload = LogBatch(lines=lines).to_wire()

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            return {"channel": "flood-1"}
        return await echo_handler(method, params)

    async with in_loop_controller(tmp_path, FLOOD_SETTINGS) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("greedy"),
                            handler=handler, settings=FLOOD_SETTINGS)
        await bridge.connect()
        url = f"{controller.ws_url}/v1/devices/emulator-5554/logcat/stream"
        # A consumer that reads nothing: its socket fills, then the controller must drop.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny window, at once full
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", controller.port))
        async with connect(url, sock=sock, additional_headers=bearer(ADMIN_TOKEN),
                           open_timeout=WAIT_S, max_queue=1, max_size=None) as consumer:
            [entry] = controller.hub.entries()
            await wait_until(lambda: "flood-1" in entry.streams, "stream subscribed")
            stream = entry.streams["flood-1"]
            peak = 0
            t0 = time.monotonic()
            sent = 0
            for _ in range(batches):
                try:  # the link may push back on the bridge (TCP): that is allowed too
                    await asyncio.wait_for(bridge.emit("flood-1", payload), WAIT_S / 6)
                except TimeoutError:
                    break
                sent += 1
                peak = max(peak, len(stream._queue))  # the bound under test has no public view
            await wait_until(lambda: stream.dropped_total > 0 or stream.ended, "overflow counted")
            assert not stream.ended, f"the stream ended ({stream._eof}) before it overflowed"
            dropped = stream.dropped_total
            took = time.monotonic() - t0
            queued = len(stream._queue)
            still_ok = (await controller.http.get("/v1/devices")).status_code == 200
            # Now it reads again (what was queued drains) and leaves politely.
            drain = asyncio.create_task(_drain(consumer))
            await asyncio.wait_for(consumer.close(), WAIT_S)
            await asyncio.wait_for(drain, WAIT_S)
        await bridge.close()
    bound = FLOOD_SETTINGS.stream_queue_batches
    record(AREA, "flooded logcat batches (50 lines each) at a consumer that never reads", sent)
    record(AREA, "  flood duration", round(took * 1000, 1), unit="ms")
    record(AREA, f"  batches queued at the peak (bound {bound})", peak)
    record(AREA, "  queued beyond the bound", max(0, peak - bound), must_be_zero=True)
    record(AREA, "  lines dropped and counted", dropped)
    assert peak <= bound and queued <= bound
    assert still_ok
