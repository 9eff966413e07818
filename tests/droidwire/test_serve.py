"""``droidwire controller``: the real command, in its own process, started and stopped."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from controller.config import ControllerConfig
from droidwire import app as cli
from droidwire.serve import uvicorn_config
from protocol.settings import DEFAULTS
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer

STARTUP_TIMEOUT_S = 60 * TIME_SCALE
RUNNING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


async def _wait_for_port(stderr: asyncio.StreamReader, seen: list[bytes]) -> int:
    while True:
        line = await stderr.readline()
        if not line:
            raise AssertionError("controller exited before listening:\n" + b"".join(seen).decode())
        seen.append(line)
        if match := RUNNING.search(line):
            return int(match.group(1))


async def test_serve_migrates_bootstraps_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "state" / "controller.db"
    env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": ADMIN_TOKEN}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from droidwire import main; main()",
        "controller",
        "--port",
        "0",
        "--db",
        f"sqlite:///{db}",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    seen: list[bytes] = []
    try:
        assert proc.stderr is not None
        port = await asyncio.wait_for(_wait_for_port(proc.stderr, seen), STARTUP_TIMEOUT_S)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            created = await http.post(
                "/v1/tokens", json={"kind": "bridge", "name": "pi"}, headers=bearer(ADMIN_TOKEN)
            )
            assert created.status_code == 201
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), STARTUP_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = (b"".join(seen) + rest).decode()
    # uvicorn re-raises the signal once its graceful shutdown is done (exit by SIGTERM, which
    # systemd and Kubernetes treat as a clean stop); older versions exit 0.
    assert proc.returncode in (0, -signal.SIGTERM), log
    assert "Application shutdown complete" in log
    stored = db.read_bytes() + (
        db.with_name(db.name + "-wal").read_bytes()
        if db.with_name(db.name + "-wal").exists()
        else b""
    )
    assert ADMIN_TOKEN.encode() not in stored
    assert created.json()["token"].encode() not in stored
    assert ADMIN_TOKEN not in log and created.json()["token"] not in log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap-token", "short"], "at least 16"),
        (["--db", "mysql://u@h/db"], "unsupported database URL"),
    ],
)
def test_bad_configuration_exits_2_before_serving(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["controller", "--port", "0", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_websocket_keepalive_comes_from_the_settings_object(tmp_path: Path) -> None:
    settings = DEFAULTS.scaled(0.5)
    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", settings=settings)
    uv = uvicorn_config(config)
    assert (uv.ws_ping_interval, uv.ws_ping_timeout) == (
        settings.ping_interval_s,
        settings.ping_timeout_s,
    )
    assert uv.ws_max_size == settings.max_frame_bytes
    assert uv.ws_per_message_deflate is False


def test_settle_heap_freezes_start_up_and_still_collects_later_garbage() -> None:
    # In a process of its own: a freeze here would keep the test run's objects forever.
    script = (
        "import gc, weakref\n"
        "from droidwire.serve import FULL_COLLECTION_EVERY, settle_heap\n"
        "class Node: pass\n"
        "young, middle, _ = gc.get_threshold()\n"
        "settle_heap()\n"
        "assert gc.get_freeze_count() > 0\n"
        "assert gc.get_threshold() == (young, middle, FULL_COLLECTION_EVERY)\n"
        "node = Node(); node.me = node; gone = weakref.ref(node); del node\n"
        "gc.collect()\n"
        "assert gone() is None, 'a cycle made after start-up was not collected'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=STARTUP_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
