"""(Support, no tests.) The hostile-tenant stack: a real controller (uvicorn on the test's loop),
the real bridge (``droidwire bridge``, a process of its own) in front of a simulated device
behind the real adb server, and hand-written protocol clients using the protocol package's
own codec.

Every wait is on a condition with a bound, never a sleep standing in for synchronisation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from controller.config import ControllerConfig
from protocol.envelope import SUBPROTOCOL
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import InLoopController, fast_settings

__all__ = ["WAIT_S", "BridgeProcess", "Stack", "raw_bridge_client", "wait_until"]

WAIT_S = 30 * TIME_SCALE
PING_S = 5.0 * TIME_SCALE

SETTINGS = fast_settings(
    ping_interval_s=PING_S, ping_timeout_s=PING_S, grace_period_s=20.0 * TIME_SCALE,
    liveness_interval_s=1.0 * TIME_SCALE, rpc_timeout_s=30.0 * TIME_SCALE,
)


async def wait_until(predicate: Callable[[], bool], what: str = "condition") -> None:
    """Bounded wait for state that has no event of its own to wait on."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not predicate():  # noqa: ASYNC110 - polling state owned by other components
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {WAIT_S:g}s") from None


class BridgeProcess:
    """The real bridge, ``droidwire bridge``, in a process of its own; its log to a file."""

    def __init__(
        self, url: str, token: str, adb: AdbServer, log_path: Path, *,
        profile: str = "standard", log_level: str = "info", extra: list[str] | None = None,
    ) -> None:
        self.log_path = log_path
        self.argv = [
            sys.executable, "-c", "from droidwire import main; main()", "bridge",
            "--controller", url, "--adb-port", str(adb.port), "--profile", profile,
            "--ping-interval", str(PING_S), "--ping-timeout", str(PING_S),
            "--close-timeout", str(0.5 * TIME_SCALE), "--handshake-timeout", str(5 * TIME_SCALE),
            "--backoff-first-max", str(0.1 * TIME_SCALE), "--backoff-base", str(0.2 * TIME_SCALE),
            "--backoff-cap", str(1.0 * TIME_SCALE), "--log-level", log_level, *(extra or []),
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

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

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
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Stack:
    """A controller and the bridges of one test; users by name with their own tokens."""

    def __init__(self, tmp_path: Path, controller: InLoopController) -> None:
        self.tmp_path = tmp_path
        self.controller = controller
        self.bridges: list[BridgeProcess] = []

    @property
    def http(self) -> httpx.AsyncClient:
        return self.controller.http

    async def token(self, kind: str, name: str, *, as_token: str = ADMIN_TOKEN) -> str:
        response = await self.http.post(
            "/v1/tokens", json={"kind": kind, "name": name}, headers=bearer(as_token)
        )
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    def client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.controller.url, headers=bearer(token),
                                 timeout=WAIT_S)

    async def bridge(
        self, token: str, adb: AdbServer, name: str = "bridge", **kwargs: Any
    ) -> BridgeProcess:
        process = BridgeProcess(self.controller.url, token, adb,
                                self.tmp_path / f"{name}.log", **kwargs)
        self.bridges.append(process)
        return await process.start()

    async def listed(self, client: httpx.AsyncClient, serial: str) -> None:
        """Until ``client`` sees ``serial`` ready in ``GET /v1/devices``."""

        async def ready() -> bool:
            response = await client.get("/v1/devices")
            return response.status_code == 200 and any(
                d["serial"] == serial and d["state"] == "device" for d in response.json()
            )

        try:
            async with asyncio.timeout(WAIT_S):
                while not await ready():  # noqa: ASYNC110 - polling over HTTP
                    await asyncio.sleep(0.02)
        except TimeoutError:
            logs = "\n".join(b.log()[-2000:] for b in self.bridges)
            raise AssertionError(f"{serial} never listed; bridge logs:\n{logs}") from None


@contextlib.asynccontextmanager
async def stack(
    tmp_path: Path, config: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[Stack]:
    """A controller (``config``: ControllerConfig fields, ``settings``: Settings fields)."""
    controller_config = ControllerConfig(
        db_url=f"sqlite:///{tmp_path / 'controller.db'}", bootstrap_token=ADMIN_TOKEN,
        settings=fast_settings(**{**_settings_dict(), **settings}), **(config or {}),
    )
    controller = InLoopController(controller_config)
    await controller.start()
    world = Stack(tmp_path, controller)
    try:
        yield world
    finally:
        for bridge in world.bridges:
            await bridge.stop()
        await controller.stop()


def _settings_dict() -> dict[str, Any]:
    return {
        "ping_interval_s": SETTINGS.ping_interval_s, "ping_timeout_s": SETTINGS.ping_timeout_s,
        "grace_period_s": SETTINGS.grace_period_s,
        "liveness_interval_s": SETTINGS.liveness_interval_s,
        "rpc_timeout_s": SETTINGS.rpc_timeout_s,
    }


@contextlib.asynccontextmanager
async def raw_bridge_client(url: str, token: str) -> AsyncIterator[ClientConnection]:
    """A hand-written bridge connection: the real handshake headers, nothing else."""
    async with connect(
        url.replace("http://", "ws://").rstrip("/") + "/v1/bridge",
        additional_headers=bearer(token), subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
        open_timeout=WAIT_S, max_size=None, ping_interval=None, compression=None,
    ) as ws:
        yield ws


__all__ += ["ConnectedSim", "stack"]
