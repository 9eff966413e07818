"""(Support, no tests.) A controller served on the test's own event loop, and a scriptable fake bridge.

The fake bridge is :class:`protocol.session.BridgeSession` over a real websockets client: the
same wire rules as the real bridge, with knobs the tests need (answer later, stay mute to
liveness pings, drop the TCP connection abruptly, come back as the same or a new process).
The real bridge is exercised end to end in ``tests/e2e``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect

from controller.config import ControllerConfig
from controller.hub import Hub
from controller.services import services_of
from droidwire.serve import uvicorn_config
from protocol.codec import Codec
from protocol.envelope import SUBPROTOCOL, Capabilities, DeviceInfo, Welcome
from protocol.errors import ErrorCode, RpcError
from protocol.session import Admission, BridgeSession
from protocol.settings import DEFAULTS, Settings
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer

__all__ = ["FakeBridge", "InLoopController", "fast_settings", "in_loop_controller"]

WAIT_S = 10 * TIME_SCALE

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def fast_settings(**changes: Any) -> Settings:
    """Timings short enough for tests, long enough for a loaded CI machine."""
    base = replace(
        DEFAULTS,
        ping_interval_s=2.0 * TIME_SCALE,
        ping_timeout_s=2.0 * TIME_SCALE,
        close_timeout_s=1.0 * TIME_SCALE,
        handshake_timeout_s=5.0 * TIME_SCALE,
        grace_period_s=1.0 * TIME_SCALE,
        liveness_interval_s=0.2 * TIME_SCALE,
        rpc_timeout_s=10.0 * TIME_SCALE,
    )
    return replace(base, **changes)


class InLoopController:
    """A real uvicorn controller on a loopback socket, running on the caller's event loop
    (so tests can reach ``hub`` directly)."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        uv = uvicorn_config(config, log_level="warning", log_config=None)
        self.app: FastAPI = uv.app  # type: ignore[assignment]
        self.server = uvicorn.Server(uv)
        self._task: asyncio.Task[None] | None = None
        self.http = httpx.AsyncClient(base_url=self.url, headers=bearer(ADMIN_TOKEN),
                                      timeout=WAIT_S)

    @property
    def hub(self) -> Hub:
        return services_of(self.app).hub

    async def start(self) -> None:
        self._task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        # The socket already listens: this request waits in the backlog until start-up is done.
        response = await self.http.get("/healthz")
        assert response.status_code == 200, response.text

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            # uvicorn gives open requests up to graceful_shutdown_s before it cancels them, then
            # runs the app's shutdown: a shorter wait raced the server's own timer.
            budget = self.config.graceful_shutdown_s + WAIT_S
            done, _ = await asyncio.wait({self._task}, timeout=budget)
            if not done:
                still = [type(c).__name__ for c in self.server.server_state.connections]
                waiting = _waiting_tasks()
                self._task.cancel()
                raise AssertionError(f"the controller did not stop within {budget:g} s; "
                                     f"connections still open: {still}; tasks waiting:\n"
                                     f"{waiting}")
            self._task.result()
        await self.http.aclose()
        self.sock.close()

    async def bridge_token(self, name: str) -> str:
        response = await self.http.post("/v1/tokens", json={"kind": "bridge", "name": name})
        assert response.status_code == 201, response.text
        return str(response.json()["token"])


def _waiting_tasks(limit: int = 40) -> str:
    """Each pending task of this loop and where it waits (its innermost frame): what a stop
    that did not end was waiting for."""
    lines = []
    for task in asyncio.all_tasks():
        if task.done() or task is asyncio.current_task():
            continue
        frames = task.get_stack()
        where = (f"{frames[-1].f_code.co_filename}:{frames[-1].f_lineno} "
                 f"{frames[-1].f_code.co_name}") if frames else "?"
        lines.append(f"  {task.get_name()}: {where}")
    return "\n".join(sorted(lines)[:limit])


@contextlib.asynccontextmanager
async def in_loop_controller(
    tmp_path: Path, settings: Settings | None = None
) -> AsyncIterator[InLoopController]:
    config = ControllerConfig(
        db_url=f"sqlite:///{tmp_path / 'controller.db'}",
        bootstrap_token=ADMIN_TOKEN,
        settings=settings or fast_settings(),
    )
    controller = InLoopController(config)
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


