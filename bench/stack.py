"""Shared set-up for the benchmarks: processes, stacks, lightweight bridges, measurements.

Two kinds of set-up:

* **in-process** (:func:`device_stack`): a private adb server (the binary adbutils ships, on a
  free port, killed at exit), simulated devices in threads of their own, a controller on
  uvicorn and a real :class:`~device_bridge.bridge.Bridge` with the simulated toolchain, all
  on this process's event loop — what ``droidwire demo`` starts, used by the shell and
  sandbox benchmarks;
* **separate processes** (:class:`ServerProcess`): a controller or a bare websockets server in
  a process of its own, so its memory (``/proc/PID/status`` VmRSS) and its event loop's delay
  are its own, not the load generator's. The process is this module run as a script
  (``python -m bench.stack controller|bare``); it listens on a socket with ``SO_REUSEPORT``,
  so a second server can start on the same port before the first stops (the restart of the
  reconnect storm), and answers ``SIGUSR1`` with one JSON line of its loop-delay samples.

The load generator's bridges, lightweight protocol clients that connect to those servers
(:class:`~bench.crowd.BridgeClient`, :class:`~bench.crowd.BareClient`), live in
:mod:`bench.crowd`; they are re-exported here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Figure, die_with_parent, percentile
from bench.crowd import BareClient, BridgeClient, Tally, close_crowd, open_crowd  # re-exported

__all__ = [
    "BACKLOG",
    "DeviceStack",
    "LoopMonitor",
    "ServerProcess",
    "device_stack",
    "free_port",
    "noted",
    "raise_nofile",
    "rss_kb",
    "seed_bridge_tokens",
    "start_all",
]
# The load generator's clients live in bench.crowd; importable from here too.
__all__ += ["BareClient", "BridgeClient", "Tally", "close_crowd", "open_crowd"]

#: The listen backlog of every server here (uvicorn's default), so neither side of a
#: comparison drops SYNs the other would have queued.
BACKLOG = 2048
START_TIMEOUT_S = 60.0
ROOT = str(Path(__file__).resolve().parent.parent)  # where `python -m bench.stack` works
LOOP_TICK_S = 0.005


def noted(fig: Figure, notes: str, **extra: Any) -> dict[str, Any]:
    """``fig`` with a ``notes`` key (and any ``extra`` keys): how the figure was measured."""
    return {**fig, **extra, "notes": notes}


def adb_shell(port: int, serial: str, command: str) -> bytes:
    """``command``'s output, run as ``adb shell`` runs it on the adb server at ``port``: connect,
    ``host:transport:SERIAL``, ``shell:COMMAND``, read to the end — with the bridge's own adb
    client (:class:`device_bridge.adb.wire.AdbConnection`). Not adbutils' ``shell()``, which
    sleeps 10 ms as it closes each connection: more than the whole round trip to a simulated
    phone."""
    from device_bridge.adb.wire import AdbConnection

    with AdbConnection("127.0.0.1", port) as conn:
        for request in (f"host:transport:{serial}", f"shell:{command}"):
            conn.send_command(request)
            conn.check_okay()
        output = bytearray()
        while chunk := conn.recv(4096):
            output += chunk
    return bytes(output)


def raise_nofile(want: int) -> int:
    """Raise this process's open-file limit (soft, up to the hard limit); children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def rss_kb(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range when it can: the
    servers here re-bind their port on every restart, and thousands of client sockets take
    ephemeral ports meanwhile — one of them could be sitting on a port picked from that range."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, low) if low > 11_000 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port on 127.0.0.1")


def _listen(port: int, *, reuse_port: bool = False) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # accepted sockets inherit it (without it, Nagle adds ~40 ms to small frames).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


# -- event-loop delay -----------------------------------------------------------------------


