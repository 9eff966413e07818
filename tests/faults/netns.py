"""Two network namespaces joined by a veth pair, for link-level faults (tests/faults/test_netns.py).

:class:`NetnsPair` creates ``dwf-<pid>-c`` (the controller's side, ``10.231.0.1``) and
``dwf-<pid>-b`` (the bridge's side, ``10.231.0.2``), runs commands inside them and injects
faults on the link: ``cut`` (both veth ends down), ``blackhole`` (a /32 blackhole route on both
sides: packets vanish, the link stays up) and ``delay`` (``tc netem``, when the kernel has it).
It deletes both namespaces on close; :func:`remove_stale` deletes any left by a dead run.

Processes run in a namespace with ``python -m tests.faults.netns ROLE ...``:

* ``controller HOST PORT DB_URL`` — the real runner (``droidwire.serve.run``) with the
  suite's test-scaled settings, bound to ``HOST``;
* ``bridge URL ADB_PORT`` — the real :class:`device_bridge.bridge.Bridge` (plain ws to a
  non-loopback controller: ``controller.allow_plain``), token from ``DROIDWIRE_BRIDGE_TOKEN``;
* ``client URL`` — an HTTP client inside the controller's namespace: one JSON request a line on
  stdin (``{"id", "method", "path", "json"}``), one JSON answer a line on stdout (``{"id",
  "status", "body"}`` or ``{"id", "error"}``), requests served concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

__all__ = ["BRIDGE_IP", "CONTROLLER_IP", "NetnsPair", "kill_inside", "list_namespaces", "netem_available", "netns_available", "remove_stale"]

CONTROLLER_IP = "10.231.0.1"
BRIDGE_IP = "10.231.0.2"
PREFIX = "dwf-"
_NAME = re.compile(r"^dwf-(\d+)-[cb]$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check,
                          stdin=subprocess.DEVNULL)


def list_namespaces() -> list[str]:
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def netns_available() -> tuple[bool, str]:
    """Whether this process may create namespaces (tries one and deletes it)."""
    probe = f"{PREFIX}{os.getpid()}-p"
    try:
        result = _ip("netns", "add", probe, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`ip` not usable: {exc}"
    if result.returncode != 0:
        return False, f"`ip netns add` not permitted: {result.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return True, ""


def netem_available() -> tuple[bool, str]:
    """Whether ``tc qdisc ... netem`` works here (tried on a dummy link in a probe namespace)."""
    probe = f"{PREFIX}{os.getpid()}-p"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "dwfprobe", "type", "veth", "peer", "name", "dwfprobe2")
        result = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev",
                                 "dwfprobe", "root", "netem", "delay", "1ms"],
                                capture_output=True, text=True, timeout=30, check=False,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"tc netem not usable: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    if result.returncode != 0:
        return False, f"tc netem unavailable (kernel without sch_netem?): {result.stderr.strip()}"
    return True, ""


def kill_inside(ns: str) -> None:
    """SIGKILL every process inside namespace ``ns`` (one of this suite's: it started them)."""
    if ns not in list_namespaces():
        return
    out = _ip("netns", "pids", ns, check=False).stdout
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def remove_stale() -> list[str]:
    """Delete ``dwf-<pid>-*`` namespaces whose run (``pid``) is gone; returns their names."""
    removed = []
    for name in list_namespaces():
        match = _NAME.match(name)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            kill_inside(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
        except PermissionError:
            continue
    return removed


class NetnsPair:
    """The two namespaces and their link; ``close()`` deletes them (idempotent)."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.c = f"{PREFIX}{pid}-c"
        self.b = f"{PREFIX}{pid}-b"
        self.veth_c = f"dwfc{pid}"[:15]
        self.veth_b = f"dwfb{pid}"[:15]
        self.faults: set[str] = set()

    def create(self) -> None:
        try:
            _ip("netns", "add", self.c)
            _ip("netns", "add", self.b)
            _ip("link", "add", self.veth_c, "netns", self.c, "type", "veth",
                "peer", "name", self.veth_b, "netns", self.b)
            for ns, dev, addr in ((self.c, self.veth_c, CONTROLLER_IP),
                                  (self.b, self.veth_b, BRIDGE_IP)):
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for ns in (self.c, self.b):
            if ns in list_namespaces():
                _ip("netns", "del", ns, check=False)

    def exec_argv(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    def run(self, ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.exec_argv(ns, *argv), capture_output=True, text=True,
                              timeout=60, check=check, stdin=subprocess.DEVNULL)

    # -- faults --------------------------------------------------------------------------

    def cut(self) -> None:
        _ip("-n", self.c, "link", "set", self.veth_c, "down")
        _ip("-n", self.b, "link", "set", self.veth_b, "down")
        self.faults.add("cut")

    def blackhole(self) -> None:
        _ip("-n", self.c, "route", "add", "blackhole", f"{BRIDGE_IP}/32")
        _ip("-n", self.b, "route", "add", "blackhole", f"{CONTROLLER_IP}/32")
        self.faults.add("blackhole")

    def delay(self, ms: int) -> None:
        for ns, dev in ((self.c, self.veth_c), (self.b, self.veth_b)):
            self.run(ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", f"{ms}ms")
        self.faults.add("delay")

    def heal(self) -> None:
        """Undo every fault: links up, blackhole routes and netem qdiscs gone."""
        if "cut" in self.faults:
            _ip("-n", self.c, "link", "set", self.veth_c, "up")
            _ip("-n", self.b, "link", "set", self.veth_b, "up")
        if "blackhole" in self.faults:
            _ip("-n", self.c, "route", "del", "blackhole", f"{BRIDGE_IP}/32", check=False)
            _ip("-n", self.b, "route", "del", "blackhole", f"{CONTROLLER_IP}/32", check=False)
        if "delay" in self.faults:
            self.run(self.c, "tc", "qdisc", "del", "dev", self.veth_c, "root", check=False)
            self.run(self.b, "tc", "qdisc", "del", "dev", self.veth_b, "root", check=False)
        self.faults.clear()


# -- processes run inside a namespace ------------------------------------------------------


def _controller(host: str, port: int, db_url: str) -> int:
    from controller.config import ControllerConfig
    from droidwire.serve import run
    from tests.faults.timing import SETTINGS

    config = ControllerConfig(host=host, port=port, db_url=db_url,
                              bootstrap_token=os.environ["DROIDWIRE_BOOTSTRAP_TOKEN"],
                              settings=SETTINGS, graceful_shutdown_s=1)
    return 0 if run(config, log_level="warning") else 1


async def _bridge(url: str, adb_port: int) -> int:
    from device_bridge.adb import AdbDevices
    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig
    from tests.conftest import TIME_SCALE
    from tests.faults.timing import SETTINGS

    host = HostConfig.from_mapping({
        "controller": {"url": [url], "allow_plain": True},
        "adb": {"server_port": adb_port, "start_server": False},
        "policy": {"profile": "full"},
    })
    adb = AdbDevices(port=adb_port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.02)
    try:
        async with Bridge(host, token=os.environ["DROIDWIRE_BRIDGE_TOKEN"], devices=adb,
                          build=None, settings=SETTINGS):
            await asyncio.Event().wait()
    finally:
        await adb.aclose()
    return 0


async def _client(url: str) -> int:
    import httpx

    token = os.environ["DROIDWIRE_BOOTSTRAP_TOKEN"]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    lock = asyncio.Lock()
    tasks: set[asyncio.Task[None]] = set()

    async def answer(http: httpx.AsyncClient, request: dict[str, Any]) -> None:
        out: dict[str, Any] = {"id": request.get("id")}
        try:
            response = await http.request(request["method"], request["path"],
                                          json=request.get("json"))
            out["status"] = response.status_code
            try:
                out["body"] = response.json()
            except ValueError:
                out["body"] = response.text
        except Exception as exc:  # reported to the test, which counts it
            out["error"] = f"{type(exc).__name__}: {exc}"
        async with lock:
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()

    async with httpx.AsyncClient(base_url=url, timeout=120.0,
                                 headers={"Authorization": f"Bearer {token}"}) as http:
        while line := await reader.readline():
            with contextlib.suppress(ValueError):
                task = asyncio.create_task(answer(http, json.loads(line)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
    return 0


if __name__ == "__main__":
    role, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if role == "controller" and len(args) == 3:
        sys.exit(_controller(args[0], int(args[1]), args[2]))
    if role == "bridge" and len(args) == 2:
        sys.exit(asyncio.run(_bridge(args[0], int(args[1]))))
    if role == "client" and len(args) == 1:
        sys.exit(asyncio.run(_client(args[0])))
    sys.exit("usage: python -m tests.faults.netns controller HOST PORT DB_URL | "
             "bridge URL ADB_PORT | client URL")
