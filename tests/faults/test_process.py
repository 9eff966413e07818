"""Process faults: SIGKILL the controller mid-run (SQLite; PostgreSQL when DATABASE_URL is
set), SIGKILL the bridge mid-run, kill the adb server, stop a simulated device mid-call.

What must hold: the survivors keep going and come back on their own; a call in flight ends
(typed error or result) and never hangs; no command runs twice on the device; the store is
intact after every SIGKILL; no 500 (an internal error) anywhere — 503 ``unavailable`` is the
honest answer while something is down.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from device_bridge.adb import AdbDevices
from device_bridge.bridge import Bridge
from device_bridge.config import HostConfig
from tests.adb_support import AdbServer, ConnectedSim, connected_sim, free_port, start_adb_server
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer, pg_url  # noqa: F401 - fixture
from tests.controller.test_hub_support import in_loop_controller
from tests.faults.figures import record, record_times, size
from tests.faults.procs import START_S, ControllerProcess
from tests.faults.timing import PING_S, SETTINGS, WAIT_S, wait_until

pytestmark = pytest.mark.adb

AREA = "process faults"
HUNG_S = SETTINGS.grace_period_s + 4 * WAIT_S


def shell_runs(sim: ConnectedSim) -> collections.Counter[str]:
    """How many times the device ran each command line (its SimShell log)."""
    text: str = sim.call(lambda: sim.device.logbuf.text())
    return collections.Counter(line.split("SimShell: ", 1)[-1].strip()
                               for line in text.splitlines() if " SimShell" in line)


def host_config(url: str, adb: AdbServer, **adb_extra: Any) -> HostConfig:
    return HostConfig.from_mapping({
        "controller": {"url": [url]},
        "adb": {"server_port": adb.port, "start_server": False, **adb_extra},
        "policy": {"profile": "full"},
    })


async def device_listed(http: httpx.AsyncClient, serial: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        response = await http.get("/v1/devices")
        if response.status_code == 200:
            return any(d["serial"] == serial and d["state"] == "device" for d in response.json())
    return False


async def wait_listed(http: httpx.AsyncClient, serial: str, what: str) -> None:
    """Until the controller lists the device as ready (a REST answer: nothing to wait on)."""
    try:
        async with asyncio.timeout(START_S):  # may include a process start on a loaded box
            while not await device_listed(http, serial):  # noqa: ASYNC110 - polling over HTTP
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what}: not listed in {START_S:g} s") from None


def _outcome(response: httpx.Response) -> str:
    """``"200 ok"`` or ``"503 unavailable"``: status and error code of an answer."""
    try:
        code = response.json().get("error", {}).get("code", "ok")
    except ValueError:
        code = "not json"
    return f"{response.status_code} {code}"


# -- kill -9 the controller -----------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def controller_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'controller.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.timeout(size(1800, 240))
async def test_kill_9_the_controller_mid_run(
    tmp_path: Path, controller_db: str, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    kind = controller_db.split(":", 1)[0]
    rounds = size(20, 1)
    controller = ControllerProcess(free_port(), controller_db, ADMIN_TOKEN,
                                   tmp_path / "controller.log")
    await controller.start()
    serial = sim_device.address
    recoveries: list[float] = []
    failed_after: list[str] = []
    in_flight: list[str] = []
    statuses: collections.Counter[str] = collections.Counter()
    adb = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.02)
    try:
        async with httpx.AsyncClient(base_url=controller.url, headers=bearer(ADMIN_TOKEN),
                                     timeout=WAIT_S) as http:
            made = await http.post("/v1/tokens", json={"kind": "bridge", "name": "desk"})
            assert made.status_code == 201, made.text
            async with Bridge(host_config(f"ws://127.0.0.1:{controller.port}", adb_server),
                              token=made.json()["token"], devices=adb, build=None,
                              settings=SETTINGS) as bridge:
                await bridge.wait_open(WAIT_S)
                await wait_listed(http, serial, "device")
                for i in range(rounds):
                    word = f"0.2{i:04d}{uuid.uuid4().int % 1000:03d}"
                    command = f"sleep {word}"
                    in_flight.append(command)
                    call = asyncio.create_task(
                        http.post(f"/v1/devices/{serial}/shell", json={"argv": ["sleep", word]}))
                    await wait_until(lambda c=command: shell_runs(sim_device)[c] >= 1,
                                     "the call reached the device")
                    killed = time.monotonic()
                    await controller.kill9()
                    try:
                        response = await call
                        statuses[str(response.status_code)] += 1
                    except httpx.TransportError as exc:
                        statuses[type(exc).__name__] += 1  # the caller lost its controller
                    await controller.start()
                    await wait_listed(http, serial, "device back")
                    recoveries.append(time.monotonic() - killed)
                    after = await http.post(f"/v1/devices/{serial}/shell",
                                            json={"argv": ["echo", f"after-{i}"]})
                    if after.status_code != 200 or after.json()["stdout"] != f"after-{i}\n":
                        failed_after.append(f"round {i}: {after.status_code} {after.text[:200]}")
                assert bridge.link is not None
                bridge_alive = bridge.link.welcomes >= rounds + 1
    finally:
        await controller.stop()
        await adb.aclose()
    runs = shell_runs(sim_device)
    doubled = [c for c in in_flight if runs[c] > 1]
    integrity = "ok"
    if kind == "sqlite":
        path = controller_db.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as db:
            integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    record(AREA, f"controller SIGKILLs mid-RPC ({kind})", rounds)
    record_times(AREA, f"  SIGKILL to device listed again, incl. process start ({kind})", recoveries)
    record(AREA, f"  in-flight call outcomes ({kind})",
           ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    record(AREA, f"  calls failing after the restart ({kind})", len(failed_after),
           must_be_zero=True)
    record(AREA, f"  in-flight commands run twice ({kind})", len(doubled), must_be_zero=True)
    record(AREA, f"  store integrity failures ({kind})", 0 if integrity == "ok" else 1,
           must_be_zero=True)
    assert not failed_after, failed_after
    assert not doubled, doubled
    assert integrity == "ok", integrity
    assert bridge_alive and len(recoveries) == rounds
    assert "500" not in statuses


# -- kill -9 the bridge -----------------------------------------------------------------------


class BridgeProcess:
    """``droidwire bridge`` in a process of its own, with the suite's timings."""

    def __init__(self, url: str, token: str, adb: AdbServer, log_path: Path) -> None:
        self.argv = [
            sys.executable, "-c", "from droidwire import main; main()", "bridge",
            "--controller", url, "--adb-port", str(adb.port), "--profile", "full",
            "--ping-interval", str(PING_S), "--ping-timeout", str(PING_S),
            "--close-timeout", str(0.2 * TIME_SCALE),
            "--handshake-timeout", str(3 * TIME_SCALE),
            "--backoff-first-max", str(0.02 * TIME_SCALE),
            "--backoff-base", str(0.02 * TIME_SCALE), "--backoff-cap", str(0.2 * TIME_SCALE),
            "--log-level", "info",
        ]
        self.env = {**os.environ, **adb.env, "DROIDWIRE_BRIDGE_TOKEN": token}
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=log)

    async def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.proc.wait(), WAIT_S)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), WAIT_S)
        except TimeoutError:
            await self.kill9()


