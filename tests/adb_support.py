"""Shared fixtures for end-to-end tests through the real adb server and the simulated device.

Registered for the whole suite in ``tests/conftest.py`` (``pytest_plugins``). What they give:

* ``adb_server`` (session): a private adb server — the binary bundled with adbutils — on a free
  port, exported as ``ANDROID_ADB_SERVER_PORT`` for the session so adbutils (and anything else
  that reads it) talks to it and never to a user's own server on 5037. Killed at the end with
  ``adb -P PORT kill-server``. Several pytest processes on one machine each get their own.
* ``adb_client`` (session): an ``adbutils.AdbClient`` bound to that server.
* ``sim_device`` (function): a :class:`ConnectedSim` — a simulated device on a free port (in a
  thread of its own, so blocking adbutils calls are fine from sync *and* async tests),
  ``adb connect``-ed and in state ``device``; disconnected and stopped at teardown.
* :func:`connected_sim` (context manager) to start more devices, or devices with a given
  profile/options, e.g. ``with connected_sim(adb_server, profile="old-nexus") as sim:``.

Waiting is event-driven: states are awaited on adb's own ``host:track-devices`` stream (see
:func:`wait_for_state`), never by sleeping.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbutils
import pytest

from tests.scale import TIME_SCALE

__all__ = [
    "ADB_BINARY",
    "AdbServer",
    "ConnectedSim",
    "adb_client",
    "adb_server",
    "connected_sim",
    "free_port",
    "sim_device",
    "wait_for_state",
]

ADB_BINARY = str(Path(adbutils.__file__).parent / "binaries" / "adb")
CONNECT_TIMEOUT = 15.0 * TIME_SCALE


# free_port() hands out ports below the kernel's ephemeral range (32768 and up on Linux), from
# a slice of its own for each pytest-xdist worker: between the choice and the server's bind,
# such a port is never taken by an outgoing connection's local port (the kernel picks those
# from the ephemeral range) nor by another worker's choice. A port the kernel picked (bind to
# port 0) could be, and a test's server then failed "address already in use".
PORT_BASE = 20000
PORT_SLICE = 500
_OUTSIDE_XDIST = 23  # the last slice: 20000 + 24 × 500 stays below 32768
_cursor: int | None = None


def _port_slice() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", …
    index = worker[2:]
    if worker.startswith("gw") and index.isdigit() and int(index) < _OUTSIDE_XDIST:
        return int(index)
    return _OUTSIDE_XDIST


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, from this worker's slice (above), and a
    different one at each call: two servers a test starts on "free" ports never get the same
    one. The slice is walked in turn; a port in use (or still closing) is skipped."""
    global _cursor
    base = PORT_BASE + _port_slice() * PORT_SLICE
    if _cursor is None:
        _cursor = os.getpid() % PORT_SLICE  # processes of one worker start apart
    for _ in range(PORT_SLICE):
        port = base + _cursor
        _cursor = (_cursor + 1) % PORT_SLICE
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {base}-{base + PORT_SLICE - 1}")


