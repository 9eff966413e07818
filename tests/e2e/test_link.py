"""End to end over real loopback sockets: a real controller (uvicorn), the real bridge
(``droidwire bridge``, a process of its own) dialling it through a fault-injecting TCP proxy,
and a simulated device behind the real adb server.

Timings are test-scaled (``TIME_SCALE`` stretches them on slow machines); every wait is on an
event or a condition with a timeout, never a sleep standing in for synchronisation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from controller.hub import Hub
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import InLoopController, fast_settings
from tests.e2e.proxy import Proxy

WAIT_S = 30 * TIME_SCALE
PING_S = 1.0 * TIME_SCALE

SETTINGS = fast_settings(
    ping_interval_s=PING_S,
    ping_timeout_s=PING_S,
    close_timeout_s=0.5 * TIME_SCALE,
    handshake_timeout_s=5.0 * TIME_SCALE,
    grace_period_s=20.0 * TIME_SCALE,
    liveness_interval_s=0.3 * TIME_SCALE,
    rpc_timeout_s=30.0 * TIME_SCALE,
)


class BridgeProcess:
    """``droidwire bridge`` in a process of its own; its log goes to a file."""

    def __init__(self, url: str, token: str, adb: AdbServer, log_path: Path) -> None:
        self.log_path = log_path
        self.argv = [
            sys.executable, "-c", "from droidwire import main; main()", "bridge",
            "--controller", url, "--adb-port", str(adb.port), "--profile", "full",
            "--ping-interval", str(PING_S), "--ping-timeout", str(PING_S),
            "--close-timeout", str(0.5 * TIME_SCALE), "--handshake-timeout", str(5 * TIME_SCALE),
            "--backoff-first-max", str(0.1 * TIME_SCALE), "--backoff-base", str(0.2 * TIME_SCALE),
            "--backoff-cap", str(1.0 * TIME_SCALE), "--log-level", "info",
        ]
        # The token travels in the environment, not in argv (visible to every user in ps).
        self.env = {**os.environ, **adb.env, "DROIDWIRE_BRIDGE_TOKEN": token}
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> BridgeProcess:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=log,
            )
        return self

    async def wait(self) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), WAIT_S)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), WAIT_S)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class World:
    """Controller, proxy, bridge and device of one test."""

    def __init__(self, tmp_path: Path, sim: ConnectedSim) -> None:
        self.tmp_path = tmp_path
        self.sim = sim
        self.controller: InLoopController | None = None
        self.proxy: Proxy | None = None
        self.bridge: BridgeProcess | None = None
        self.token = ""

    @property
    def hub(self) -> Hub:
        assert self.controller is not None
        return self.controller.hub

    @property
    def http(self) -> Any:
        assert self.controller is not None
        return self.controller.http

    async def start_controller(self) -> InLoopController:
        from controller.config import ControllerConfig

        config = ControllerConfig(
            db_url=f"sqlite:///{self.tmp_path / 'controller.db'}",
            bootstrap_token=ADMIN_TOKEN,
            settings=SETTINGS,
        )
        self.controller = InLoopController(config)
        await self.controller.start()
        return self.controller

    async def device_ready(self) -> None:
        """Wait until the bridge is connected and reports the simulated device."""
        serial = self.sim.address

        def ready() -> bool:
            return any(e.is_open and serial in e.devices for e in self.hub.entries())

        await wait_until(ready, self)

    async def shell(self, *argv: str) -> Any:
        return await self.http.post(f"/v1/devices/{self.sim.address}/shell", json={"argv": argv})

    def connections(self) -> int:
        return sum(e.connections for e in self.hub.entries())


async def wait_until(predicate: Any, world: World | None = None) -> None:
    """Wait (bounded) for a condition on state that has no event of its own to wait on."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not predicate():  # noqa: ASYNC110 - polling state owned by other components
                await asyncio.sleep(0.01)
    except TimeoutError:
        detail = world.bridge.log()[-3000:] if world and world.bridge else ""
        raise AssertionError(f"condition not reached in {WAIT_S:g}s; bridge log:\n{detail}") from None


@pytest.fixture
async def base(tmp_path: Path, sim_device: ConnectedSim) -> AsyncIterator[World]:
    """Controller and proxy (no bridge yet)."""
    w = World(tmp_path, sim_device)
    controller = await w.start_controller()
    w.proxy = await Proxy(controller.port).start()
    w.token = await controller.bridge_token("pi")
    try:
        yield w
    finally:
        if w.bridge is not None:
            await w.bridge.stop()
        await w.proxy.close()
        assert w.controller is not None
        await w.controller.stop()


