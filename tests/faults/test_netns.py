"""Link-level network faults between a real controller and a real bridge in two namespaces.

``dwf-<pid>-c`` holds the controller process (``10.231.0.1``) and an HTTP client process that
issues every REST call from inside that namespace; ``dwf-<pid>-b`` holds a private adb server,
a simulated device (``droidwire sim-device``) and the bridge process, which dials
``ws://10.231.0.1:PORT`` (plain ws off loopback: ``allow_plain``). A veth pair joins them, and
the faults are the link's: ``cut`` (both veth ends down) and ``blackhole`` (a /32 blackhole
route both ways), each while shell RPCs with unique ids are in flight, held until the
controller has seen the bridge go, then healed. ``delay`` (``tc netem``) runs when the kernel
has ``sch_netem`` and is skipped with the reason otherwise.

Figures: recovery rate, median / p99 time from healing the link to the bridge back (a new
connection, its device listed), lost results and doubled results (from the device's
``SimShell`` log): both must be 0. Namespaces and every process in them are removed in
``finally`` and at session end (stale ``dwf-<pid>-*`` of dead runs too).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adb_support import ADB_BINARY
from tests.conftest import require_or_skip
from tests.faults.figures import record, record_times, size
from tests.faults.netns import (
    CONTROLLER_IP,
    NetnsPair,
    kill_inside,
    list_namespaces,
    netem_available,
    netns_available,
    remove_stale,
)
from tests.faults.timing import WAIT_S

pytestmark = pytest.mark.adb

AREA = "network faults (network namespaces, veth link)"
MODES = ["cut", "blackhole", "cut"]
CALLS_PER_FAULT = 4
PORT = 18765
ADB_PORT = 15037
SIM_PORT = 15555
SERIAL = f"127.0.0.1:{SIM_PORT}"
TOKEN = "dwf-netns-admin-" + uuid.uuid4().hex
ROOT = Path(__file__).resolve().parents[2]
DROIDWIRE = str(Path(sys.executable).parent / "droidwire")


@pytest.fixture(scope="session", autouse=True)
def _no_namespaces_left() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):
        pair = NetnsPair()
        _kill_inside(pair)
        pair.close()
        remove_stale()


def _kill_inside(pair: NetnsPair) -> None:
    """SIGKILL every process still inside this run's namespaces (all started by this test)."""
    for ns in (pair.c, pair.b):
        kill_inside(ns)