@dataclass
class AdbServer:
    """A private adb server: ``port`` and the ``adb`` binary that serves it."""

    port: int
    adb: str = ADB_BINARY
    env: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, timeout: float = 30.0, binary: str | None = None,
            text: bool = True) -> subprocess.CompletedProcess[Any]:
        """Run ``adb -P PORT ARGS…`` (optionally another adb ``binary``) against this server."""
        return subprocess.run(
            [binary or self.adb, "-P", str(self.port), *args],
            env=self.env, capture_output=True, text=text, timeout=timeout * TIME_SCALE,
            stdin=subprocess.DEVNULL, check=False,
        )

    def client(self) -> adbutils.AdbClient:
        return adbutils.AdbClient(host="127.0.0.1", port=self.port)

    def kill(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.cli("kill-server", timeout=15)


def start_adb_server(adb: str = ADB_BINARY, *, attempts: int = 5) -> AdbServer:
    """Start ``adb -P PORT start-server`` on a free port; retry if another process took it."""
    last = ""
    for _ in range(attempts):
        port = free_port()
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port)}
        env.pop("ADB_BURST_MODE", None)  # delayed_ack changes the transport; we do not speak it
        server = AdbServer(port, adb, env)
        # The daemon inherits our stdio: never pipe it, or the call waits for the daemon's exit.
        proc = subprocess.run(
            [adb, "-P", str(port), "start-server"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30 * TIME_SCALE,
            check=False,
        )
        if proc.returncode == 0:
            try:
                server.client().server_version()
                return server
            except adbutils.AdbError as exc:
                last = str(exc)
        server.kill()
        last = last or f"adb start-server exited with {proc.returncode}"
    raise RuntimeError(f"could not start a private adb server: {last}")


def wait_for_state(client: adbutils.AdbClient, serial: str, state: str | None,
                   timeout: float = CONNECT_TIMEOUT) -> None:
    """Block until adb lists ``serial`` in ``state`` (``None``: until it is not listed).

    Uses ``host:track-devices``: the server pushes the whole list on every change, so this
    wakes on events, not on a polling interval. Raises ``TimeoutError``.
    """
    deadline = time.monotonic() + timeout
    with client.make_connection(timeout=timeout) as c:
        c.send_command("host:track-devices")
        c.check_okay()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{serial} did not reach state {state!r} in {timeout:.0f}s")
            c.conn.settimeout(remaining)
            try:
                listing = c.read_string_block()
            except (adbutils.AdbTimeout, TimeoutError, OSError) as exc:
                raise TimeoutError(f"{serial} did not reach state {state!r}") from exc
            states = dict(
                line.split("\t", 1) for line in listing.splitlines() if "\t" in line
            )
            if states.get(serial) == state:
                return


@dataclass
class ConnectedSim:
    """A simulated device known to the adb server under ``address`` (``127.0.0.1:PORT``)."""

    server: AdbServer
    sim: Any  # device_bridge.sim.threaded.ThreadedSimDevice

    @property
    def device(self) -> Any:
        """The :class:`SimDevice` (read its state through :meth:`call`)."""
        return self.sim.device

    @property
    def address(self) -> str:
        return str(self.sim.address)

    @property
    def adb(self) -> adbutils.AdbDevice:
        """A fresh adbutils device handle on the private server."""
        return self.server.client().device(self.address)

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the device's event loop (its state is not thread-safe)."""
        return self.sim.call(fn)

    def run(self, fn: Any, timeout: float | None = 60.0) -> Any:
        """Run the coroutine ``fn()`` on the device's event loop (``timeout`` in seconds)."""
        return self.sim.run(fn, timeout=None if timeout is None else timeout * TIME_SCALE)

    def submit(self, fn: Any) -> Any:
        """Start the coroutine ``fn()`` on the device's loop; returns a concurrent Future."""
        return self.sim.submit(fn)

    def connect(self) -> None:
        client = self.server.client()
        answer = client.connect(self.address, timeout=CONNECT_TIMEOUT)
        if "connected to" not in (answer or ""):
            raise RuntimeError(f"adb connect {self.address}: {answer}")
        wait_for_state(client, self.address, "device")

    def disconnect(self) -> None:
        with contextlib.suppress(adbutils.AdbError, OSError):
            self.server.client().disconnect(self.address)

    def wait_state(self, state: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
        wait_for_state(self.server.client(), self.address, state, timeout)


@contextlib.contextmanager
def connected_sim(server: AdbServer, **device_kwargs: Any) -> Iterator[ConnectedSim]:
    """Start a simulated device (``SimDevice`` keyword arguments), connect it, yield it."""
    from device_bridge.sim.threaded import ThreadedSimDevice

    device_kwargs.setdefault("port", 0)
    device_kwargs.setdefault("noise_interval", None)
    with ThreadedSimDevice(**device_kwargs) as sim:
        handle = ConnectedSim(server, sim)
        try:
            handle.connect()
            yield handle
        finally:
            handle.disconnect()


@pytest.fixture(scope="session")
def adb_server() -> Iterator[AdbServer]:
    server = start_adb_server()
    previous = os.environ.get("ANDROID_ADB_SERVER_PORT")
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(server.port)
    try:
        yield server
    finally:
        server.kill()
        if previous is None:
            os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
        else:
            os.environ["ANDROID_ADB_SERVER_PORT"] = previous


@pytest.fixture(scope="session")
def adb_client(adb_server: AdbServer) -> adbutils.AdbClient:
    return adb_server.client()


@pytest.fixture
def sim_device(adb_server: AdbServer) -> Iterator[ConnectedSim]:
    with connected_sim(adb_server) as sim:
        yield sim