class LoopMonitor:
    """How late the event loop wakes a task that sleeps :data:`LOOP_TICK_S` (ms samples)."""

    def __init__(self, tick_s: float = LOOP_TICK_S) -> None:
        self.tick_s = tick_s
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(self.tick_s)
            self.samples.append(max(0.0, loop.time() - started - self.tick_s) * 1000.0)

    def start(self) -> LoopMonitor:
        self._task = asyncio.create_task(self._run(), name="bench-loop-monitor")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def take(self) -> list[float]:
        """The samples so far; starts a new window."""
        samples, self.samples = self.samples, []
        return samples

    @staticmethod
    def p99(samples: list[float]) -> float:
        return percentile(samples, 99) if samples else 0.0

    async def __aenter__(self) -> LoopMonitor:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# -- tokens ---------------------------------------------------------------------------------


async def seed_bridge_tokens(db_url: str, admin_token: str, n: int) -> list[str]:
    """Migrate the store at ``db_url`` and give it ``n`` bridges with one token each (bulk
    insert, the rows ``POST /v1/tokens`` would write); returns the secrets."""
    from sqlalchemy import insert, select

    from controller.auth import ADMIN_USER, ensure_bootstrap_admin, generate_token, hash_token
    from controller.store import Store
    from controller.store.models import Bridge, Token, TokenKind, User, new_id, utcnow

    secrets_: list[str] = []
    bridges: list[dict[str, Any]] = []
    tokens: list[dict[str, Any]] = []
    async with Store(db_url) as store:
        await store.migrate()
        await ensure_bootstrap_admin(store, admin_token)
        async with store.session() as session, session.begin():
            owner = (await session.execute(select(User.id).where(User.name == ADMIN_USER))).scalar_one()
            at = utcnow()
            for i in range(n):
                bridge_id = new_id()
                secret = generate_token(TokenKind.BRIDGE)
                name = f"bench-{i:05d}"
                bridges.append({"id": bridge_id, "name": name, "owner_id": owner, "created_at": at})
                tokens.append({"id": new_id(), "kind": TokenKind.BRIDGE.value, "name": name,
                               "hash": hash_token(secret), "owner_id": owner,
                               "bridge_id": bridge_id, "scopes": [], "created_at": at})
                secrets_.append(secret)
            if n:
                await session.execute(insert(Bridge), bridges)
                await session.execute(insert(Token), tokens)
    return secrets_


# -- server processes -----------------------------------------------------------------------