async def echo_handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "ping":
        return {"payload": params.get("payload", b"")}
    if method == "device.shell":
        command = params.get("command") or " ".join(params.get("argv") or [])
        if ";" in command:
            raise RpcError(ErrorCode.FORBIDDEN, "metacharacter ';' refused",
                           {"rule": "metacharacter"})
        return {"exit_code": 0, "stdout": command + "\n", "stderr": ""}
    raise RpcError(ErrorCode.BAD_REQUEST, f"fake bridge has no {method}")


class FakeBridge:
    """A bridge speaking the protocol through :class:`BridgeSession`, driven by a test."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        devices: list[DeviceInfo] | None = None,
        handler: Handler = echo_handler,
        settings: Settings | None = None,
        session_id: str | None = None,
    ) -> None:
        self.url = url.replace("http://", "ws://").rstrip("/") + "/v1/bridge"
        self.token = token
        self.devices = devices if devices is not None else [
            DeviceInfo(serial="emulator-5554", state="device", model="Pixel 7", sdk=34)
        ]
        self.handler = handler
        self.settings = settings or fast_settings()
        self.session = BridgeSession(settings=self.settings, session_id=session_id)
        self.codec = Codec()
        self.ws: ClientConnection | None = None
        self.mute = False  # do not answer liveness pings
        self.runs: dict[str, int] = {}  # method calls actually run, by request id
        self.welcomes: list[Welcome] = []
        self.open = asyncio.Event()
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reader: asyncio.Task[None] | None = None

    async def connect(self, *, wait_open: bool = True) -> None:
        self.open.clear()
        self.closed.clear()
        self.close_code = None
        self.ws = await connect(
            self.url,
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers=bearer(self.token),
            compression=None,
            ping_interval=None,
            open_timeout=WAIT_S,
            max_size=self.settings.max_frame_bytes,
        )
        self.session.connection_made()
        self.session.make_hello(
            software="fake-bridge/1",
            caps=Capabilities(devices=True),
            devices=self.devices,
        )
        await self.flush()
        self._reader = asyncio.create_task(self._read(self.ws))
        if wait_open:
            await asyncio.wait_for(self.open.wait(), WAIT_S)

    async def flush(self) -> None:
        ws = self.ws
        for frame in self.session.frames_to_send():
            if ws is None:
                return
            with contextlib.suppress(Exception):
                await ws.send(self.codec.encode(frame))

    async def send_raw(self, data: bytes | str) -> None:
        assert self.ws is not None
        await self.ws.send(data)

    async def _read(self, ws: ClientConnection) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for data in ws:
                assert isinstance(data, bytes)
                frame = self.codec.decode(data)
                if frame.t == "ping" and self.mute:
                    continue
                outcome = self.session.receive(frame, loop.time())
                if isinstance(frame, Welcome):
                    self.welcomes.append(frame)
                    self.open.set()
                if outcome is Admission.RUN:
                    assert frame.t == "req"
                    self._spawn(self._run(frame.id, frame.method, frame.params))
                await self.flush()
        except Exception:  # the connection ended (cleanly or not); the test looks at why
            pass
        finally:
            if ws.protocol.close_rcvd is not None:
                self.close_code = ws.protocol.close_rcvd.code
            if self.ws is ws:
                self.session.connection_lost()
            self.closed.set()

    async def _run(self, request_id: str, method: str, params: dict[str, Any]) -> None:
        self.runs[request_id] = self.runs.get(request_id, 0) + 1
        outcome: dict[str, Any] | RpcError
        try:
            outcome = await self.handler(method, params)
        except RpcError as exc:
            outcome = exc
        self.session.complete(request_id, outcome, asyncio.get_running_loop().time())
        await self.flush()

    async def emit(self, channel: str, d: Any) -> None:
        self.session.event(channel, d)
        await self.flush()

    async def drop(self) -> None:
        """Lose the TCP connection without a close frame (a cut cable)."""
        ws = self.ws
        self.ws = None
        if ws is not None:
            ws.transport.abort()
            self.session.connection_lost()
            if self._reader is not None:
                await asyncio.wait_for(asyncio.shield(self._reader), WAIT_S)

    async def close(self) -> None:
        ws = self.ws
        if ws is not None:
            await ws.close()
            if self._reader is not None:
                await asyncio.wait_for(asyncio.shield(self._reader), WAIT_S)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
