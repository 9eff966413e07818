"""The bridge-only install (``pip install droidwire``, no extras; docs/deploy.md): its size, the
bridge's idle memory and its time from start to ``welcome``.

* ``bridge_install_mb``: the project's wheel (``pip wheel --no-deps``) installed without extras
  into a fresh virtual environment made ``--without-pip`` (pip itself is not part of what a
  bridge host installs; this run's pip installs into it with ``--python``), then the bytes of
  every file of its site-packages, byte-compiled as pip leaves them. Baseline: the full
  install, ``droidwire[controller]``, summed over the files of the same distributions in this
  checkout's environment (their installed records), with the wheel's own files as measured.
* ``bridge_idle_rss_mb``: ``droidwire bridge`` from that environment, dialled into a real
  controller (a process of its own, SQLite) with a private adb server and no device, its
  resident memory once welcomed and idle. Baseline: a bare websockets client in the same
  environment, connected to a bare websockets server with one message echoed, then idle.
* ``bridge_start_to_welcome_s``: from spawning that bridge to its ``link open`` log line (the
  controller's ``welcome`` received); median of several starts. Baseline: from spawning the
  bare client to its echoed message.

QUICK reuses everything but repeats the starts fewer times: the install is the figure itself
(the venv is built in both modes; pip's cache and the local wheel make it seconds).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.common import Figure, figure, median
from bench.stack import ROOT, ServerProcess, free_port, rss_kb, seed_bridge_tokens, start_all

__all__ = ["run"]

MB = 1024 * 1024
IDLE_S = 2.0  # idle after welcome before reading memory: the start-up's garbage settles
WAIT_S = 120.0  # a start that takes longer is a failure, not a measurement
LINK_OPEN = "link open to"

BARE_CLIENT = """
import asyncio, sys
from websockets.asyncio.client import connect
async def main():
    async with connect(sys.argv[1], compression=None) as ws:
        await ws.send(b"hello")
        await ws.recv()
        print("ready", flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=600, cwd=ROOT)


def _bridge_venv(tmp: Path) -> Path:
    """A fresh venv holding the wheel without extras; its directory."""
    wheels = tmp / "wheel"
    _pip("wheel", "--no-deps", "-w", str(wheels), ROOT)
    wheel = next(wheels.glob("droidwire-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    _pip("--python", str(venv / "bin" / "python"), "install", "-c",
         str(Path(ROOT) / "constraints.txt"), str(wheel))
    return venv


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _dist_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for entry in dist.files or ():
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            total += path.stat().st_size
    return total


def _full_install_bytes(own: int) -> int:
    """``droidwire[controller]``: its requirement closure in this environment, plus ``own``
    (the wheel's files as installed: here the project is an editable checkout)."""
    total = own
    seen: set[tuple[str, frozenset[str]]] = set()
    counted: set[str] = {"droidwire"}
    todo = [Requirement("droidwire[controller]")]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(name)
        if name not in counted:
            counted.add(name)
            total += _dist_bytes(dist)
        for line in dist.requires or ():
            child = Requirement(line)
            extras = req.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": e}) for e in extras):
                todo.append(child)
    return total


async def _start(argv: list[str], env: dict[str, str], line: str) -> tuple[
        asyncio.subprocess.Process, float]:
    """Spawn ``argv``; the process and the seconds until a line containing ``line``."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, limit=1 << 20,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(WAIT_S):
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                raise RuntimeError(f"{argv[0]} exited before {line!r}")
            if line in raw.decode(errors="replace"):
                return proc, time.perf_counter() - started


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(WAIT_S):
            # drain: a full pipe would block the process's logging
            assert proc.stdout is not None
            await proc.stdout.read()
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def _runtime(venv: Path, tmp: Path, starts: int) -> list[Figure]:
    from tests.adb_support import start_adb_server

    python = str(venv / "bin" / "python")
    admin = secrets.token_urlsafe(32)
    db_url = f"sqlite:///{tmp / 'controller.db'}"
    tokens = await seed_bridge_tokens(db_url, admin, starts)
    controller = ServerProcess("controller", free_port(), db_url=db_url, admin_token=admin,
                               log=tmp / "controller.log")
    bare = ServerProcess("bare", free_port(), log=tmp / "bare.log")
    adb = start_adb_server()
    await start_all(controller, bare)
    try:
        env = {**os.environ, **adb.env, "HOME": str(tmp), "DROIDWIRE_START_BUDGET": str(WAIT_S)}
        env.pop("PYTHONPATH", None)  # only what the bridge venv holds
        bridge_s: list[float] = []
        bridge_rss: list[float] = []
        for token in tokens:
            argv = [str(venv / "bin" / "droidwire"), "bridge", "--controller",
                    f"http://127.0.0.1:{controller.port}", "--adb-port", str(adb.port),
                    "--log-level", "info"]
            proc, seconds = await _start(argv, {**env, "DROIDWIRE_BRIDGE_TOKEN": token},
                                         LINK_OPEN)
            bridge_s.append(seconds)
            await asyncio.sleep(IDLE_S)  # idle on purpose: the figure is memory at rest
            bridge_rss.append(rss_kb(proc.pid) / 1024)
            await _stop(proc)
        bare_s: list[float] = []
        bare_rss: list[float] = []
        for _ in range(starts):
            proc, seconds = await _start([python, "-c", BARE_CLIENT, bare.url], env, "ready")
            bare_s.append(seconds)
            await asyncio.sleep(IDLE_S)
            bare_rss.append(rss_kb(proc.pid) / 1024)
            await _stop(proc)
    finally:
        await controller.stop()
        await bare.stop()
        adb.kill()
    return [
        figure("bridge_idle_rss_mb", median(bridge_rss), "MiB", median(bare_rss)),
        figure("bridge_start_to_welcome_s", median(bridge_s), "s", median(bare_s)),
    ]


def run(quick: bool = False, starts: int | None = None) -> list[Figure]:
    starts = starts or (2 if quick else 5)
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-bridge-") as name:
        tmp = Path(name)
        venv = _bridge_venv(tmp)
        site = _site_packages(venv)
        own = sum(_tree_bytes(site / pkg) for pkg in
                  ("droidwire", "controller", "device_bridge", "protocol", "fixer"))
        own += _tree_bytes(next(site.glob("droidwire-*.dist-info")))
        installed = _tree_bytes(site)
        figures = [figure("bridge_install_mb", installed / MB, "MiB",
                          _full_install_bytes(own) / MB)]
        figures += asyncio.run(_runtime(venv, tmp, starts))
    return figures
