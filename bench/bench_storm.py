"""``reconnect_storm_s``: N bridges back after a controller restart, against bare websockets
clients reconnecting to a restarted bare server; and ``loop_delay_p99_ms`` meanwhile.

N = 5,000 (full) or 300 (quick) lightweight bridges (see :mod:`bench.crowd`: the real
handshake and hello/welcome, one token each) hold connections to a controller in a process of
its own. A restart is a rolling one on one port: the next controller process starts and
listens with ``SO_REUSEPORT`` beside the current one, then (the clock starts) the current
one gets SIGTERM — it stops listening, closes every bridge (uvicorn's shutdown) and exits. Each bridge reconnects
with the bridge's own policy (first retry within ``backoff_first_max_s``, then full-jitter
exponential backoff, :func:`protocol.settings.backoff`). The figure is the time from the
SIGTERM until the last of the N has its ``welcome``; refusals are failed attempts meanwhile.
The baseline is the same restart of a bare websockets server process (one echoed message per
connection in place of hello/welcome) with bare clients using the same backoff.
Repetitions alternate ours and the baseline (5 in full, 1 in quick); medians reported.

``loop_delay_p99_ms``: the p99 of how late the new controller's event loop wakes a 5 ms
sleeper during the storm (sampled inside the controller process), against the bare server's
during its storm.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import figure, median
from bench.crowd import BareClient, BridgeClient, Tally, close_crowd, open_crowd
from bench.stack import (
    ServerProcess,
    free_port,
    noted,
    raise_nofile,
    seed_bridge_tokens,
    start_all,
)

__all__ = ["run"]

FULL_N, QUICK_N = 5_000, 300
FULL_REPS, QUICK_REPS = 5, 1
STORM_TIMEOUT_S = 180.0


class _Side:
    """One side of the comparison: a server process on a fixed port and its crowd."""

    def __init__(self, kind: str, n: int, tmp: Path, db: str | None = None,
                 admin: str | None = None, tokens: list[str] | None = None) -> None:
        self.kind, self.n, self.tmp, self.db, self.admin = kind, n, tmp, db, admin
        self.port = free_port()
        self.tally = Tally()
        self.server: ServerProcess | None = None
        rng = random.Random(7).random
        url = f"ws://127.0.0.1:{self.port}"
        if tokens is not None:
            self.clients: list[Any] = [BridgeClient(url, t, self.tally, rng) for t in tokens[:n]]
        else:
            self.clients = [BareClient(url, self.tally, rng) for _ in range(n)]
        self.times: list[float] = []
        self.loop_p99: list[float] = []
        self.refused: list[int] = []
        self.back: list[int] = []
        self.starts = 0
        self.late = 0
        self.next: ServerProcess | None = None  # started ahead of the next restart
        self.starting: asyncio.Task[ServerProcess] | None = None

    def _process(self) -> ServerProcess:
        self.starts += 1
        log = self.tmp / f"{self.kind}-{self.starts}.log"
        return ServerProcess(self.kind, self.port, db_url=self.db, admin_token=self.admin,
                             log=log)

    def first(self) -> ServerProcess:
        self.server = self._process()
        return self.server

    async def open(self) -> None:
        self.late = await open_crowd(self.clients, reconnect=True, concurrency=100)
        # Those not connected in time were stopped: the storm counts the ones that were.
        self.clients = [c for c in self.clients if c.opened.is_set()]
        self.n = len(self.clients)

    def _prepare(self) -> None:
        """Start the next server, to listen beside the current one (SO_REUSEPORT). Only right
        before the restart: a server listening early would take the reconnects of bridges
        that drop meanwhile (keepalive timeouts on a loaded machine)."""
        self.next = self._process()
        self.starting = asyncio.create_task(self.next.start())

    async def restart(self) -> None:
        assert self.server is not None
        self._prepare()
        assert self.starting is not None
        old = self.server
        new = await self.starting
        await new.loop_window()  # start its window now
        refused = self.tally.refused
        self.tally.mark(self.n)
        started = time.perf_counter()
        old.terminate()
        try:
            await asyncio.wait_for(self.tally.all_back.wait(), STORM_TIMEOUT_S)
        except TimeoutError:
            pass
        self.times.append(time.perf_counter() - started)
        self.back.append(self.tally.back)
        self.refused.append(self.tally.refused - refused)
        self.loop_p99.append((await new.loop_window())["p99"])
        await old.wait()
        self.server = new
        self.next = self.starting = None

    async def close(self) -> None:
        await close_crowd(self.clients)
        if self.starting is not None:
            with contextlib.suppress(Exception):
                await self.starting
        if self.next is not None:
            await self.next.stop()
        if self.server is not None:
            await self.server.stop()


async def _run(n: int, reps: int) -> list[dict[str, Any]]:
    raise_nofile(n * 2 + 2048)
    admin = "bench-" + secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-") as tmp_name:
        tmp = Path(tmp_name)
        db = f"sqlite:///{tmp / 'controller.db'}"
        tokens = await seed_bridge_tokens(db, admin, n)
        ours = _Side("controller", n, tmp, db, admin, tokens)
        bare = _Side("bare", n, tmp)
        try:
            await start_all(ours.first(), bare.first())
            await asyncio.gather(ours.open(), bare.open())
            for _ in range(reps):
                await ours.restart()
                await bare.restart()
        finally:
            await ours.close()
            await bare.close()
    all_back = all(b == ours.n for b in ours.back)
    n = ours.n
    notes = (f"N={n} bridges (of {len(tokens)}; {ours.late} not connected in time), {reps} "
             "restart(s) each side, alternating; lightweight protocol clients (real handshake "
             "+ hello/welcome) in one process; rolling restart on one port (SO_REUSEPORT), time "
             "from SIGTERM of the old controller until every bridge has its welcome; "
             f"back per restart {ours.back}; times {_r(ours.times)} s vs bare "
             f"{_r(bare.times)} s (bare N={bare.n})"
             + ("" if all_back else "; NOT ALL BACK (timed out)"))
    return [
        noted(figure("reconnect_storm_s", median(ours.times), "s", median(bare.times)), notes,
              n=n, baseline_n=bare.n, refused=sum(ours.refused),
              baseline_refused=sum(bare.refused),
              all_back=all_back),
        noted(figure("loop_delay_p99_ms", median(ours.loop_p99), "ms", median(bare.loop_p99)),
              "p99 lateness of a 5 ms sleeper on the new server's event loop during the "
              f"reconnect storm of N={n} (sampled in the server process); per restart "
              f"{_r(ours.loop_p99)} ms vs bare {_r(bare.loop_p99)} ms"),
    ]


def _r(values: list[float]) -> list[float]:
    return [round(v, 3) for v in values]


def run(quick: bool, *, n: int | None = None, reps: int | None = None) -> list[dict[str, Any]]:
    return asyncio.run(_run(n or (QUICK_N if quick else FULL_N),
                            reps or (QUICK_REPS if quick else FULL_REPS)))
