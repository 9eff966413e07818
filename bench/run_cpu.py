"""Where the CPU of one sandbox run goes, per process: ``python -m bench.run_cpu [-k K]``.

Not a figure of ``make bench`` (no ``bench_`` prefix): a measuring tool for the fleet and
fan-out figures (docs/benchmarks.md, "Where a run's CPU goes"). The stack is ``fleet_throughput``'s, each piece in a
process of its own so that its CPU is its own: two controller replicas (cluster mode) on a
fresh PostgreSQL database and a Redis key prefix, one simulated device (``python -m
bench.stack sim``) behind a private adb server, one real bridge with the simulated toolchain
(its session on the first replica). After two warm-up runs through each replica, K runs of
the demo's first test one after another, through the first replica (the bridge's own:
``local``) and then through the second (the call forwarded through Redis: ``forwarded``).
For each process, user + system CPU seconds from ``/proc/PID/stat`` before and after, per
run; PostgreSQL is the backends connected to this run's database (``pg_stat_activity``),
Redis the ``redis-server`` process (shared with whatever else uses it). An idle window of
the same stack is measured too, so what the heartbeats cost is not charged to the runs.

``--profile DIR``: the replicas and the bridge also run cProfile over the measured runs
(toggled with ``SIGUSR1``/``SIGUSR2``) and write ``DIR/{replica0,replica1,bridge}.prof``;
CPU figures from a profiled pass are inflated by the profiler, so measure without it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` (all its threads), from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def _pids_by(predicate: Any) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if predicate(cmd):
                out.append(int(entry.name))
    return out


def _profiled(name: str, directory: str | None) -> None:
    """SIGUSR1 starts cProfile in this process, SIGUSR2 stops it and writes DIR/NAME.prof."""
    if not directory:
        return
    profiler = cProfile.Profile(time.process_time)  # CPU, not wall: waits are not costs
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())

    def stop(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(str(Path(directory) / f"{name}.prof"))

    signal.signal(signal.SIGUSR2, stop)


def _replica_main(port: int, db_url: str, redis_url: str, name: str, profile: str | None) -> None:
    from tests.controller.cluster.procs import _replica

    _profiled(name, profile)
    sys.exit(_replica(port, db_url, redis_url))


async def _bridge_main(urls: list[str], adb_port: int, serial: str, state: str,
                       profile: str | None) -> None:
    from device_bridge.adb import AdbDevices
    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig
    from tests.controller.executor.conftest import build_service

    _profiled("bridge", profile)
    host = HostConfig.from_mapping({
        "controller": {"url": urls},
        "adb": {"server_port": adb_port, "start_server": False},
        "policy": {"expose": [serial]},
    })
    layer = AdbDevices(port=adb_port, call_timeout_s=120.0, flush_s=0.02)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with Bridge(host, token=os.environ["DROIDWIRE_BRIDGE_TOKEN"], devices=layer,
                          build=build_service(Path(state))) as bridge:
            await bridge.wait_open(120.0)
            print("open", flush=True)
            await stop.wait()
    finally:
        await layer.aclose()


async def _pg_backends(db_url: str, name: str) -> list[int]:
    import asyncpg

    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1 "
                                "AND pid <> pg_backend_pid()", name)
    finally:
        await conn.close()
    return [int(r["pid"]) for r in rows]


async def _measure(k: int, profile: str | None, idle_s: float) -> dict[str, Any]:
    import httpx
    from sqlalchemy.engine import make_url

    from bench.bench_fleet import _database, _redis_prefix, _test_code, _wait_devices
    from bench.stack import _connected_sim_process
    from tests.adb_support import free_port, start_adb_server
    from tests.controller.cluster.procs import ReplicaProcess

    code = _test_code()
    admin = secrets.token_urlsafe(32)
    report: dict[str, Any] = {"k": k}
    async with (
        _database(os.environ["DATABASE_URL"]) as db_url,
        _redis_prefix(os.environ["REDIS_URL"]) as redis_url,
    ):
        db_name = str(make_url(db_url).database)
        with tempfile.TemporaryDirectory(prefix="droidwire-runcpu-") as tmp_name, \
                contextlib.ExitStack() as sync:
            tmp = Path(tmp_name)
            adb = start_adb_server()
            sync.callback(adb.kill)
            sim = sync.enter_context(_connected_sim_process(adb))
            replicas = [ReplicaProcess(free_port(), db_url, redis_url, admin,
                                       tmp / f"replica{i}.log") for i in range(2)]
            for i, replica in enumerate(replicas):
                replica.argv = [sys.executable, "-m", "bench.run_cpu", "replica",
                                str(replica.port), db_url, redis_url, f"replica{i}",
                                profile or ""]
            bridge: asyncio.subprocess.Process | None = None
            try:
                for replica in replicas:
                    await replica.start()
                async with httpx.AsyncClient(
                        base_url=replicas[0].url, timeout=600.0,
                        headers={"Authorization": f"Bearer {admin}"}) as c0, \
                        httpx.AsyncClient(
                        base_url=replicas[1].url, timeout=600.0,
                        headers={"Authorization": f"Bearer {admin}"}) as c1:
                    made = await c0.post("/v1/tokens", json={"kind": "bridge", "name": "cpu"})
                    made.raise_for_status()
                    urls = [r.url.replace("http://", "ws://") for r in replicas]
                    bridge = await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "bench.run_cpu", "bridge", json.dumps(urls),
                        str(adb.port), sim.address, str(tmp / "ws"), profile or "",
                        env={**os.environ, "DROIDWIRE_BRIDGE_TOKEN": made.json()["token"]},
                        stdout=asyncio.subprocess.PIPE)
                    assert bridge.stdout is not None
                    await asyncio.wait_for(bridge.stdout.readline(), 120.0)
                    for client in (c0, c1):
                        await _wait_devices(client, {sim.address})
                    device = {d["serial"]: d["id"] for d in
                              (await c0.get("/v1/devices")).json()}[sim.address]

                    async def execute(client: httpx.AsyncClient) -> None:
                        response = await client.post("/v1/sandbox/execute",
                                                     json={"test_code": code, "device": device})
                        response.raise_for_status()
                        if response.json().get("verification_status") == "PENDING":
                            raise RuntimeError(f"a run ended PENDING: {response.json()}")

                    for client in (c0, c1, c0, c1):  # warm-up: compile caches, code paths
                        await execute(client)
                    adb_pids = _pids_by(lambda cmd: f"tcp:{adb.port}" in cmd
                                        and "fork-server" in cmd)
                    redis_pids = _pids_by(lambda cmd: cmd.startswith("redis-server"))
                    pg = await _pg_backends(os.environ["DATABASE_URL"], db_name)
                    groups: dict[str, list[int]] = {
                        "replica 0 (holds the bridge)": [replicas[0].proc.pid],  # type: ignore[union-attr]
                        "replica 1": [replicas[1].proc.pid],  # type: ignore[union-attr]
                        "bridge": [bridge.pid],
                        "simulated device": [sim.sim.proc.pid],
                        "adb server": adb_pids,
                        f"PostgreSQL ({len(pg)} backends)": pg,
                        "Redis": redis_pids,
                        "load generator (this process)": [os.getpid()],
                    }

                    def sample() -> dict[str, tuple[float, float]]:
                        out = {}
                        for label, pids in groups.items():
                            user = system = 0.0
                            for pid in pids:
                                with contextlib.suppress(OSError):
                                    u, s = cpu_s(pid)
                                    user, system = user + u, system + s
                            out[label] = (user, system)
                        return out

                    def spent(before: dict[str, tuple[float, float]],
                              after: dict[str, tuple[float, float]],
                              per: float) -> dict[str, list[float]]:
                        return {n: [(after[n][0] + after[n][1] - before[n][0] - before[n][1])
                                    / per, (after[n][1] - before[n][1]) / per] for n in groups}

                    before = sample()
                    await asyncio.sleep(idle_s)
                    after = sample()
                    report["idle_per_s"] = spent(before, after, idle_s)
                    profiled = [replicas[0].proc.pid, replicas[1].proc.pid,  # type: ignore[union-attr]
                                bridge.pid]
                    if profile:
                        for pid in profiled:
                            os.kill(pid, signal.SIGUSR1)
                    for label, client in (("local", c0), ("forwarded", c1)):
                        before = sample()
                        started = time.perf_counter()
                        for _ in range(k):
                            await execute(client)
                        wall = time.perf_counter() - started
                        after = sample()
                        report[label] = {
                            "wall_per_run_s": wall / k,
                            "cpu_per_run_s": spent(before, after, k),
                        }
                    if profile:
                        for pid in profiled:
                            os.kill(pid, signal.SIGUSR2)
                        await asyncio.sleep(2.0)
            finally:
                if bridge is not None and bridge.returncode is None:
                    bridge.send_signal(signal.SIGTERM)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(bridge.wait(), 30.0)
                for replica in replicas:
                    await replica.stop()
    return report


def _print(report: dict[str, Any]) -> None:
    for label in ("local", "forwarded"):
        part = report[label]
        print(f"\n{label}: {report['k']} runs, {part['wall_per_run_s'] * 1000:.0f} ms wall each")
        total = 0.0
        for name, (value, system) in part["cpu_per_run_s"].items():
            idle = report["idle_per_s"][name][0] * part["wall_per_run_s"]
            total += value - idle
            print(f"  {name:34s} {value * 1000:7.1f} ms  (system {system * 1000:5.1f}, "
                  f"idle share {idle * 1000:5.1f})")
        print(f"  {'total, idle shares taken out':34s} {total * 1000:7.1f} ms")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "replica":
        _replica_main(int(argv[1]), argv[2], argv[3], argv[4], argv[5] or None)
        return
    if argv and argv[0] == "bridge":
        asyncio.run(_bridge_main(json.loads(argv[1]), int(argv[2]), argv[3], argv[4],
                                 argv[5] or None))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.run_cpu", description=__doc__)
    parser.add_argument("-k", type=int, default=20, help="runs measured each way")
    parser.add_argument("--profile", help="write cProfile files of the measured runs here")
    parser.add_argument("--idle", type=float, default=5.0, help="idle window, s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        sys.exit("needs DATABASE_URL (PostgreSQL) and REDIS_URL")
    report = asyncio.run(_measure(args.k, args.profile, args.idle))
    if args.json:
        print(json.dumps(report))
    _print(report)


if __name__ == "__main__":
    main()
