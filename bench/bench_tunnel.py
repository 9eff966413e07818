"""``tunnel_push_mb_per_s`` and ``tunnel_shell_rtt_ms``: the real adb client through a remote adb
tunnel (``droidwire device tunnel``, docs/tunnel.md) against the same operations straight to the
same simulated device.

One simulated device in a process of its own behind the bridge's adb server, a controller on
uvicorn and a real bridge in this process (:func:`bench.stack.device_stack`); the tunnel's local
end as a user runs it — ``droidwire device tunnel`` in a process of its own, as the laptop is
another machine than the controller — and a second adb server, the laptop's, ``adb connect``-ed
to it. (Until the third round of docs/benchmarks.md the local end and the device shared this
process's interpreter with the controller and the bridge: four hops on one core.)

* ``tunnel_push_mb_per_s``: ``adb push`` of one file through the tunnel (laptop server → local
  listener → controller WebSocket → bridge → bridge's adb server → device) against ``adb push``
  of the same file on the bridge's adb server straight to the device; median of alternating
  repetitions (9 full, 2 quick), MB/s (10^6 bytes per second). Higher is better; the target is
  ratio ≥ 0.5. Sizes: 20 MiB full, 4 MiB quick.
* ``tunnel_shell_rtt_ms``: one ``shell:echo`` round trip (a new adb stream each: the OPEN, the
  command, its output, the close) through the tunnel against the same on the bridge's adb server;
  median ms. Lower is better. Each is what ``adb shell echo`` does on the adb server's socket —
  connect, ``host:transport:SERIAL``, ``shell:echo N``, read to the end — by a client of a few
  lines here: adbutils' ``shell()`` sleeps 10 ms as it closes each connection, which put 20 ms
  into both sides until 2026-12-07 (docs/benchmarks.md, "The shell round trip"). The target (issue 24): at most
  twice the direct figure plus the link's round trip (``bound``), the latter (``link_rtt_ms``)
  measured in the same run as a WebSocket ping on each of the tunnel's two WebSockets — the
  tunnel's own (a second tunnel, opened in this process) and the bridge's link — added: the
  network's share of the path, which a tunnel cannot take away. ``relay_floor_ms``: the same
  ``shell:echo`` through three bare TCP relays in processes of their own in front of the phone
  (:mod:`bench.relay`) — what the three process hops of the path (local end, controller, bridge)
  cost with nothing else to do, measured in the same run: the floor no tunnel through them can
  go under, which tells whether the bound can be met on this machine at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.common import figure, median
from bench.relay import relay_chain
from bench.stack import adb_shell, device_stack, noted

__all__ = ["run"]

MB = 1_000_000
MIB = 1024 * 1024
REMOTE = "/data/local/tmp/droidwire/bench-tunnel.bin"


def _push(adb: Any, serial: str, local: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([adb.adb, "-P", str(adb.port), "-s", serial, "push", str(local), REMOTE],
                          env=adb.env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"adb push to {serial}: {done.stderr or done.stdout}")
    return local.stat().st_size / elapsed / MB


def _shell_rtts(port: int, serial: str, n: int) -> list[float]:
    """``n`` sequential ``shell:echo`` streams on the adb server at ``port``, ms each."""
    out = []
    for i in range(n):
        started = time.perf_counter()
        answer = adb_shell(port, serial, f"echo {i}")
        out.append((time.perf_counter() - started) * 1000)
        if answer.strip() != str(i).encode():
            raise RuntimeError(f"shell echo answered {answer!r}")
    return out


def _floor(laptop: Any, phone_port: int, n: int) -> float:
    """Median ms of ``n`` ``shell:echo`` streams from the laptop's adb server to the phone
    through three bare relay processes (:func:`bench.relay.relay_chain`)."""
    from tests.adb_support import wait_for_state

    with relay_chain(phone_port, 3) as port:
        address = f"127.0.0.1:{port}"
        laptop.client().connect(address, 30.0)
        try:
            wait_for_state(laptop.client(), address, "device", 60.0)
            _shell_rtts(laptop.port, address, 3)
            return median(_shell_rtts(laptop.port, address, n))
        finally:
            laptop.client().disconnect(address)


async def _link_rtt(stack: Any, serial: str, n: int) -> float:
    """The link's round trip, ms: the median WebSocket ping of a tunnel to ``serial`` (a second
    one, in this process) plus that of the bridge's link to the controller."""
    from droidwire.tunnel import open_tunnel

    bridge_link = stack.bridge.link
    t = await open_tunnel([stack.url], stack.admin_token, serial)
    try:
        tunnel = [await t.round_trip() for _ in range(n)]
        link = [await bridge_link.round_trip() for _ in range(n)]
    finally:
        await t.aclose()
    return (median(tunnel) + median(link)) * 1000


