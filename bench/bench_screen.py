"""The live screen: ``screen_fps``, ``screen_latency_p50``/``_p95``,
``tap_to_frame_ms`` and ``stream_cost``.

One simulated phone (its ``screenrecord``: H.264, 5 frames a second) behind a private adb
server, a controller on uvicorn and a real bridge, all in this process
(:func:`bench.stack.device_stack`); the demo app is open on its Settings page.

* ``screen_fps`` — frames painted per second in headless Chromium (the dashboard's device page,
  WebCodecs where it decodes H.264, else JPEG pictures), against the frames the phone produced
  in the same window (the frames' numbers ``n``). Target ≥ 0.9.
* ``screen_latency_p50``/``_p95`` — ms from the bridge reading a frame from the phone (``ts``)
  to the browser painting it, against a bare websockets relay (producer → server → consumer,
  in this process) of the same frames at the same pace: what the relay alone costs.
* ``tap_to_frame_ms`` — a click on the page's canvas (the Dark mode switch) to the first painted
  frame that shows the change, against a local ``input tap`` through adbutils followed by
  ``screencap`` until the picture shows it (same phone, same adb server).
* ``stream_cost`` — this process's CPU per extra viewer (websockets clients of
  ``/v1/devices/{device}/screen/stream``), ms of CPU per second, against a bare websockets
  server fanning the same frames out to the same number of clients. The phone, the bridge and
  the first viewer cost the same in both windows, so the difference is the controller's
  fan-out.

Without Chromium (``/usr/bin/chromium``) and Playwright, only ``stream_cost`` is measured (the
notes say why).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any
from urllib.parse import quote

from bench.common import figure, median, percentile
from bench.stack import device_stack, noted

__all__ = ["run"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]
SETTINGS_BUTTON = (540, 930)
DARK_SWITCH = (0.5, 450 / 2400)
BACKGROUND = (0.05, 0.5)  # light or dark with the theme
#: stream_cost's floor: a smaller difference between two windows is noise (reported as this).
RESOLUTION_MS = 0.01

_TAP_PROBE = """([tx, ty, px, py]) => {
  const c = document.getElementById('screen-canvas');
  const box = document.getElementById('screen');
  const ctx = c.getContext('2d');
  const probe = () => ctx.getImageData(Math.floor(px * c.width), Math.floor(py * c.height),
                                       1, 1).data[0];
  const before = probe();
  window.__tap = new Promise((done) => {
    let t0 = null;
    c.addEventListener('pointerdown', () => { t0 = performance.now(); }, { once: true });
    const seen = new MutationObserver(() => {
      if (t0 !== null && Math.abs(probe() - before) > 60) {
        seen.disconnect();
        done(performance.now() - t0);
      }
    });
    seen.observe(box, { attributes: true });
  });
  const r = c.getBoundingClientRect();
  return [r.left + tx * r.width, r.top + ty * r.height];
}"""


_SHOWS = """([px, py, red]) => new Promise((done) => {
  const c = document.getElementById('screen-canvas');
  const box = document.getElementById('screen');
  const ctx = c.getContext('2d');
  const near = () => Math.abs(ctx.getImageData(Math.floor(px * c.width),
                                               Math.floor(py * c.height), 1, 1).data[0] - red) < 60;
  if (near()) { done(true); return; }
  const seen = new MutationObserver(() => { if (near()) { seen.disconnect(); done(true); } });
  seen.observe(box, { attributes: true });
})"""


def _ws(url: str, device_id: str, codec: str = "h264") -> str:
    return (f"{url.replace('http://', 'ws://')}/v1/devices/{quote(device_id, safe='~:')}"
            f"/screen/stream?codec={codec}")


async def _browser(stack: Any, device_id: str, window_s: float, taps: int,
                   frames: list[bytes]) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright
    from websockets.asyncio.client import connect

    serial = stack.serials[0]
    device = stack.adb.client().device(serial)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context(viewport={"width": 1280, "height": 1000})
                          ).new_page()
            await page.goto(stack.url + "/login")
            await page.fill("#token", stack.admin_token)
            await page.click("button[type=submit]")
            await page.wait_for_url(stack.url + "/devices")
            await page.goto(f"{stack.url}/devices/{device_id}")
            await page.wait_for_selector("#screen[data-frames]")
            stats = "() => ({shown: window.droidwireScreen.shown, " \
                    "n: window.droidwireScreen.lastN, lat: window.droidwireScreen.latencies.length, " \
                    "codec: window.droidwireScreen.codec})"
            # Capture the same frames for the relay baseline while the browser watches.
            async with connect(_ws(stack.url, device_id), max_size=None, additional_headers={
                    "Authorization": f"Bearer {stack.admin_token}"}) as capture:
                await capture.recv()  # hello
                first = await page.evaluate(stats)
                started = time.monotonic()
                while time.monotonic() - started < window_s:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(window_s):
                            message = await capture.recv()
                            if isinstance(message, bytes):
                                frames.append(message)
                last = await page.evaluate(stats)
                elapsed = time.monotonic() - started
            latencies = (await page.evaluate("() => window.droidwireScreen.latencies"))[
                first["lat"]:last["lat"]]
            shown, produced = last["shown"] - first["shown"], last["n"] - first["n"]
            ours_tap: list[float] = []
            base_tap: list[float] = []
            for _ in range(taps):
                x, y = await page.evaluate(_TAP_PROBE, [*DARK_SWITCH, *BACKGROUND])
                await page.mouse.click(x, y)
                ours_tap.append(float(await page.evaluate("() => window.__tap")))
                elapsed_ms, red = await asyncio.to_thread(_local_tap, device)
                base_tap.append(elapsed_ms)
                # The page must show what the phone shows before the next click, or a click
                # could undo the baseline's change before a frame ever carried it.
                await page.evaluate(_SHOWS, [*BACKGROUND, red])
            codec = last["codec"]
        finally:
            await browser.close()
    relay = await _bare_relay(frames)
    figures = [
        noted(figure("screen_fps", shown / elapsed, "frames/s", produced / elapsed),
              f"{shown} frames painted in headless Chromium ({codec}) in {elapsed:.1f} s, "
              f"against the {produced} the simulated phone produced; target ratio >= 0.9"),
        noted(figure("screen_latency_p50", percentile(latencies, 50), "ms",
                     percentile(relay, 50)),
              f"{len(latencies)} frames, bridge read -> browser paint; baseline: the same "
              f"{len(relay)} frames through a bare websockets relay in this process"),
        noted(figure("screen_latency_p95", percentile(latencies, 95), "ms",
                     percentile(relay, 95)), "as screen_latency_p50"),
        noted(figure("tap_to_frame_ms", median(ours_tap), "ms", median(base_tap)),
              f"{taps} clicks on the page's canvas to the first painted frame showing the "
              f"change, {[round(x) for x in ours_tap]} ms; baseline: local adbutils input tap "
              f"then screencap until it shows, {[round(x) for x in base_tap]} ms"),
    ]
    return figures


def _local_tap(device: Any) -> tuple[float, int]:
    """``input tap`` on the Dark mode switch, then screenshots until the theme changed: ms, and
    the background's red value now."""
    width, height = device.window_size()
    before = device.screenshot().getpixel((int(BACKGROUND[0] * width),
                                           int(BACKGROUND[1] * height)))
    started = time.perf_counter()
    device.shell(["input", "tap", str(int(DARK_SWITCH[0] * width)),
                  str(int(DARK_SWITCH[1] * height))])
    while True:
        now = device.screenshot().getpixel((int(BACKGROUND[0] * width),
                                            int(BACKGROUND[1] * height)))
        if abs(now[0] - before[0]) > 60:
            return (time.perf_counter() - started) * 1000, int(now[0])
        if time.perf_counter() - started > 30:
            raise RuntimeError("the local tap never showed")


