"""``push_mb_per_s``: a file pushed through ``PUT /v1/devices/{device}/files`` — the controller
streaming the body in 1 MiB chunks over the bridge's WebSocket into a stage on the bridge host,
then adb's sync protocol to the device — against ``adb push`` of the same file (adbutils'
sync push from the same host file) to the same simulated device and adb server.

One simulated device, a controller on uvicorn and a real bridge in this process
(:func:`bench.stack.device_stack`). Each repetition pushes the file both ways, alternating; the
figure is the median throughput (MB/s, 10^6 bytes per second). Higher is better: the ratio is
ours over adb's. Sizes: 64 MiB full, 8 MiB quick (the simulated phone stores files in memory,
at most 512 MiB).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.common import figure, median
from bench.stack import device_stack, noted

__all__ = ["run"]

MB = 1_000_000
CHUNK = 1024 * 1024
REMOTE = "/data/local/tmp/droidwire/bench-push.bin"


async def _run(size: int, reps: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-push-") as tmp:
        local = Path(tmp) / "payload.bin"
        with local.open("wb") as f:
            for _ in range(size // CHUNK):
                f.write(os.urandom(CHUNK))
        async with device_stack(1) as stack:
            serial = stack.serials[0]
            device = stack.adb.client().device(serial)
            path = f"/v1/devices/{quote(serial, safe=':')}/files"

            async def body() -> AsyncIterator[bytes]:
                with local.open("rb") as f:
                    while chunk := f.read(CHUNK):
                        yield chunk

            async def ours() -> float:
                started = time.perf_counter()
                response = await stack.http.put(
                    path, params={"path": REMOTE}, content=body(),
                    headers={"Content-Length": str(size)}, timeout=600,
                )
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                if response.json()["size"] != size:
                    raise RuntimeError(f"pushed {response.json()!r}")
                return size / elapsed / MB

            def adb_push() -> float:
                # Blocking on purpose: what `adb push` on the bridge's host pays.
                started = time.perf_counter()
                with local.open("rb") as src:
                    device.sync.push(src, REMOTE)
                return size / (time.perf_counter() - started) / MB

            adb_push()  # warm-up: connections, code paths
            await ours()
            mine: list[float] = []
            base: list[float] = []
            for _ in range(reps):
                base.append(await asyncio.to_thread(adb_push))
                mine.append(await ours())
    return [noted(figure("push_mb_per_s", median(mine), "MB/s", median(base)),
                  f"{reps} alternating pushes of {size // CHUNK} MiB each; REST PUT through "
                  "controller + bridge stage + adb sync vs adbutils sync push of the same file, "
                  f"same simulated device; {[round(x, 1) for x in mine]} vs "
                  f"{[round(x, 1) for x in base]} MB/s")]


def run(quick: bool, *, size_mib: int | None = None, reps: int | None = None) -> list[dict[str, Any]]:
    mib = size_mib or (8 if quick else 64)
    return asyncio.run(_run(mib * CHUNK, reps or (3 if quick else 5)))
