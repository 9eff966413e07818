"""``droidwire demo``: the whole system on one machine, no phone and no SDK needed.

What it starts, all on loopback, all stopped at exit:

1. a private adb server — the binary adbutils ships — on a free port
   (``ANDROID_ADB_SERVER_PORT``), killed at exit (``--real``: the usual adb server and the
   phones attached to it, left running);
2. a simulated device (:mod:`device_bridge.sim`) that this adb server connects to, like a
   phone over Wi-Fi;
3. an embedded controller: SQLite in a temporary directory, uvicorn on a free port;
4. a bridge dialling it (capabilities ``build`` — the real Kotlin compiler (``make setup``)
   checking each test in front of the simulated toolchain, the simulated toolchain alone
   where the compiler is not set up, said once; ``--real``: Gradle and the Android SDK — and
   ``devices``);

then runs three generated tests through ``POST /v1/sandbox/execute``, like an agent would:
a disk read on the main thread (CONFIRMED), a draft missing an import (fixed in one round,
CONFIRMED by blocking time; the fix round is driven by kotlinc's ``Unresolved reference 'Log'.``
when the compiler is set up), and work kept off the main thread (REFUTED). It prints a table
(or ``{"results": [...]}`` with ``--json``) and exits 0; 1 if a run could not collect
evidence (PENDING), so a broken setup does not look like a working one.

This is the one place the controller package imports ``device_bridge`` (docs/design.md §2): the
demo *is* a bridge host too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from droidwire.client import ExitCode, JsonOption, print_json
from droidwire.output import console
from droidwire.run import render_results

__all__ = ["DEMO_TESTS", "DemoTest", "demo"]

log = logging.getLogger("droidwire.demo")

START_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 300.0
BRIDGE_NAME = "demo-bridge"

_IMPORTS = """\
import android.os.StrictMode
import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith
"""

_TEMPLATE = """\
package com.droidwire.demo.test

{imports}
@RunWith(AndroidJUnit4::class)
class {cls} {{

    private fun strictMode() {{
        StrictMode.setThreadPolicy(
            StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build()
        )
    }}

    @Test
    fun {test}() {{
        ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
            scenario.onActivity {{ activity ->
                strictMode()
                val start = SystemClock.elapsedRealtime()
                activity.{call}
                val elapsed = SystemClock.elapsedRealtime() - start
                Log.i("DroidUnblocker", "elapsed=${{elapsed}}ms")
            }}
        }}
    }}
}}
"""


@dataclass(frozen=True)
class DemoTest:
    title: str
    expected: str
    code: str


def _test(cls: str, test: str, call: str, *, imports: str = _IMPORTS) -> str:
    return _TEMPLATE.format(imports=imports, cls=cls, test=test, call=call)


DEMO_TESTS = (
    DemoTest(
        "settings read from disk on the main thread",
        "CONFIRMED",
        _test("SettingsDiskReadTest", "loadSettingsBlocksTheMainThread", "loadSettingsFromDisk()"),
    ),
    DemoTest(
        "layout hash (the draft forgot an import: one fix round)",
        "CONFIRMED",
        _test(
            "LayoutHashTest",
            "layoutHashIsComputedOnTheMainThread",
            "computeLayoutHash()",
            imports=_IMPORTS.replace("import android.util.Log\n", ""),
        ),
    ),
    DemoTest(
        "avatar loaded off the main thread",
        "REFUTED",
        _test("AvatarAsyncTest", "avatarLoadLeavesTheMainThreadFree", "loadAvatarAsync()"),
    ),
)


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _private_adb_server() -> Iterator[int]:
    """adbutils' bundled adb on a free port of its own; killed at exit."""
    import adbutils

    adb = str(Path(adbutils.__file__).parent / "binaries" / "adb")
    last = ""
    for _ in range(5):
        port = _free_port()
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port)}
        # The daemon inherits our stdio: never pipe it, or the call waits for the daemon.
        done = subprocess.run(
            [adb, "-P", str(port), "start-server"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=START_TIMEOUT_S,
            check=False,
        )
        if done.returncode == 0:
            break
        last = f"adb start-server exited with {done.returncode}"
    else:
        raise RuntimeError(f"could not start a private adb server: {last}")
    try:
        yield port
    finally:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [adb, "-P", str(port), "kill-server"], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=15, check=False,
            )


@contextlib.contextmanager
def _simulated_device() -> Iterator[str]:
    from device_bridge.sim.threaded import ThreadedSimDevice

    with ThreadedSimDevice(port=0, host="127.0.0.1", noise_interval=None) as sim:
        yield str(sim.address)


@contextlib.asynccontextmanager
async def _controller(tmp: Path, admin_token: str) -> AsyncIterator[tuple[str, Any]]:
    import uvicorn

    from controller.config import ControllerConfig
    from droidwire.serve import uvicorn_config

    config = ControllerConfig(db_url=f"sqlite:///{tmp / 'controller.db'}",
                              bootstrap_token=admin_token)
    sock = _free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    uv = uvicorn_config(config, log_level="warning", log_config=None)
    server = uvicorn.Server(uv)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield url, uv.app
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, START_TIMEOUT_S)
        sock.close()