class ServerProcess:
    """``python -m bench.stack KIND …`` in a process of its own (a controller or a bare server)."""

    def __init__(self, kind: str, port: int, *, db_url: str | None = None,
                 admin_token: str | None = None, log: Path | None = None) -> None:
        self.kind = kind
        self.port = port
        self.argv = [sys.executable, "-m", "bench.stack", kind, "--port", str(port)]
        if db_url is not None:
            self.argv += ["--db", db_url]
        self.env = dict(os.environ)
        if admin_token is not None:
            self.env["DROIDWIRE_BOOTSTRAP_TOKEN"] = admin_token  # never in argv (ps shows it)
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def _line(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), START_TIMEOUT_S)
        if not raw:
            tail = ""
            if self.log is not None and self.log.exists():
                tail = ": " + self.log.read_text(errors="replace")[-800:]
            raise RuntimeError(f"{self.kind} server on port {self.port} exited{tail}")
        return dict(json.loads(raw))

    async def start(self) -> ServerProcess:
        stderr = self.log.open("ab") if self.log is not None else subprocess.DEVNULL
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=stderr, cwd=ROOT, limit=1 << 20,
            )
        finally:
            if self.log is not None:
                stderr.close()  # type: ignore[union-attr]
        ready = await self._line()
        if ready.get("ready") != self.port:
            raise RuntimeError(f"{self.kind} server did not start: {ready}")
        return self

    async def loop_window(self) -> dict[str, float]:
        """The server's loop delay since the last call: ``{"n", "p99", "max"}`` (ms)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)
        return dict((await self._line())["loop_ms"])

    def terminate(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    async def wait(self, limit_s: float = START_TIMEOUT_S) -> None:
        if self.proc is None:
            return
        try:
            await asyncio.wait_for(self.proc.wait(), limit_s)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def stop(self) -> None:
        self.terminate()
        await self.wait()


async def start_all(*servers: ServerProcess) -> None:
    """Start ``servers`` concurrently; if one fails, stop them all and raise its error."""
    outcomes = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        for server in servers:
            await server.stop()
        raise failed[0]


async def _serve_controller(port: int, db_url: str) -> None:
    from controller.config import ControllerConfig
    from droidwire.serve import ControllerServer, uvicorn_config

    config = ControllerConfig(db_url=db_url, bootstrap_token=os.environ.get(
        "DROIDWIRE_BOOTSTRAP_TOKEN"))
    # The same server and uvicorn configuration as `droidwire controller` (its heap settled
    # once started: droidwire.serve.settle_heap), on a socket we made.
    server = ControllerServer(uvicorn_config(config, log_level="warning", log_config=None))
    sock = _listen(port, reuse_port=True)
    monitor = LoopMonitor().start()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, _report, monitor)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("the controller did not start")
        await asyncio.sleep(0.01)
    _say({"ready": port})
    await task


async def _serve_bare(port: int) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    from protocol.settings import DEFAULTS

    async def handler(ws: ServerConnection) -> None:
        # One round trip, as hello/welcome, then hold the connection.
        with contextlib.suppress(Exception):
            await ws.send(await ws.recv())
            await ws.wait_closed()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    monitor = LoopMonitor().start()
    loop.add_signal_handler(signal.SIGUSR1, _report, monitor)
    async with serve(handler, sock=_listen(port, reuse_port=True), compression=None,
                     max_size=DEFAULTS.max_frame_bytes, ping_interval=DEFAULTS.ping_interval_s,
                     ping_timeout=DEFAULTS.ping_timeout_s):
        _say({"ready": port})
        await stop.wait()


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _report(monitor: LoopMonitor) -> None:
    samples = monitor.take()
    _say({"loop_ms": {"n": len(samples), "p99": round(LoopMonitor.p99(samples), 3),
                      "max": round(max(samples, default=0.0), 3)}})


# -- the in-process device stack ------------------------------------------------------------


@dataclass
class DeviceStack:
    """A controller, a bridge and simulated devices behind a private adb server."""

    url: str
    http: Any  # httpx.AsyncClient with the admin token
    serials: list[str]
    adb: Any  # tests.adb_support.AdbServer
    app: Any
    sims: list[Any] = field(default_factory=list)  # tests.adb_support.ConnectedSim
    admin_token: str = ""
    bridge: Any = None  # the device_bridge.bridge.Bridge serving them, in this process


@contextlib.asynccontextmanager
async def device_stack(devices: int = 1, *, processes: bool = False,
                       controller_process: bool = False,
                       pace: str = "instant") -> AsyncIterator[DeviceStack]:
    """Everything ``droidwire demo`` starts, with ``devices`` simulated devices: threads of
    this process, or (``processes``) each in a process of its own, as a lab's devices are
    separate machines. ``controller_process``: the controller too runs in a process of its
    own (``python -m bench.stack controller``, ``app`` is None), as it runs on another machine
    than the bridge; the bridge stays in this process. ``pace``: the simulated phones' pace
    (:mod:`device_bridge.sim.pace`)."""
    import httpx
    import uvicorn

    from controller.config import ControllerConfig
    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig
    from droidwire.serve import uvicorn_config
    from tests.adb_support import connected_sim, start_adb_server

    admin = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-") as tmp_name, \
            contextlib.ExitStack() as sync:
        tmp = Path(tmp_name)
        adb = start_adb_server()
        sync.callback(adb.kill)
        start = _connected_sim_process if processes else connected_sim
        sims = [sync.enter_context(start(adb, pace=pace)) for _ in range(devices)]
        serials = [s.address for s in sims]
        db_url = f"sqlite:///{tmp / 'controller.db'}"
        own: ServerProcess | None = None
        app: Any = None
        if controller_process:
            probe = _listen(0)
            port = probe.getsockname()[1]
            probe.close()  # the controller binds it again (SO_REUSEPORT)
            own = ServerProcess("controller", port, db_url=db_url, admin_token=admin,
                                log=tmp / "controller.log")
            await own.start()
            url = f"http://127.0.0.1:{port}"
        else:
            config = ControllerConfig(db_url=db_url, bootstrap_token=admin)
            sock = _listen(0)
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            uv = uvicorn_config(config, log_level="warning", log_config=None)
            app = uv.app
            server = uvicorn.Server(uv)
            task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=300.0,
                                         headers={"Authorization": f"Bearer {admin}"}) as http:
                (await http.get("/healthz")).raise_for_status()
                created = await http.post("/v1/tokens", json={"kind": "bridge", "name": "bench"})
                created.raise_for_status()
                host = HostConfig.from_mapping({
                    "controller": {"url": [url.replace("http://", "ws://")]},
                    "adb": {"connect": serials, "server_port": adb.port, "start_server": False},
                    "build": {"toolchain": "simulated", "state_dir": str(tmp / "workspaces")},
                }, base=tmp)
                async with Bridge(host, token=created.json()["token"]) as bridge:
                    await bridge.wait_open(START_TIMEOUT_S)
                    await _wait_devices(http, set(serials))
                    yield DeviceStack(url=url, http=http, serials=serials, adb=adb, app=app,
                                      sims=sims, admin_token=admin, bridge=bridge)
        finally:
            if own is not None:
                await own.stop()
            else:
                server.should_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, START_TIMEOUT_S)
                sock.close()


async def _wait_devices(http: Any, serials: set[str]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + START_TIMEOUT_S
    while True:
        response = await http.get("/v1/devices")
        ready = {d.get("serial") for d in response.json() if d.get("state") == "device"}
        if serials <= ready:
            return
        if loop.time() > end:
            raise RuntimeError(f"devices {sorted(serials - ready)} never reached the controller")
        await asyncio.sleep(0.05)  # start-up of a benchmark, not a race in a test


@contextlib.contextmanager
def timer() -> Iterator[Callable[[], float]]:
    """``with timer() as elapsed: …; elapsed()`` → seconds (frozen at exit)."""
    started = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - started
    end.append(time.perf_counter())


# -- the server processes' entry point ------------------------------------------------------


async def _serve_sim(pace: str) -> None:
    """One simulated device (paced ``pace``) in this process, on a free port: says its
    address, then serves until SIGTERM (or its parent's death)."""
    from device_bridge.sim.device import SimDevice

    device = SimDevice(port=0, noise_interval=None, pace=pace)
    await device.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    _say({"address": device.address})
    await stop.wait()
    await device.stop()


class _SimProcess:
    """A simulated device in a process of its own, as :class:`ConnectedSim` wants it."""

    def __init__(self, pace: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.stack", "sim", "--port", "0", "--pace", pace], cwd=ROOT,
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the simulated device process did not start")
        self.address = str(json.loads(line)["address"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextlib.contextmanager
def _connected_sim_process(adb: Any, pace: str = "instant") -> Iterator[Any]:
    from tests.adb_support import ConnectedSim

    sim = _SimProcess(pace)
    try:
        handle = ConnectedSim(adb, sim)
        handle.connect()
        try:
            yield handle
        finally:
            handle.disconnect()
    finally:
        sim.close()


def _main(argv: list[str] | None = None) -> None:
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m bench.stack")
    parser.add_argument("kind", choices=("controller", "bare", "sim"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db")
    parser.add_argument("--pace", default="instant")
    args = parser.parse_args(argv)
    if args.kind == "controller":
        asyncio.run(_serve_controller(args.port, args.db))
    elif args.kind == "sim":
        asyncio.run(_serve_sim(args.pace))
    else:
        asyncio.run(_serve_bare(args.port))


if __name__ == "__main__":
    _main()