@pytest.fixture
async def world(base: World) -> World:
    """Controller, proxy, and a bridge connected through it with the device."""
    assert base.proxy is not None
    base.bridge = BridgeProcess(
        base.proxy.url, base.token, base.sim.server, base.tmp_path / "bridge.log"
    )
    await base.bridge.start()
    await base.device_ready()
    return base


def _shell_lines(world: World, needle: str) -> int:
    """How many times the device ran a command containing ``needle`` (its SimShell log)."""
    text = world.sim.call(lambda: world.sim.device.logbuf.text())
    return sum(1 for line in text.splitlines() if "SimShell" in line and needle in line)


# -- the basics


async def test_device_appears_shell_works_policy_refuses(world: World) -> None:
    devices = (await world.http.get("/v1/devices")).json()
    [device] = [d for d in devices if d["serial"] == world.sim.address]
    assert device["bridge"] == "pi" and device["state"] == "device"
    assert device["id"] == f"pi~{world.sim.address}"
    assert device["sdk"] and device["model"] and device["profile"] == "full"

    ok = await world.shell("echo", "hello")
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"exit_code": 0, "stdout": "hello\n", "stderr": ""}
    refused = await world.http.post(
        f"/v1/devices/{world.sim.address}/shell", json={"command": "echo a; reboot"}
    )
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "forbidden" and error["rule"]

    bridges = (await world.http.get("/v1/bridges")).json()
    assert [(b["name"], b["state"]) for b in bridges] == [("pi", "connected")]

    # And what a person types: `droidwire device list` / `device shell`.
    from typer.testing import CliRunner

    from droidwire import app as cli

    assert world.controller is not None
    env = {"DROIDWIRE_CONTROLLER": world.controller.url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "list", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert [d["serial"] for d in json.loads(result.stdout)] == [world.sim.address]
    shell = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "shell", world.sim.address, "--", "echo", "cli"],
        env=env,
    )
    assert (shell.exit_code, shell.stdout) == (0, "cli\n")
    state = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "state", world.sim.address, "--json"], env=env
    )
    assert state.exit_code == 0, state.output
    assert json.loads(state.stdout)["screen"]["width"] > 0
    png = world.tmp_path / "screen.png"
    shot = await asyncio.to_thread(
        CliRunner().invoke, cli, ["device", "screenshot", world.sim.address, "-o", str(png)],
        env=env,
    )
    assert shot.exit_code == 0, shot.output
    assert png.read_bytes().startswith(b"\x89PNG")


async def test_ten_thousand_logcat_lines_none_lost_in_order(world: World) -> None:
    assert world.controller is not None
    count = 10_000
    url = f"{world.controller.ws_url}/v1/devices/{world.sim.address}/logcat/stream"
    got: list[int] = []
    dropped = 0
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S,
                       max_size=None) as ws:
        await wait_until(lambda: any(e.streams for e in world.hub.entries()), world)
        burst = asyncio.create_task(asyncio.to_thread(
            world.sim.run, lambda: world.sim.device.log_burst(count, tag="E2EBurst",
                                                              message="burst {i}")
        ))
        try:
            async with asyncio.timeout(WAIT_S):
                while len(got) < count:
                    chunk = json.loads(await ws.recv())
                    dropped += chunk["dropped"] + chunk.get("lost_batches", 0)
                    # A loss marker fails here, saying so, rather than as a timeout later.
                    assert dropped == 0, f"loss reported after {len(got)} lines: {chunk}"
                    got += [int(line.rsplit(" ", 1)[1]) for line in chunk["lines"]
                            if "E2EBurst" in line]
        except TimeoutError:
            last = got[-1] if got else None
            pytest.fail(f"stream stalled: {len(got)} of {count} lines, the last {last}, "
                        f"no loss reported; burst done: {burst.done()}")
        await burst
    assert dropped == 0
    assert got == list(range(count))


# -- restarts and faults


async def test_controller_restart_the_bridge_comes_back_and_reannounces(world: World) -> None:
    assert world.controller is not None and world.proxy is not None
    world.proxy.hold()  # keep the bridge out until the test lets it in
    await world.controller.stop()
    controller = await world.start_controller()  # same database, new process state
    world.proxy.retarget(controller.port)
    world.proxy.cut()  # connections to the old controller are gone anyway
    # Known from the store while its bridge is away; a call waits for the bridge.
    devices = (await world.http.get("/v1/devices")).json()
    assert [(d["serial"], d["state"]) for d in devices] == [(world.sim.address, "disconnected")]
    early = asyncio.create_task(world.shell("echo", "early"))
    await wait_until(lambda: sum(e.session.pending_count for e in world.hub.entries()) == 1)
    world.proxy.release()
    await world.device_ready()
    devices = (await world.http.get("/v1/devices")).json()
    assert [(d["serial"], d["state"]) for d in devices] == [(world.sim.address, "device")]
    assert (await asyncio.wait_for(early, WAIT_S)).json()["stdout"] == "early\n"
    assert (await world.shell("echo", "back")).json()["stdout"] == "back\n"


