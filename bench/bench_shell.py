"""``remote_shell_p50``: ``POST /v1/devices/{serial}/shell`` running ``echo`` through the
controller, the bridge and adb, against ``adb shell echo`` on the same device.

One simulated device behind a private adb server, a controller on uvicorn and a real bridge,
all in this process (:func:`bench.stack.device_stack`). The remote call is what a client pays:
an HTTP request with a bearer token, authorization, an RPC over the bridge's WebSocket, the
bridge's policy check and the adb client, and back. The baseline is what ``adb shell echo …`` on
the bridge's host pays against the same adb server and device (:func:`bench.stack.adb_shell`;
until 2026-12-07 it was adbutils' ``shell()``, whose 10 ms sleep on closing each connection made
the baseline about 20 ms: docs/benchmarks.md, "The shell round trip"). Repetitions alternate a
batch of each (5 full, 5 quick); the figure is the median of the batches' medians.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import quote

from bench.common import figure, median
from bench.stack import adb_shell, device_stack, noted

__all__ = ["run"]

WORD = "droidwire-bench"


async def _run(batch: int, reps: int) -> list[dict[str, Any]]:
    async with device_stack(1) as stack:
        serial = stack.serials[0]
        path = f"/v1/devices/{quote(serial, safe=':')}/shell"

        async def remote() -> float:
            started = time.perf_counter()
            response = await stack.http.post(path, json={"argv": ["echo", WORD]})
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            if response.json()["stdout"].strip() != WORD:
                raise RuntimeError(f"remote echo answered {response.json()!r}")
            return elapsed

        def local() -> float:
            # Blocking on purpose: what a local script pays (nothing else runs meanwhile).
            started = time.perf_counter()
            out = adb_shell(stack.adb.port, serial, f"echo {WORD}").decode()
            elapsed = time.perf_counter() - started
            if out.strip() != WORD:
                raise RuntimeError(f"local echo answered {out!r}")
            return elapsed

        for _ in range(5):  # warm-up: connections, caches, code paths
            local()
            await remote()
        ours: list[float] = []
        base: list[float] = []
        for _ in range(reps):
            base.append(median([local() for _ in range(batch)]))
            ours.append(median([await remote() for _ in range(batch)]))
    ms = 1000.0
    return [noted(figure("remote_shell_p50", median(ours) * ms, "ms", median(base) * ms),
                  f"{reps} alternating batches of {batch} echo calls each; REST shell through "
                  "controller + bridge + adb vs local `adb shell` on the adb server, same "
                  f"simulated device and adb server; batch medians {[round(x * ms, 2) for x in ours]} ms vs "
                  f"{[round(x * ms, 2) for x in base]} ms")]


def run(quick: bool, *, batch: int | None = None, reps: int = 5) -> list[dict[str, Any]]:
    return asyncio.run(_run(batch or (10 if quick else 200), reps))