async def _wait_for_device(http: httpx.AsyncClient, serial: str | None) -> None:
    """Until the controller lists a ready device (``serial``, or any with ``--real``)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + START_TIMEOUT_S
    while True:
        response = await http.get("/v1/devices")
        if response.status_code == 200:
            devices = response.json()
            if any(d.get("state") == "device" and serial in (None, d.get("serial"))
                   for d in devices):
                return
        if loop.time() > end:
            raise RuntimeError("no device reached the controller"
                               + (f" (waiting for {serial})" if serial else ""))
        await asyncio.sleep(0.1)  # a person is waiting on a start-up, not a test on a race


async def _demo(tmp: Path, *, real: bool, say: Any) -> list[dict[str, Any]]:
    from device_bridge.bridge import Bridge
    from device_bridge.config import HostConfig

    admin = secrets.token_urlsafe(32)
    with contextlib.ExitStack() as stack:
        if real:
            adb_port = None
            serial = None
        else:
            adb_port = stack.enter_context(_private_adb_server())
            os.environ["ANDROID_ADB_SERVER_PORT"] = str(adb_port)
            serial = stack.enter_context(_simulated_device())
        say(f"[dim]adb server on port {adb_port or 'default'}"
            + (f", simulated device {serial}" if serial else "") + "[/]")
        async with _controller(tmp, admin) as (url, _app), httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=RUN_TIMEOUT_S,
        ) as http:
            response = await http.get("/healthz")  # waits in the backlog until start-up is done
            response.raise_for_status()
            say(f"[dim]controller on {url} (SQLite in {tmp})[/]")
            created = await http.post("/v1/tokens", json={"kind": "bridge", "name": BRIDGE_NAME})
            created.raise_for_status()
            adb: dict[str, Any] = {}
            if adb_port is not None and serial is not None:
                # The bridge keeps the simulated device connected, like a phone on Wi-Fi.
                adb = {"connect": [serial], "server_port": adb_port, "start_server": False}
            toolchain = "gradle"
            if not real:
                # The simulated device even on a host with an SDK, unless --real; the real
                # compiler judges the tests in front of it when it is set up.
                from device_bridge.build import kotlinc_ready

                missing = kotlinc_ready()
                toolchain = "kotlinc" if missing is None else "simulated"
                say("[dim]compiler: kotlinc (warm JVM) checks each test, then the simulated"
                    " toolchain builds it[/]" if missing is None else
                    f"[yellow]compiler: kotlinc unavailable ({missing}); the simulated"
                    " toolchain alone judges the tests[/]")
            host = HostConfig.from_mapping(
                {
                    "controller": {"url": [url.replace("http://", "ws://")]},
                    "adb": adb,
                    "build": {"toolchain": toolchain, "state_dir": str(tmp / "workspaces")},
                },
                base=tmp,
            )
            async with Bridge(host, token=created.json()["token"]) as bridge:
                await bridge.wait_open(START_TIMEOUT_S)
                await _wait_for_device(http, serial)
                say(f"[dim]bridge {BRIDGE_NAME} connected[/]")
                results = []
                for n, test in enumerate(DEMO_TESTS, 1):
                    say(f"[bold]{n}/{len(DEMO_TESTS)}[/] {test.title} …")
                    response = await http.post(
                        "/v1/sandbox/execute",
                        json={"test_code": test.code, "timeout_s": RUN_TIMEOUT_S},
                    )
                    response.raise_for_status()
                    body = response.json()
                    results.extend(body.get("results", [body]))
                return results


def show_fix_rounds(console: Console, results: list[dict[str, Any]]) -> None:
    """Each fix round: what the compiler said, who fixed it, and the change."""
    for n, r in enumerate(results, 1):
        rounds = r.get("compile_rounds") or []
        for before, after in itertools.pairwise(rounds):
            check = before.get("check") or {}
            judge = check.get("compiler") or r.get("toolchain") or "compiler"
            console.print(f"{n}. fix round {before.get('round')}: {judge} said", highlight=False)
            for e in (before.get("errors") or [])[:5]:
                where = f"{e.get('file') or '?'}:{e.get('line') or '?'}:{e.get('column') or '?'}"
                console.print(f"   [red]e:[/] {escape(where)} {escape(str(e.get('message')))}",
                              highlight=False)
            changes = [ln for ln in str(after.get("diff") or "").splitlines()
                       if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
            console.print(f"   fixed by {after.get('fixer')}: {escape('; '.join(changes[:3]))}"
                          f" → round {after.get('round')} {'ok' if after.get('ok') else 'failed'}",
                          highlight=False)


def demo(
    json_out: JsonOption = False,
    real: Annotated[
        bool, typer.Option("--real", help="Use the attached phones and the real toolchain "
                                          "(an Android SDK and a JDK) instead of simulations.")
    ] = False,
) -> None:
    """Controller + bridge + simulated device + three sample runs; no phone needed."""
    human = console(stderr=json_out)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    def say(text: str) -> None:
        human.print(text)

    previous = os.environ.get("ANDROID_ADB_SERVER_PORT")
    try:
        with tempfile.TemporaryDirectory(prefix="droidwire-demo-") as tmp:
            results = asyncio.run(_demo(Path(tmp), real=real, say=say))
    except (RuntimeError, OSError, httpx.HTTPError, TimeoutError) as exc:
        print(f"error: the demo could not run: {exc}", file=sys.stderr)
        raise typer.Exit(int(ExitCode.ERROR)) from None
    finally:
        if previous is None:
            os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
        else:
            os.environ["ANDROID_ADB_SERVER_PORT"] = previous
    if json_out:
        print_json({"results": results})
    else:
        render_results(human, results)
        show_fix_rounds(human, results)
        toolchains = sorted({str(r.get("toolchain")) for r in results if r.get("toolchain")})
        if toolchains:  # what compiled the tests: "simulated" unless --real found an SDK
            human.print(f"toolchain: {', '.join(toolchains)}", markup=False, highlight=False)
    if any(r.get("verification_status") == "PENDING" for r in results):
        raise typer.Exit(int(ExitCode.ERROR))