async def _bare_relay(frames: list[bytes], fps: float = 5.0) -> list[float]:
    """The same frames, producer -> bare websockets server -> consumer, ms each."""
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import ServerConnection, serve

    consumers: set[ServerConnection] = set()
    latencies: list[float] = []
    joined = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        if ws.request is not None and ws.request.path == "/consume":
            consumers.add(ws)
            joined.set()
            with contextlib.suppress(Exception):
                await ws.wait_closed()
            consumers.discard(ws)
            return
        async for message in ws:
            for consumer in list(consumers):
                with contextlib.suppress(Exception):
                    await consumer.send(message)

    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}/consume", max_size=None,
                           compression=None) as consumer, \
                connect(f"ws://127.0.0.1:{port}/produce", max_size=None,
                        compression=None) as producer:
            await joined.wait()
            for frame in frames:
                await producer.send(time.time_ns().to_bytes(8, "big") + frame)
                message = await consumer.recv()
                assert isinstance(message, bytes)
                latencies.append((time.time_ns() - int.from_bytes(message[:8], "big")) / 1e6)
                await asyncio.sleep(1 / fps)
    return latencies


async def _stream_cost(stack: Any, device_id: str, viewers: int, window_s: float,
                       frames: list[bytes]) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {stack.admin_token}"}

    async def drain(ws: Any) -> None:
        with contextlib.suppress(Exception):
            async for _ in ws:
                pass

    async def cpu(window: float) -> float:
        start_cpu, start = time.process_time(), time.monotonic()
        await asyncio.sleep(window)  # a measurement window, not a synchronisation
        return (time.process_time() - start_cpu) / (time.monotonic() - start)

    async with contextlib.AsyncExitStack() as stack_ctx:
        async def open_viewer() -> None:
            ws = await stack_ctx.enter_async_context(
                connect(_ws(stack.url, device_id), additional_headers=headers, max_size=None))
            await ws.recv()  # hello
            stack_ctx.push_async_callback(_cancel, asyncio.create_task(drain(ws)))

        await open_viewer()
        if not frames:  # no browser ran: capture some frames for the baseline here
            async with connect(_ws(stack.url, device_id), additional_headers=headers,
                               max_size=None) as capture:
                await capture.recv()
                while len(frames) < 25:
                    message = await capture.recv()
                    if isinstance(message, bytes):
                        frames.append(message)
        one = await cpu(window_s)
        for _ in range(viewers):
            await open_viewer()
        many = await cpu(window_s)
    # Below this the two windows cannot tell a difference (CPU clock and noise).
    floor = RESOLUTION_MS
    ours = max(floor, (many - one) / viewers * 1000)
    base_one, base_many = await _bare_fanout_cpu(frames, viewers, window_s, cpu)
    base = max(floor, (base_many - base_one) / viewers * 1000)
    return noted(figure("stream_cost", ours, "ms CPU/s per viewer", base),
                 f"this process's CPU with 1 viewer ({one * 1000:.0f} ms/s) and {1 + viewers} "
                 f"({many * 1000:.0f} ms/s) of the H.264 feed; baseline: a bare websockets "
                 f"fan-out of the same frames at the same pace ({base_one * 1000:.0f} -> "
                 f"{base_many * 1000:.0f} ms/s)")


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _bare_fanout_cpu(frames: list[bytes], viewers: int, window_s: float,
                           cpu: Any) -> tuple[float, float]:
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import ServerConnection, serve

    clients: set[ServerConnection] = set()

    async def handler(ws: ServerConnection) -> None:
        clients.add(ws)
        with contextlib.suppress(Exception):
            await ws.wait_closed()
        clients.discard(ws)

    async def pump() -> None:
        i = 0
        while True:
            frame = frames[i % len(frames)]
            i += 1
            for ws in list(clients):
                with contextlib.suppress(Exception):
                    await ws.send(frame)
            await asyncio.sleep(0.2)

    async def drain(ws: Any) -> None:
        with contextlib.suppress(Exception):
            async for _ in ws:
                pass

    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server, \
            contextlib.AsyncExitStack() as ctx:
        port = server.sockets[0].getsockname()[1]
        producer = asyncio.create_task(pump())
        ctx.push_async_callback(_cancel, producer)

        async def client() -> None:
            ws = await ctx.enter_async_context(
                connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None))
            ctx.push_async_callback(_cancel, asyncio.create_task(drain(ws)))

        await client()
        one = await cpu(window_s)
        for _ in range(viewers):
            await client()
        many = await cpu(window_s)
    return one, many