@contextlib.asynccontextmanager
async def _tunnel_cli(url: str, token: str, serial: str) -> AsyncIterator[int]:
    """``droidwire device tunnel SERIAL --json`` in a process of its own; its local port."""
    cli = Path(sys.executable).with_name("droidwire")
    env = {**os.environ, "DROIDWIRE_CONTROLLER": url, "DROIDWIRE_TOKEN": token}
    proc = await asyncio.create_subprocess_exec(
        str(cli), "device", "tunnel", serial, "--json", env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await proc.stdout.readline()
        if not line:
            error = (await proc.stderr.read()).decode(errors="replace")
            raise RuntimeError(f"droidwire device tunnel: {error}")
        yield int(json.loads(line)["port"])
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.communicate()


async def _run(size: int, reps: int, shells: int) -> list[dict[str, Any]]:
    from tests.adb_support import start_adb_server, wait_for_state

    with tempfile.TemporaryDirectory(prefix="droidwire-bench-tunnel-") as tmp:
        local = Path(tmp) / "payload.bin"
        with local.open("wb") as f:
            for _ in range(size // MIB):
                f.write(os.urandom(MIB))
        laptop = start_adb_server()
        try:
            async with device_stack(1, processes=True, controller_process=True) as stack:
                serial = stack.serials[0]
                phone_port = int(stack.sims[0].address.rsplit(":", 1)[1])
                async with _tunnel_cli(stack.url, stack.admin_token, serial) as port:
                    address = f"127.0.0.1:{port}"
                    await asyncio.to_thread(laptop.client().connect, address, 30.0)
                    await asyncio.to_thread(wait_for_state, laptop.client(), address, "device",
                                            60.0)
                    await asyncio.to_thread(_push, laptop, address, local)  # warm-up
                    await asyncio.to_thread(_push, stack.adb, serial, local)
                    mine: list[float] = []
                    base: list[float] = []
                    for _ in range(reps):
                        base.append(await asyncio.to_thread(_push, stack.adb, serial, local))
                        mine.append(await asyncio.to_thread(_push, laptop, address, local))
                    await asyncio.to_thread(_shell_rtts, laptop.port, address, 3)
                    await asyncio.to_thread(_shell_rtts, stack.adb.port, serial, 3)
                    rtt_base = await asyncio.to_thread(_shell_rtts, stack.adb.port, serial,
                                                       shells)
                    rtt_mine = await asyncio.to_thread(_shell_rtts, laptop.port, address, shells)
                    link_ms = await _link_rtt(stack, serial, shells)
                    floor_ms = await asyncio.to_thread(_floor, laptop, phone_port, shells)
                    await asyncio.to_thread(laptop.client().disconnect, address)
        finally:
            laptop.kill()
    return [
        noted(figure("tunnel_push_mb_per_s", median(mine), "MB/s", median(base)),
              f"{reps} alternating `adb push` of {size // MIB} MiB: through a tunnel (laptop adb "
              "server → tunnel → controller → bridge → adb server → device) vs straight on the "
              f"bridge's adb server; {[round(x, 1) for x in mine]} vs "
              f"{[round(x, 1) for x in base]} MB/s"),
        noted(figure("tunnel_shell_rtt_ms", median(rtt_mine), "ms", median(rtt_base)),
              f"{shells} sequential `shell:echo` streams through the tunnel vs straight to the "
              "device on the bridge's adb server, median; bound: 2 × straight + the link's round "
              f"trip ({link_ms:.3f} ms: a WebSocket ping on the tunnel's and on the bridge's "
              "link, medians added); three bare relay processes in front of the phone "
              f"{floor_ms:.3f} ms (the floor)",
              link_rtt_ms=round(link_ms, 4), bound=round(2 * median(rtt_base) + link_ms, 4),
              relay_floor_ms=round(floor_ms, 4)),
    ]


def run(quick: bool, *, size_mib: int | None = None, reps: int | None = None,
        shells: int | None = None) -> list[dict[str, Any]]:
    return asyncio.run(_run((size_mib or (4 if quick else 20)) * MIB, reps or (2 if quick else 9),
                            shells or (20 if quick else 100)))
