"""``sandbox_overhead_ms`` and ``fanout_cost``: the sandbox executor's own cost.

Simulated devices (each in a process of its own) behind a private adb server, a controller
and a real bridge with the simulated toolchain in this process
(:func:`bench.stack.device_stack`); each run is a
``POST /v1/sandbox/execute`` (wait for the verdict) of the demo's first test (a disk read on
the main thread), as an agent would send it.

* ``sandbox_overhead_ms``: per run, from the run's own ``timings``: ``total_ms −
  compile_ms − device time``, where device time is the four device phases the executor times
  around its calls to the bridge (``install_ms + run_ms + logcat_ms + cleanup_ms``: installing
  both APKs, the instrumentation, the logcat dump, uninstalling). What is left is the
  executor's own work: planning and authorization, analysis of the log, the verdict, its rows
  in the store. Baseline: the device time of the same runs — the ratio is what the executor
  adds per unit of device work. Medians over the runs.
* ``fanout_cost``: wall time of one request fanned out to N simulated devices (``"device":
  N``; N = 8 full, 3 quick) against the same request on one device; repetitions alternate
  (5 full, 3 quick); ratio of the medians (1.0 would be perfect parallelism, N fully serial).
  Measured on phones paced as a fast real phone (:mod:`device_bridge.sim.pace`: installs, the
  app's start and the test's own time take wall time, asleep), as a lab's phones do that work
  on their own CPUs. ``fanout_cost_instant`` is the same on the default instant simulated
  phone, reported without a target: there a run is almost all the host's CPU, so on a small
  machine eight of them are bounded by its cores (what a run costs the host, not whether the
  executor serialises).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import figure, median
from bench.stack import device_stack, noted

__all__ = ["run"]

DEVICE_PHASES = ("install_ms", "run_ms", "logcat_ms", "cleanup_ms")


def _test_code() -> str:
    from droidwire.demo import DEMO_TESTS

    return DEMO_TESTS[0].code


async def _run(devices: int, reps: int, pace: str) -> list[dict[str, Any]]:
    code = _test_code()
    overhead: list[float] = []
    device_ms: list[float] = []
    one: list[float] = []
    many: list[float] = []
    # The devices in processes of their own, as a lab's are separate machines: in threads of
    # this process, their CPU (0.4 s for a run on eight) would share one GIL with the bridge
    # and the controller and be what the figure measured (docs/benchmarks.md).
    async with device_stack(devices, processes=True, pace=pace) as stack:

        async def execute(count: int) -> tuple[float, list[dict[str, Any]]]:
            started = time.perf_counter()
            response = await stack.http.post(
                "/v1/sandbox/execute", json={"test_code": code, "device": count})
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            body = response.json()
            results = body.get("results", [body])
            if len(results) != count:
                raise RuntimeError(f"asked for {count} devices, got {len(results)} results")
            return elapsed, results

        await execute(1)  # warm-up: the first compile fills the cache, code paths load
        await execute(devices)  # and every device's process loads its own
        for _ in range(reps):
            elapsed, results = await execute(1)
            one.append(elapsed)
            for result in results:
                t = result["timings"]
                device = sum(t.get(phase, 0) for phase in DEVICE_PHASES)
                overhead.append(t["total_ms"] - t.get("compile_ms", 0) - device)
                device_ms.append(device)
            elapsed, _ = await execute(devices)
            many.append(elapsed)
    fanout = "fanout_cost" if pace == "phone" else f"fanout_cost_{pace}"
    # The executor's own cost per run from the instant phone alone: a phone's wall time would
    # only dilute it.
    overhead_figures = [] if pace != "instant" else [
        noted(figure("sandbox_overhead_ms", median(overhead), "ms", median(device_ms)),
              f"{len(overhead)} runs on a simulated device; from each run's timings, value: "
              "total_ms - compile_ms - device time (planning, analysis, verdict, store); "
              "baseline: device time = install_ms + run_ms + logcat_ms + cleanup_ms (through "
              f"the bridge); per run {overhead} ms vs {device_ms} ms"),
    ]
    return [
        *overhead_figures,
        noted(figure(fanout, median(many), "s", median(one)),
              f"one test fanned out to N={devices} simulated devices (a process each, paced "
              f"{pace!r}) vs one "
              "device, wall time "
              f"of POST /v1/sandbox/execute, {reps} alternating repetitions; "
              f"N: {[round(x, 2) for x in many]} s, one: {[round(x, 2) for x in one]} s",
              n=devices),
    ]


def run(quick: bool, *, devices: int | None = None, reps: int | None = None) -> list[dict[str, Any]]:
    n, k = devices or (3 if quick else 8), reps or (3 if quick else 5)
    return [*asyncio.run(_run(n, k, "instant")), *asyncio.run(_run(n, k, "phone"))]