async def test_cut_mid_rpc_result_arrives_exactly_once(world: World) -> None:
    assert world.proxy is not None
    before = world.connections()
    call = asyncio.create_task(world.shell("sleep", "1.01"))
    await wait_until(lambda: _shell_lines(world, "sleep 1.01") == 1, world)
    world.proxy.cut()
    response = await asyncio.wait_for(call, WAIT_S)
    assert response.status_code == 200, response.text
    assert response.json()["exit_code"] == 0
    assert world.connections() > before  # it did reconnect
    assert _shell_lines(world, "sleep 1.01") == 1  # and the command ran once
    assert all(e.session.pending_count == 0 for e in world.hub.entries())


async def test_stall_keepalive_notices_and_the_bridge_reconnects(world: World) -> None:
    assert world.proxy is not None
    before = world.connections()
    world.proxy.stall()
    await wait_until(lambda: world.connections() > before and any(
        e.is_open for e in world.hub.entries()), world)
    assert (await world.shell("echo", "after-stall")).json()["stdout"] == "after-stall\n"


async def test_long_rpc_outlives_several_liveness_intervals(world: World) -> None:
    seconds = SETTINGS.liveness_interval_s * (SETTINGS.liveness_missed_max + 3)
    before = world.connections()
    response = await world.shell("sleep", f"{seconds:.3f}")
    assert response.status_code == 200 and response.json()["exit_code"] == 0
    assert world.connections() == before


async def test_calls_made_while_reconnecting_complete_when_it_is_back(world: World) -> None:
    assert world.proxy is not None
    world.proxy.hold()  # the controller is unreachable for a while
    world.proxy.cut()
    entry = world.hub.entries()[0]
    await wait_until(lambda: entry.conn is None, world)
    calls = [asyncio.create_task(world.shell("echo", f"queued-{i}")) for i in range(3)]
    await wait_until(lambda: entry.session.pending_count == 3, world)
    world.proxy.release()
    responses = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
    assert [r.json()["stdout"] for r in responses] == [f"queued-{i}\n" for i in range(3)]


async def test_wrong_token_exits_non_zero_after_one_attempt(tmp_path: Path, base: World) -> None:
    world = base
    assert world.proxy is not None
    before = world.proxy.connections
    bad = BridgeProcess(world.proxy.url, "dw_b_not-a-real-token", world.sim.server,
                        tmp_path / "bad-bridge.log")
    await bad.start()
    code = await bad.wait()
    assert code != 0
    assert "unauthorized" in bad.log().lower()
    assert world.proxy.connections == before + 1


async def test_logcat_stream_resumes_across_a_cut_without_gap_or_duplicate(world: World) -> None:
    assert world.controller is not None and world.proxy is not None
    url = f"{world.controller.ws_url}/v1/devices/{world.sim.address}/logcat/stream"
    got: list[int] = []
    lost = 0

    def burst(start: int, count: int) -> Any:
        return asyncio.to_thread(world.sim.run, lambda: world.sim.device.log_burst(
            count, tag="E2EResume", message="resume {i}" if start == 0 else f"resume {start}+{{i}}"
        ))

    async def collect(ws: Any, until: int) -> None:
        nonlocal lost
        async with asyncio.timeout(WAIT_S):
            while len(got) < until:
                chunk = json.loads(await ws.recv())
                lost += chunk["dropped"] + chunk.get("lost_batches", 0)
                for line in chunk["lines"]:
                    if "E2EResume" in line:
                        text = line.rsplit(" ", 1)[1]
                        base, _, offset = text.partition("+")
                        got.append(int(base) + int(offset or 0))

    entry = world.hub.entries()[0]
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S,
                       max_size=None) as ws:
        await wait_until(lambda: bool(entry.streams), world)
        await burst(0, 300)
        await collect(ws, 300)
        world.proxy.hold()
        world.proxy.cut()
        await wait_until(lambda: entry.conn is None, world)
        await burst(300, 300)  # logged while the bridge is away
        world.proxy.release()
        await wait_until(lambda: entry.is_open and bool(entry.streams), world)
        await burst(600, 300)
        await collect(ws, 900)
    assert got == list(range(900))
    assert lost == 0