@pytest.mark.timeout(size(1800, 240))
async def test_kill_9_the_bridge_mid_run(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    rounds = size(10, 1)
    serial = sim_device.address
    statuses: collections.Counter[str] = collections.Counter()
    hung: list[str] = []
    recoveries: list[float] = []
    in_flight: list[str] = []
    async with in_loop_controller(tmp_path, SETTINGS) as controller:
        token = await controller.bridge_token("pi")
        bridge = BridgeProcess(controller.url, token, adb_server, tmp_path / "bridge.log")
        await bridge.start()
        # The in-flight call waits for the bridge (grace period) or its restart: give the
        # caller more than that, and call "hung" only what outlasts it.
        patient = httpx.AsyncClient(base_url=controller.url, headers=bearer(ADMIN_TOKEN),
                                    timeout=HUNG_S * 2)
        try:
            await wait_listed(controller.http, serial, "device")
            for i in range(rounds):
                word = f"0.3{i:04d}{uuid.uuid4().int % 1000:03d}"
                command = f"sleep {word}"
                in_flight.append(command)
                call = asyncio.create_task(patient.post(
                    f"/v1/devices/{serial}/shell", json={"argv": ["sleep", word]}))
                await wait_until(lambda c=command: shell_runs(sim_device)[c] >= 1,
                                 "the call reached the device")
                killed = time.monotonic()
                await bridge.kill9()
                await bridge.start()  # a supervisor (systemd) restarts it
                try:
                    response = await asyncio.wait_for(call, HUNG_S)
                    statuses[_outcome(response)] += 1
                except TimeoutError:
                    hung.append(command)
                await wait_listed(controller.http, serial, "device back")
                recoveries.append(time.monotonic() - killed)
                after = await controller.http.post(f"/v1/devices/{serial}/shell",
                                                   json={"argv": ["echo", f"back-{i}"]})
                assert after.status_code == 200 and after.json()["stdout"] == f"back-{i}\n"
        finally:
            await patient.aclose()
            await bridge.stop()
    runs = shell_runs(sim_device)
    doubled = [c for c in in_flight if runs[c] > 1]
    record(AREA, "bridge SIGKILLs mid-RPC (then restarted)", rounds)
    record_times(AREA, "  SIGKILL to device listed again, incl. process start", recoveries)
    record(AREA, "  in-flight call outcomes",
           ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items())))
    record(AREA, "  in-flight calls that hung", len(hung), must_be_zero=True)
    record(AREA, "  in-flight commands run twice", len(doubled), must_be_zero=True)
    record(AREA, "  in-flight calls answered 500",
           sum(v for k, v in statuses.items() if k.startswith("500")), must_be_zero=True)
    assert not hung and not doubled
    assert not any(k.startswith("500") for k in statuses)