async def _run(quick: bool, window_s: float | None, taps: int | None,
               viewers: int | None) -> list[dict[str, Any]]:
    from device_bridge.sim.ui_demo import launch_demo

    window_s = window_s or (5.0 if quick else 15.0)
    taps = taps or (3 if quick else 10)
    viewers = viewers or (10 if quick else 20)
    async with device_stack(1) as stack:
        sim = stack.sims[0]
        sim.sim.call(lambda: launch_demo(sim.device))
        serial = stack.serials[0]
        device_id = next(d["id"] for d in (await stack.http.get("/v1/devices")).json()
                         if d["serial"] == serial)
        tapped = await stack.http.post(
            f"/v1/devices/{quote(device_id, safe='~:')}/actions",
            json={"action": "tap", "x": SETTINGS_BUTTON[0], "y": SETTINGS_BUTTON[1]})
        tapped.raise_for_status()
        frames: list[bytes] = []
        figures: list[dict[str, Any]] = []
        browser_ok = await asyncio.to_thread(os.path.exists, CHROMIUM)
        try:
            import playwright  # noqa: F401
        except ImportError:
            browser_ok = False
        if browser_ok:
            figures += await _browser(stack, device_id, window_s, taps, frames)
        figures.append(await _stream_cost(stack, device_id, viewers, window_s, frames))
        if not browser_ok:
            figures[-1]["notes"] += f"; no {CHROMIUM} or playwright: browser figures skipped"
    return figures


def run(quick: bool, *, window_s: float | None = None, taps: int | None = None,
        viewers: int | None = None) -> list[dict[str, Any]]:
    return asyncio.run(_run(quick, window_s, taps, viewers))
