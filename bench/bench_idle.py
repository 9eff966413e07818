"""``idle_bridge_kb``: controller memory per idle bridge, against a bare websockets server.

The controller runs in a process of its own (the uvicorn configuration of ``droidwire
controller``, SQLite in a temporary directory, one bridge token per bridge seeded in bulk);
this process opens idle bridges to it in steps — 1,000, 5,000, 10,000 (full) or 500
(quick) — at most 100 handshakes at a time, and reads the controller's resident memory
(``/proc/PID/status`` VmRSS) after each step. KB per bridge = (RSS at N − RSS after a warm-up
of 20 bridges) / N, at the largest N reached: a step with more than 1 % refused connections
ends the climb.

The bridges are lightweight protocol clients, all in this process: the real handshake
(bearer token, subprotocol ``droidwire.v1``, keepalive as configured) and the real
``hello``/``welcome``, then they answer pings. The baseline is a bare websockets server in a
process of its own holding the same number of connections (one echoed message each, then
idle), measured the same way in the same run. One pass each: memory does not jitter the way
time does, and a pass at 10,000 bridges takes a while.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import tempfile
from pathlib import Path
from typing import Any

from bench.common import figure
from bench.crowd import BareClient, BridgeClient, Tally, close_crowd, open_crowd
from bench.stack import (
    ServerProcess,
    free_port,
    noted,
    raise_nofile,
    rss_kb,
    seed_bridge_tokens,
    start_all,
)

__all__ = ["run"]

FULL_STEPS = (1_000, 5_000, 10_000)
QUICK_STEPS = (500,)
WARM = 20
MAX_REFUSED = 0.01
SETTLE_S = 1.0  # let the server finish each step's bookkeeping before reading its memory


async def _climb(server: ServerProcess, make: Any, steps: tuple[int, ...],
                 settle_s: float) -> dict[str, Any]:
    """Open clients up to each step; RSS per step and refusals."""
    tally = Tally()
    clients: list[Any] = []
    rng = random.Random(1).random
    try:
        clients += [make(i, tally, rng) for i in range(WARM)]
        tally.late += await open_crowd(clients, reconnect=False)
        await asyncio.sleep(settle_s)
        base = rss_kb(server.pid)
        per_step: dict[int, float] = {}
        reached = 0
        for n in steps:
            before = tally.refused
            fresh = [make(WARM + i, tally, rng) for i in range(len(clients) - WARM, n)]
            clients += fresh
            late = await open_crowd(fresh, reconnect=False)
            tally.late += late
            await asyncio.sleep(settle_s)
            open_now = tally.open - WARM
            if open_now <= 0:
                break
            per_step[n] = (rss_kb(server.pid) - base) / open_now
            reached = open_now
            if late or tally.refused - before > MAX_REFUSED * len(fresh):
                break
        loop_ms = (await server.loop_window())["p99"]
        return {"per_step": per_step, "reached": reached, "refused": tally.refused,
                "reasons": dict(tally.reasons), "loop_p99_ms": loop_ms,
                "late": tally.late}
    finally:
        await close_crowd(clients)


async def _run(steps: tuple[int, ...], settle_s: float) -> list[dict[str, Any]]:
    raise_nofile(max(steps) * 2 + 2048)
    admin = "bench-" + secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'controller.db'}"
        tokens = await seed_bridge_tokens(db, admin, max(steps) + WARM)
        # Both start at once (an idle server costs the other nothing); they climb in turn.
        controller = ServerProcess("controller", free_port(), db_url=db, admin_token=admin,
                                   log=Path(tmp) / "c.log")
        bare = ServerProcess("bare", free_port())
        await start_all(controller, bare)
        try:
            ours = await _climb(
                controller, lambda i, t, r: BridgeClient(controller.url, tokens[i], t, r), steps,
                settle_s)
            await controller.stop()
            base = await _climb(bare, lambda i, t, r: BareClient(bare.url, t, r), steps,
                                settle_s)
        finally:
            await controller.stop()
            await bare.stop()
    n = ours["reached"]
    value = ours["per_step"].get(max(ours["per_step"], default=0), float("nan"))
    # The baseline at the same N (or the nearest step it reached).
    baseline = base["per_step"].get(max(ours["per_step"], default=0)) or next(
        iter(base["per_step"].values()), float("nan"))
    notes = (f"N={n} idle bridges (steps {'/'.join(map(str, steps))}); lightweight protocol "
             "clients in one process doing the real handshake + hello/welcome; controller in "
             "its own process, VmRSS delta / N; per step KB: "
             + ", ".join(f"{k}: {v:.1f}" for k, v in ours["per_step"].items())
             + "; bare websockets: "
             + ", ".join(f"{k}: {v:.1f}" for k, v in base["per_step"].items())
             + f"; server loop delay p99 during the climb {ours['loop_p99_ms']:.1f} ms vs bare "
             f"{base['loop_p99_ms']:.1f} ms")
    return [noted(figure("idle_bridge_kb", value, "KB", baseline), notes, n=n,
                  refused=ours["refused"], refused_by=ours["reasons"], late=ours["late"],
                  baseline_refused=base["refused"])]


def run(quick: bool, *, steps: tuple[int, ...] | None = None,
        settle_s: float = SETTLE_S) -> list[dict[str, Any]]:
    return asyncio.run(_run(steps or (QUICK_STEPS if quick else FULL_STEPS), settle_s))