class Client:
    """The REST client process inside the controller's namespace."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ids = itertools.count()
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            answer = json.loads(line)
            future = self.waiting.pop(answer["id"], None)
            if future is not None and not future.done():
                future.set_result(answer)
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(AssertionError("client process ended"))

    async def call(self, method: str, path: str, body: Any = None,
                   limit_s: float = WAIT_S * 2) -> dict[str, Any]:
        assert self.proc.stdin is not None
        rid = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        self.proc.stdin.write((json.dumps({"id": rid, "method": method, "path": path,
                                           "json": body}) + "\n").encode())
        await self.proc.stdin.drain()
        return await asyncio.wait_for(future, limit_s)

    async def bridge(self) -> dict[str, Any]:
        answer = await self.call("GET", "/v1/bridges", limit_s=WAIT_S)
        bridges = answer.get("body") if answer.get("status") == 200 else None
        return bridges[0] if bridges else {}

    async def until(self, predicate: Any, what: str) -> dict[str, Any]:
        """Poll /v1/bridges (bounded) until ``predicate(bridge)``; returns that bridge."""
        found: dict[str, Any] = await _poll(self.bridge, lambda b: bool(b) and predicate(b),
                                            what, WAIT_S)
        return found

    def shell(self, *argv: str) -> asyncio.Task[dict[str, Any]]:
        return asyncio.create_task(self.call("POST", f"/v1/devices/{SERIAL}/shell",
                                             {"argv": list(argv)}))


async def _poll(get: Any, predicate: Any, what: str, limit_s: float) -> Any:
    """Bounded polling of state in another process (it has no event this test can wait on)."""
    try:
        async with asyncio.timeout(limit_s):
            while not predicate(value := await get()):  # noqa: ASYNC110 - another process's state
                await asyncio.sleep(0.01)
            return value
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {limit_s:g} s") from None


async def _spawn(pair: NetnsPair, ns: str, argv: list[str], log: Path, env: dict[str, str],
                 procs: list[asyncio.subprocess.Process], pipes: bool = False
                 ) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *pair.exec_argv(ns, *argv), cwd=ROOT, env=env,
            stdin=asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if pipes else out, stderr=out,
        )
    procs.append(proc)
    return proc


@contextlib.asynccontextmanager
async def lab(tmp_path: Path) -> AsyncIterator[tuple[NetnsPair, Client]]:
    ok, why = await asyncio.to_thread(netns_available)
    require_or_skip(ok, why)
    await asyncio.to_thread(remove_stale)
    pair = NetnsPair()
    procs: list[asyncio.subprocess.Process] = []
    env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": TOKEN,
           "ANDROID_ADB_SERVER_PORT": str(ADB_PORT), "PYTHONPATH": str(ROOT)}
    env.pop("ADB_BURST_MODE", None)
    py = [sys.executable, "-m", "tests.faults.netns"]
    await asyncio.to_thread(pair.create)
    client: Client | None = None
    try:
        await _spawn(pair, pair.c, [*py, "controller", CONTROLLER_IP, str(PORT),
                                    f"sqlite:///{tmp_path / 'controller.db'}"],
                     tmp_path / "controller.log", env, procs)
        url = f"http://{CONTROLLER_IP}:{PORT}"
        client = Client(await _spawn(pair, pair.c, [*py, "client", url],
                                     tmp_path / "client.log", env, procs, pipes=True))
        await _poll(lambda: client.call("GET", "/healthz"),  # importing takes seconds
                    lambda a: a.get("status") == 200, "controller up", WAIT_S * 4)
        answer = await client.call("POST", "/v1/tokens", {"kind": "bridge", "name": "netns"})
        assert answer.get("status") == 201, answer
        bridge_env = {**env, "DROIDWIRE_BRIDGE_TOKEN": answer["body"]["token"]}
        await asyncio.to_thread(pair.run, pair.b, ADB_BINARY, "-P", str(ADB_PORT),
                                "start-server")
        await _spawn(pair, pair.b, [DROIDWIRE, "sim-device", "--port", str(SIM_PORT),
                                    "--noise", "0"], tmp_path / "sim.log", env, procs)
        await _poll(lambda: asyncio.to_thread(pair.run, pair.b, ADB_BINARY, "-P", str(ADB_PORT),
                                              "connect", SERIAL, check=False),
                    lambda done: "connected to" in done.stdout, "adb connect", WAIT_S)
        await _spawn(pair, pair.b, [*py, "bridge", f"ws://{CONTROLLER_IP}:{PORT}",
                                    str(ADB_PORT)], tmp_path / "bridge.log", bridge_env, procs)
        await client.until(lambda b: b.get("state") == "connected" and b.get("devices", 0) >= 1,
                           "bridge connected with its device")
        yield pair, client
    finally:
        if client is not None:
            client.reader.cancel()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(pair.heal)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in procs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), WAIT_S)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(pair.run, pair.b, ADB_BINARY, "-P", str(ADB_PORT),
                                    "kill-server", check=False)
        await asyncio.to_thread(_kill_inside, pair)
        await asyncio.to_thread(pair.close)
        assert pair.c not in list_namespaces() and pair.b not in list_namespaces()


def _shell_log(pair: NetnsPair) -> set[str]:
    out = pair.run(pair.b, ADB_BINARY, "-P", str(ADB_PORT), "-s", SERIAL, "shell", "logcat",
                   "-d", check=False).stdout
    return {line for line in out.splitlines() if " SimShell" in line}


async def _run_faults(pair: NetnsPair, client: Client, modes: list[str], nonce: str
                      ) -> tuple[dict[str, list[float]], list[str], list[str], int]:
    recovery: dict[str, list[float]] = {}
    lost: list[str] = []
    commands: list[str] = []
    seen: set[str] = set()
    for i, mode in enumerate(modes):
        before = (await client.bridge())["connections"]
        calls: list[tuple[str, asyncio.Task[dict[str, Any]]]] = []
        for k in range(CALLS_PER_FAULT):
            word = f"0.3{i:05d}{k}" if k % 2 else f"{nonce}-{i}-{k}"
            verb = "sleep" if k % 2 else "echo"
            calls.append((f"{verb} {word}", client.shell(verb, word)))
        await client.until(lambda b: b["pending"] > 0, "calls in flight")
        await asyncio.to_thread(getattr(pair, mode))
        try:
            await client.until(lambda b, n=before: b["state"] != "connected" or b["connections"] > n,
                               f"controller sees the {mode}")
        finally:
            await asyncio.to_thread(pair.heal)
        healed = time.monotonic()
        await client.until(lambda b, n=before: b["connections"] > n and b["state"] == "connected"
                           and b["devices"] >= 1, f"recovery ({mode})")
        recovery.setdefault(mode, []).append(time.monotonic() - healed)
        for command, task in calls:
            commands.append(command)
            verb, word = command.split(" ", 1)
            try:
                answer = await asyncio.wait_for(task, WAIT_S * 2)
            except Exception as exc:  # a lost result, with its reason
                lost.append(f"fault {i} ({mode}): {command}: {exc!r}")
                continue
            body = answer.get("body") or {}
            ok = (answer.get("status") == 200 and isinstance(body, dict)
                  and body.get("exit_code") == 0
                  and (verb == "sleep" or body.get("stdout") == f"{word}\n"))
            if not ok:
                lost.append(f"fault {i} ({mode}): {command}: {str(answer)[:200]}")
        seen |= await asyncio.to_thread(_shell_log, pair)  # the device's log is a ring
    ran = collections.Counter(line.split("SimShell: ", 1)[-1].strip() for line in seen)
    doubled = [c for c in commands if ran[c] > 1]
    never = [c for c in commands if ran[c] == 0]
    lost += [f"never ran: {c}" for c in never if not any(c in x for x in lost)]
    return recovery, lost, doubled, len(commands)


@pytest.mark.timeout(size(1800, 120))
async def test_link_cuts_and_blackholes_during_rpcs(tmp_path: Path) -> None:
    faults = size(75, 6)  # two thirds of them cuts: 50 in the full profile, 4 in ci
    modes = [MODES[i % len(MODES)] for i in range(faults)]
    async with lab(tmp_path) as (pair, client):
        recovery, lost, doubled, calls = await _run_faults(pair, client, modes,
                                                           uuid.uuid4().hex[:8])
    assert not {n for n in list_namespaces() if n.startswith(pair.c[:-1])}
    times = [t for ts in recovery.values() for t in ts]
    counts = collections.Counter(modes)
    record(AREA, "link faults injected", faults)
    record(AREA, "  by kind", ", ".join(f"{m} {n}" for m, n in counts.items()))
    record(AREA, "  recovered", f"{len(times)}/{faults}")
    record(AREA, "  recovery rate", round(100.0 * len(times) / faults, 1), unit="%")
    record_times(AREA, "  recovery after the link is back (cut)", recovery.get("cut", []))
    record_times(AREA, "  recovery after the link is back (blackhole)",
                 recovery.get("blackhole", []))
    record(AREA, "RPCs in flight across the link faults", calls)
    record(AREA, "  lost results", len(lost), must_be_zero=True)
    record(AREA, "  doubled results (ran twice on the device)", len(doubled), must_be_zero=True)
    assert not lost, lost[:5]
    assert not doubled, doubled[:5]
    assert len(times) == faults


@pytest.mark.timeout(size(600, 120))
async def test_rpcs_across_a_delayed_link(tmp_path: Path) -> None:
    """``tc netem delay 200ms`` both ways: every call still gets its one right answer."""
    ok, why = await asyncio.to_thread(netns_available)
    require_or_skip(ok, why)
    ok, why = await asyncio.to_thread(netem_available)
    if not ok:  # a kernel feature, not a missing service: skipped in CI too, with the reason
        pytest.skip(why)
    nonce = uuid.uuid4().hex[:8]
    async with lab(tmp_path) as (pair, client):
        await asyncio.to_thread(pair.delay, 200)
        started = time.monotonic()
        words = [f"{nonce}-d{k}" for k in range(size(40, 8))]
        answers = await asyncio.gather(*(client.shell("echo", w) for w in words))
        took = time.monotonic() - started
        seen = await asyncio.to_thread(_shell_log, pair)
    ran = collections.Counter(line.split("SimShell: ", 1)[-1].strip() for line in seen)
    lost = [w for w, a in zip(words, answers, strict=True)
            if a.get("status") != 200 or (a.get("body") or {}).get("stdout") != f"{w}\n"]
    doubled = [w for w in words if ran[f"echo {w}"] > 1]
    record(AREA, "RPCs across a 200 ms netem delay", len(words))
    record(AREA, "  all answered in", round(took, 2), unit="s")
    record(AREA, "  lost results (delay)", len(lost), must_be_zero=True)
    record(AREA, "  doubled results (delay)", len(doubled), must_be_zero=True)
    assert not lost, lost[:5]
    assert not doubled, doubled[:5]
