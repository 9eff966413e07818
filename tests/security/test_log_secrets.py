"""No token in any log line, at any level, in any logger, on either side (docs/security.md,
"Bounds and secrets"). A real controller (``droidwire controller --log-level debug``) and the
real bridge (``droidwire bridge --log-level debug``) run as processes, the bridge over a real
adb server to a simulated device; their whole output is captured and searched for the secrets
that crossed them: the bridge's token, the admin's bootstrap token, a user's token sent in a
WebSocket and an HTTP URL by mistake."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.adb_support import AdbServer, ConnectedSim, free_port
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.security.support import WAIT_S, BridgeProcess

PORT_ATTEMPTS = 5


async def _serve(db: str, log_path: Path) -> tuple[asyncio.subprocess.Process, int]:
    """The controller on a free port, and the port. Between ``free_port()`` and the
    controller's bind, another test's server (another worker) or an outgoing connection may
    take the port: then the controller exits saying so, and it starts again on another."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        before = _size(log_path)
        proc = await _start(port, db, log_path)  # appends: every attempt's log is searched
        if await _healthy(proc, port):
            return proc, port
        if b"address already in use" not in _read_from(log_path, before):
            break
    raise AssertionError(f"the controller exited; see its log, {log_path}")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read_from(path: Path, offset: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read()


async def _start(port: int, db: str, log_path: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": ADMIN_TOKEN}
    with log_path.open("ab") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from droidwire import main; main()", "controller",
            "--port", str(port), "--db", db, "--log-level", "debug",
            env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
        )


async def _healthy(proc: asyncio.subprocess.Process, port: int) -> bool:
    """True once the controller answers ``/healthz``; False if it exited first."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as http:
        async with asyncio.timeout(WAIT_S * 4):
            while proc.returncode is None:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        return True
                await asyncio.sleep(0.05)
    await proc.wait()
    return False


@pytest.mark.timeout(300)
async def test_no_token_reaches_any_log_at_debug(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    controller_log = tmp_path / "controller.log"
    proc, port = await _serve(f"sqlite:///{tmp_path / 'c.db'}", controller_log)
    url = f"http://127.0.0.1:{port}"
    bridge: BridgeProcess | None = None
    try:
        async with httpx.AsyncClient(base_url=url, headers=bearer(ADMIN_TOKEN),
                                     timeout=WAIT_S) as admin:
            bridge_token = (await admin.post(
                "/v1/tokens", json={"kind": "bridge", "name": "alice-br"})).json()["token"]
            user_token = (await admin.post(
                "/v1/tokens", json={"kind": "user", "name": "alice"})).json()["token"]
            bridge = BridgeProcess(url, bridge_token, adb_server, tmp_path / "bridge.log",
                                   log_level="debug")
            await bridge.start()
            async with asyncio.timeout(WAIT_S * 2):
                while not any(d["state"] == "device"  # noqa: ASYNC110 - polling over HTTP
                              for d in (await admin.get("/v1/devices")).json()):
                    await asyncio.sleep(0.05)
            serial = sim_device.address
            # A user's token in a WebSocket URL (logged by uvicorn.error at INFO) and in an
            # HTTP URL (uvicorn.access), as well as in the header.
            with contextlib.suppress(InvalidStatus, OSError):
                async with connect(f"ws://127.0.0.1:{port}/v1/devices/{serial}/logcat/stream"
                                   f"?token={user_token}", additional_headers=bearer(user_token),
                                   open_timeout=WAIT_S):
                    pass
            await admin.get(f"/v1/devices?access_token={user_token}")
            async with httpx.AsyncClient(base_url=url, headers=bearer(user_token),
                                         timeout=WAIT_S) as alice:
                await alice.get("/v1/devices")
            shell = await admin.post(f"/v1/devices/{serial}/shell", json={"argv": ["echo", "x"]})
            assert shell.status_code == 200, shell.text
    finally:
        if bridge is not None:
            await bridge.stop()
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await asyncio.wait_for(proc.wait(), WAIT_S)
    logs = {"controller": controller_log.read_text(errors="replace"),
            "bridge": (tmp_path / "bridge.log").read_text(errors="replace")}
    # The capture is real: the handshake headers were logged, with their secret masked.
    assert "[redacted]" in logs["controller"] and "[redacted]" in logs["bridge"]
    assert "DEBUG" in logs["controller"] and "DEBUG" in logs["bridge"]
    secrets = {"bridge token": bridge_token, "bootstrap token": ADMIN_TOKEN,
               "user token": user_token}
    leaks = [f"{what} in the {side} log"
             for side, text in logs.items() for what, secret in secrets.items()
             if secret in text or secret[-24:] in text]
    assert not leaks, leaks
