"""Every adb operation cancelled mid-flight leaves no connection to the adb server open.

A run stopped at once (a revoked loan, a cancel) cancels the bridge's handler while its adb
call is blocked in a worker thread. The call is abandoned (its sockets shut); whatever the
worker had opened must then be closed, not left for the garbage collector (an unclosed
socket, a ``ResourceWarning``, and a file descriptor held until a collection).

The adb server here is the real one with the simulated device behind it; a proxy in front of
it forwards every connection but one — the ``hold``-th, which it accepts and never answers —
so the operation is stuck exactly there when it is cancelled. Each operation is cancelled at
each of its connections in turn, until it completes without reaching ``hold``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.adb.connection import _Connection
from device_bridge.sim.apk import SimPackage, build_apk
from tests.adb_support import TIME_SCALE, AdbServer, ConnectedSim

pytestmark = pytest.mark.adb

WAIT_S = 20.0 * TIME_SCALE
MAX_CONNECTIONS = 30  # more than any operation here opens
MIB = 1 << 20


class HoldingProxy:
    """Forwards connections to the adb server on ``upstream``, except the ``hold``-th."""

    def __init__(self, upstream: int, hold: int, on_hold: Callable[[], None]) -> None:
        self.upstream = upstream
        self.hold = hold
        self.on_hold = on_hold
        self.accepted = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self._socks: list[socket.socket] = []
        # The accepting thread may open a socket while close() runs: whichever comes second
        # closes it (an unclosed one is a ResourceWarning, failing whichever test is running).
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _keep(self, sock: socket.socket) -> bool:
        """Keep ``sock`` to close it with the proxy; False (and closed) if the proxy is."""
        with self._lock:
            if not self._closed:
                self._socks.append(sock)
                return True
        sock.close()
        return False

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if not self._keep(conn):
                return
            self.accepted += 1
            if self.accepted == self.hold:
                self.on_hold()  # read nothing, answer nothing: the client waits
                continue
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                return
            if not self._keep(up):
                return
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        self.server.close()
        for s in socks:
            s.close()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[socket.socket]]:
    """Every socket the device layer opens to the adb server, kept to check it was closed."""
    socks: list[socket.socket] = []
    connect = _Connection._safe_connect

    def recording(self: _Connection) -> socket.socket:
        sock = connect(self)
        socks.append(sock)
        return sock

    monkeypatch.setattr(_Connection, "_safe_connect", recording)
    yield socks


APP = build_apk(SimPackage(package="com.example.cancelled", kind="app"))

OPERATIONS: dict[str, Callable[[AdbDevices, str], Awaitable[Any]]] = {
    "shell": lambda d, s: d.shell(s, ["echo", "hi"]),
    "logcat_clear": lambda d, s: d.logcat_clear(s),
    "logcat_dump": lambda d, s: d.logcat_dump(s, lines=10),
    "install": lambda d, s: d.install(s, APP),
    "uninstall": lambda d, s: d.uninstall(s, "com.example.cancelled"),
    "instrument": lambda d, s: d.instrument(s, "com.example.missing.test"),
    "push": lambda d, s: d.push(s, "/data/local/tmp/droidwire/x.bin", b"x" * 1000),
    "pull": lambda d, s: d.pull(s, "/system/build.prop"),
    "push_file": lambda d, s: d.push_file(s, io.BytesIO(b"x" * 1000),
                                          "/data/local/tmp/droidwire/y.bin"),
    "pull_file": lambda d, s: d.pull_file(s, "/system/build.prop", os.devnull, max_bytes=MIB),
    "exec_out": lambda d, s: d.exec_out(s, ["echo", "hi"]),
    "screenshot": lambda d, s: d.screenshot(s),
    "devices": lambda d, s: d.devices(),
    "info": lambda d, s: d.info(s),
}


async def cancel_at(
    adb_server: AdbServer, serial: str, operation: str, hold: int, opened: list[socket.socket]
) -> bool:
    """Run ``operation`` with its ``hold``-th connection stuck, cancel it there; False when
    it completed without opening that many connections."""
    loop = asyncio.get_running_loop()
    stuck: asyncio.Future[None] = loop.create_future()

    def on_hold() -> None:
        loop.call_soon_threadsafe(lambda: None if stuck.done() else stuck.set_result(None))

    proxy = HoldingProxy(adb_server.port, hold, on_hold)
    devices = AdbDevices(port=proxy.port, call_timeout_s=WAIT_S, long_timeout_s=WAIT_S)
    opened.clear()
    try:
        call = asyncio.ensure_future(OPERATIONS[operation](devices, serial))
        done, _ = await asyncio.wait({call, stuck}, timeout=WAIT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert done, f"{operation} neither completed nor reached connection {hold}"
        if call in done:
            with contextlib.suppress(Exception):
                call.result()  # a completed operation may fail (a missing file): no matter
            return False
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
            pytest.fail(f"{operation} was not cancelled at connection {hold}")
        # The worker threads have ended (the pool is shut down, waiting for them).
        await devices.aclose()
        left = [s for s in opened if s.fileno() != -1]
        assert not left, f"{operation} cancelled at connection {hold} left {left}"
        return True
    finally:
        await devices.aclose()
        proxy.close()
        for s in opened:
            s.close()  # a failed check leaves no warning behind it


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_an_operation_cancelled_at_any_connection_closes_them_all(
    adb_server: AdbServer, sim_device: ConnectedSim, operation: str,
    opened: list[socket.socket],
) -> None:
    reached = 0
    for hold in range(1, MAX_CONNECTIONS + 1):
        if not await cancel_at(adb_server, sim_device.address, operation, hold, opened):
            break
        reached = hold
    else:
        pytest.fail(f"{operation} opened more than {MAX_CONNECTIONS} connections")
    assert reached >= 1