# -- kill the adb server; stop a device mid-call ---------------------------------------------


@contextlib.asynccontextmanager
async def private_lab(tmp_path: Path) -> AsyncIterator[tuple[AdbServer, ConnectedSim, Any]]:
    """An adb server of this test's own (it gets killed), one device, controller and bridge."""
    server = await asyncio.to_thread(start_adb_server)
    try:
        with connected_sim(server) as sim:
            async with in_loop_controller(tmp_path, SETTINGS) as controller:
                token = await controller.bridge_token("lab")
                adb = AdbDevices(port=server.port, call_timeout_s=5.0 * TIME_SCALE,
                                 flush_s=0.02)
                try:
                    host = host_config(controller.ws_url, server, connect=[sim.address])
                    async with Bridge(host, token=token, devices=adb, build=None,
                                      settings=SETTINGS) as bridge:
                        await bridge.wait_open(WAIT_S)
                        await wait_listed(controller.http, sim.address, "device")
                        yield server, sim, (controller, bridge)
                finally:
                    await adb.aclose()
    finally:
        await asyncio.to_thread(server.kill)


def _adb_server_pid(port: int) -> int | None:
    import subprocess

    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True,
                         check=False).stdout
    marker = "pid="
    if marker not in out:
        return None
    return int(out.split(marker, 1)[1].split(",", 1)[0])


async def test_kill_the_adb_server_then_it_comes_back(tmp_path: Path) -> None:
    async with private_lab(tmp_path) as (server, sim, (controller, bridge)):
        serial = sim.address
        pid = await asyncio.to_thread(_adb_server_pid, server.port)
        assert pid is not None, "cannot find the private adb server's pid"
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        answers: collections.Counter[int] = collections.Counter()
        for i in range(3):  # calls while adb is gone: typed errors, quickly
            response = await controller.http.post(f"/v1/devices/{serial}/shell",
                                                  json={"argv": ["echo", f"no-adb-{i}"]})
            answers[response.status_code] += 1
        # The host's supervisor (or the bridge's next start_server) brings adb back.
        restarted = await asyncio.to_thread(
            server.cli, "start-server", timeout=30)
        assert restarted.returncode == 0, restarted.stderr
        await asyncio.to_thread(sim.connect)
        await wait_listed(controller.http, serial, "device back after adb restart")
        back = time.monotonic() - killed
        ok = await controller.http.post(f"/v1/devices/{serial}/shell",
                                        json={"argv": ["echo", "adb-back"]})
        assert bridge.link is not None and not bridge._task.done()  # the bridge never exited
    record(AREA, "adb server SIGKILLed under a live bridge: answers while down",
           ", ".join(f"HTTP {k} x{v}" for k, v in sorted(answers.items())))
    record(AREA, "  answers 500 while adb was down", answers[500], must_be_zero=True)
    record(AREA, "  adb kill to device listed again", round(back * 1000, 1), unit="ms")
    assert answers[500] == 0 and answers[200] == 0
    assert ok.status_code == 200 and ok.json()["stdout"] == "adb-back\n"


async def test_a_device_stopped_mid_call_is_a_typed_error(tmp_path: Path) -> None:
    async with private_lab(tmp_path) as (_server, sim, (controller, bridge)):
        serial = sim.address
        call = asyncio.create_task(controller.http.post(
            f"/v1/devices/{serial}/shell", json={"argv": ["sleep", "5"]}))
        await wait_until(lambda: shell_runs(sim)["sleep 5"] >= 1, "the call reached the device")
        await asyncio.to_thread(sim.sim.stop_device)
        try:
            response = await asyncio.wait_for(call, WAIT_S)
            outcome = "HTTP " + _outcome(response)
            server_error = response.status_code == 500
        except TimeoutError:
            outcome, server_error = "hung", True
        listing = (await controller.http.get("/v1/devices")).json()
        state = next((d["state"] for d in listing if d["serial"] == serial), "gone")
        alive = bridge._task is not None and not bridge._task.done()
    record(AREA, f"device stopped mid-call: call answered {outcome}; listed as {state}", "")
    record(AREA, "  device stopped mid-call: hung or 500", int(server_error), must_be_zero=True)
    assert not server_error, outcome
    assert alive
