"""``fleet_throughput``: runs per minute a fleet sustains through two controller replicas.

Two controller replicas (separate processes, cluster mode) on a fresh PostgreSQL database
(``DATABASE_URL``) and Redis (``REDIS_URL``, a key prefix of this run's own); N simulated
devices behind a private adb server, on two real bridges (one with the simulated toolchain),
each holding its session on a different replica. Each run is a ``POST /v1/sandbox/execute``
(waiting for the verdict) of the demo's first test, as an agent sends it.

* baseline: one device's rate — K runs submitted at once for one named device (they queue:
  a device serves one run at a time), runs per minute, times N;
* value: the fleet's rate — N × K runs submitted at once *without* a device, alternately
  through both replicas: placement spreads them over the devices (docs/sandbox.md,
  "Placement"), runs per minute.

Ratio: fleet rate / (N × one device's rate): 1.0 when every device is kept as busy as a
single device with a full queue (target ≥ 0.9). N = 4, K = 4 (quick: N = 2, K = 2). Both
replicas have compiled the test once before the measurement (their APK caches are warm).

Two figures, the same measurement on two kinds of simulated phone
(:mod:`device_bridge.sim.pace`):

* ``fleet_throughput``: phones paced as a fast real phone (``pace="phone"``: installs, app
  starts and the test's own time take wall time, asleep). A lab's phones do that work on their
  own CPUs, so this is what a lab sees: whether the stack keeps every device busy.
* ``fleet_throughput_instant``: the default, instant simulated phone. A run is then almost all
  the host's CPU (both replicas, both bridges, PostgreSQL and the phones' own Python on one
  machine), so on a small machine this figure is bounded by its cores, not by scheduling:
  reported without a target, to show what a run costs the host.
Without ``DATABASE_URL`` and ``REDIS_URL`` the figure is skipped, with a note on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.common import figure
from bench.stack import noted

__all__ = ["run"]


def _test_code() -> str:
    from droidwire.demo import DEMO_TESTS

    return DEMO_TESTS[0].code


@contextlib.asynccontextmanager
async def _database(base: str) -> AsyncIterator[str]:
    import asyncpg
    from sqlalchemy.engine import make_url

    plain = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"dw_bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(plain)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(plain).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def _redis_prefix(base: str) -> AsyncIterator[str]:
    from redis.asyncio import Redis

    prefix = f"dwbench-{secrets.token_hex(6)}"
    client = Redis.from_url(base)
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}prefix={prefix}"
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def _run(devices: int, per_device: int, pace: str) -> list[dict[str, Any]]:
    import httpx

    from device_bridge.adb import AdbDevices
    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig
    from tests.adb_support import connected_sim, free_port, start_adb_server
    from tests.controller.cluster.procs import ReplicaProcess
    from tests.controller.executor.conftest import build_service

    code = _test_code()
    admin = secrets.token_urlsafe(32)
    async with (
        _database(os.environ["DATABASE_URL"]) as db_url,
        _redis_prefix(os.environ["REDIS_URL"]) as redis_url,
    ):
        with tempfile.TemporaryDirectory(prefix="droidwire-bench-") as tmp_name, \
                contextlib.ExitStack() as sync:
            tmp = Path(tmp_name)
            adb = start_adb_server()
            sync.callback(adb.kill)
            sims = [sync.enter_context(connected_sim(adb, pace=pace)) for _ in range(devices)]
            serials = [s.address for s in sims]
            replicas = [ReplicaProcess(free_port(), db_url, redis_url, admin,
                                       tmp / f"replica{i}.log") for i in range(2)]
            layers: list[AdbDevices] = []
            try:
                for replica in replicas:
                    await replica.start()
                clients = [httpx.AsyncClient(base_url=r.url, timeout=600.0,
                                             headers={"Authorization": f"Bearer {admin}"})
                           for r in replicas]
                async with contextlib.AsyncExitStack() as stack:
                    for client in clients:
                        await stack.enter_async_context(client)
                    halves = [serials[: (devices + 1) // 2], serials[(devices + 1) // 2:]]
                    for index, half in enumerate(halves):
                        if not half:
                            continue
                        made = await clients[0].post(
                            "/v1/tokens", json={"kind": "bridge", "name": f"bench{index}"})
                        made.raise_for_status()
                        urls = [replicas[index].url, replicas[1 - index].url]
                        host = HostConfig.from_mapping({
                            "controller": {"url": [u.replace("http://", "ws://") for u in urls]},
                            "adb": {"server_port": adb.port, "start_server": False},
                            "policy": {"expose": half},
                        })
                        layer = AdbDevices(port=adb.port, call_timeout_s=120.0, flush_s=0.02)
                        layers.append(layer)
                        bridge = Bridge(host, token=made.json()["token"], devices=layer,
                                        build=build_service(tmp / f"ws{index}") if index == 0
                                        else None)
                        await stack.enter_async_context(bridge)
                        await bridge.wait_open(120.0)
                    for client in clients:
                        await _wait_devices(client, set(serials))
                    ids = {d["serial"]: d["id"] for d in
                           (await clients[0].get("/v1/devices")).json()}

                    async def execute(client: httpx.AsyncClient, device: str | None) -> None:
                        body: dict[str, Any] = {"test_code": code}
                        if device is not None:
                            body["device"] = device
                        response = await client.post("/v1/sandbox/execute", json=body)
                        response.raise_for_status()
                        if response.json().get("verification_status") == "PENDING":
                            raise RuntimeError(f"a run ended PENDING: {response.json()}")

                    # Warm-up: each replica compiles once (its APK cache), code paths load.
                    await asyncio.gather(*(execute(c, ids[serials[0]]) for c in clients))

                    started = time.perf_counter()
                    await asyncio.gather(*(execute(clients[0], ids[serials[0]])
                                           for _ in range(per_device)))
                    one_s = time.perf_counter() - started
                    one_rate = per_device / one_s * 60

                    total = devices * per_device
                    started = time.perf_counter()
                    await asyncio.gather(*(execute(clients[i % 2], None) for i in range(total)))
                    fleet_s = time.perf_counter() - started
                    fleet_rate = total / fleet_s * 60
            finally:
                for layer in layers:
                    with contextlib.suppress(Exception):
                        await layer.aclose()
                for replica in replicas:
                    await replica.stop()
    name = "fleet_throughput" if pace == "phone" else f"fleet_throughput_{pace}"
    return [
        noted(figure(name, fleet_rate, "runs/min", devices * one_rate),
              f"{total} device-less runs at once through two replicas (alternating) on "
              f"N={devices} simulated devices paced {pace!r} in {fleet_s:.2f} s, against N x "
              "one device's rate "
              f"({per_device} runs queued for one device in {one_s:.2f} s = "
              f"{one_rate:.1f} runs/min); PostgreSQL + Redis, both replicas' caches warm",
              n=devices),
    ]


async def _wait_devices(http: Any, serials: set[str]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + 120.0
    while True:
        response = await http.get("/v1/devices")
        ready = {d.get("serial") for d in response.json() if d.get("state") == "device"}
        if serials <= ready:
            return
        if loop.time() > end:
            raise RuntimeError(f"devices {sorted(serials - ready)} never reached the replicas")
        await asyncio.sleep(0.05)  # start-up of a benchmark, not a race in a test


def run(quick: bool, *, devices: int | None = None, per_device: int | None = None,
        paces: tuple[str, ...] = ("phone", "instant")) -> list[dict[str, Any]]:
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        print("fleet_throughput skipped: it needs DATABASE_URL (PostgreSQL) and REDIS_URL",
              file=sys.stderr)
        return []
    n, k = devices or (2 if quick else 4), per_device or (2 if quick else 4)
    return [fig for pace in paces for fig in asyncio.run(_run(n, k, pace))]
