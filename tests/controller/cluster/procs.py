"""Replica and bridge processes for the cluster tests.

``python -m tests.controller.cluster.procs PORT DB_URL REDIS_URL`` runs a controller replica: the real
runner (``droidwire.serve.run``, what ``droidwire controller --redis … --db …`` calls)
with the suite's test-scaled settings, which the CLI has no flags for. Bridges are the real
``droidwire bridge`` CLI, configured with every replica's URL for failover.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import httpx

from tests.conftest import TIME_SCALE
from tests.controller.test_hub_support import fast_settings

__all__ = ["SETTINGS", "WAIT_S", "BridgeProcess", "ReplicaProcess"]

WAIT_S = 30.0 * TIME_SCALE
# A process start (imports, migration) on a loaded 2-core box can take most of WAIT_S when
# three start at once: its own, longer bound (not what the tests are about).
START_S = 90.0 * TIME_SCALE
# Liveness timings: a replica or a bridge stalled for a moment on a loaded 2-core box (four
# test workers, real PostgreSQL) must not pass for dead. With a 0.5 s ping timeout a
# replica dropped both bridges while planning a burst of runs and refused them all as
# bridge_unavailable; with a 1 s TTL a stalled replica would pass for dead to the other one.
# A killed replica is still seen at once (its sockets reset) and its keys expire in 2.5 s.
PING_S = 2.0 * TIME_SCALE
SETTINGS = fast_settings(
    ping_interval_s=PING_S,
    ping_timeout_s=PING_S,
    close_timeout_s=0.3 * TIME_SCALE,
    handshake_timeout_s=3.0 * TIME_SCALE,
    grace_period_s=5.0 * TIME_SCALE,
    liveness_interval_s=0.5 * TIME_SCALE,
    rpc_timeout_s=20.0 * TIME_SCALE,
    cluster_heartbeat_s=0.5 * TIME_SCALE,
    cluster_ttl_s=2.5 * TIME_SCALE,
    # Streams end on a revocation's message (test_revocation.py), not a periodic re-check.
    stream_reauth_s=600.0,
)


class _Process:
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=log,
            )

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def wait(self) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), WAIT_S)

    async def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.wait()

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), WAIT_S)
        except TimeoutError:
            await self.kill9()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class ReplicaProcess(_Process):
    """A controller replica on a fixed loopback port."""

    def __init__(self, port: int, db_url: str, redis_url: str, token: str,
                 log_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.argv = [sys.executable, "-m", "tests.controller.cluster.procs", str(port), db_url, redis_url]
        self.env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": token}

    async def start(self) -> None:
        await super().start()
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as http:
            async with asyncio.timeout(START_S):
                while True:
                    if self.returncode is not None:
                        raise AssertionError(f"replica exited {self.returncode}:\n"
                                             f"{self.log()[-3000:]}")
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/healthz")).status_code == 200:
                            return
                    await asyncio.sleep(0.02)


class BridgeProcess(_Process):
    """``droidwire bridge`` dialling ``urls`` in order (failover), its token in the env."""

    def __init__(self, urls: list[str], token: str, adb_port: int, adb_env: dict[str, str],
                 log_path: Path) -> None:
        self.log_path = log_path
        self.argv = [sys.executable, "-c", "from droidwire import main; main()", "bridge"]
        for url in urls:
            self.argv += ["--controller", url]
        self.argv += [
            "--adb-port", str(adb_port), "--no-start-adb", "--profile", "full",
            "--ping-interval", str(PING_S), "--ping-timeout", str(PING_S),
            "--close-timeout", str(0.3 * TIME_SCALE),
            "--handshake-timeout", str(3 * TIME_SCALE),
            "--backoff-first-max", str(0.05 * TIME_SCALE),
            "--backoff-base", str(0.1 * TIME_SCALE), "--backoff-cap", str(0.5 * TIME_SCALE),
            "--log-level", "info",
        ]
        self.env = {**os.environ, **adb_env, "DROIDWIRE_BRIDGE_TOKEN": token}


def _replica(port: int, db_url: str, redis_url: str) -> int:
    from controller.config import ControllerConfig
    from droidwire.serve import run

    config = ControllerConfig(host="127.0.0.1", port=port, db_url=db_url, redis_url=redis_url,
                              bootstrap_token=os.environ["DROIDWIRE_BOOTSTRAP_TOKEN"],
                              settings=SETTINGS, graceful_shutdown_s=1)
    return 0 if run(config, log_level="info") else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m tests.controller.cluster.procs PORT DB_URL REDIS_URL")
    sys.exit(_replica(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
