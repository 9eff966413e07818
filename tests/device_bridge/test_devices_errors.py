"""adb failures become typed RPC errors; deadlines hold even when the adb server goes silent."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import pytest

from device_bridge.adb import AdbDevices, translate
from device_bridge.adb.wire import AdbConnectionError, AdbError, AdbTimeout
from protocol.errors import ErrorCode, RpcError


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (AdbError("device 'emulator-5554' not found"), ErrorCode.NOT_FOUND),
        (AdbError("device offline"), ErrorCode.DEVICE_OFFLINE),
        (AdbError("device still connecting"), ErrorCode.DEVICE_OFFLINE),
        (AdbError("device still authorizing"), ErrorCode.DEVICE_OFFLINE),
        (
            AdbError("device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set"),
            ErrorCode.DEVICE_OFFLINE,
        ),
        (AdbError("more than one device/emulator"), ErrorCode.BAD_REQUEST),
        (AdbError("open failed: No such file or directory", "/x"), ErrorCode.NOT_FOUND),
        (AdbError("open failed: Permission denied", "/x"), ErrorCode.FORBIDDEN),
        (AdbError("closed"), ErrorCode.DEVICE_OFFLINE),
        (AdbError("something new"), ErrorCode.INTERNAL),
        (AdbError("Unknown data: b''"), ErrorCode.UNAVAILABLE),
        (AdbTimeout("adb read timeout"), ErrorCode.TIMEOUT),
        (TimeoutError(), ErrorCode.TIMEOUT),
        (AdbConnectionError("connect to adb server failed"), ErrorCode.UNAVAILABLE),
        (ConnectionRefusedError(), ErrorCode.UNAVAILABLE),
        (ConnectionResetError(), ErrorCode.DEVICE_OFFLINE),
        (EOFError("Expected 5 bytes, got 0"), ErrorCode.DEVICE_OFFLINE),
        (BrokenPipeError(), ErrorCode.DEVICE_OFFLINE),
        (ValueError("x"), ErrorCode.INTERNAL),
    ],
)
def test_translate(exc: BaseException, code: ErrorCode) -> None:
    err = translate(exc, "s1")
    assert isinstance(err, RpcError)
    assert err.code is code
    assert err.data is not None and err.data["serial"] == "s1"


def test_translate_passes_rpc_errors_through() -> None:
    original = RpcError(ErrorCode.BUSY, "x")
    assert translate(original) is original


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_server_is_unavailable_and_nothing_is_spawned() -> None:
    port = free_port()
    devices = AdbDevices(port=port, call_timeout_s=5)
    try:
        with pytest.raises(RpcError) as info:
            await devices.devices()
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert isinstance(info.value.__cause__, AdbConnectionError)
        # adbutils' client would have run `adb start-server` here; ours does not.
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        await devices.aclose()


class SilentServer:
    """Accepts adb clients and never answers (a wedged adb server)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.clients: list[socket.socket] = []
        self.closed = threading.Event()
        self.accepted = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.clients.append(conn)
            self.accepted.set()
            threading.Thread(target=self._watch, args=(conn,), daemon=True).start()

    def _watch(self, conn: socket.socket) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        self.closed.set()  # the client gave up on us and shut its socket

    def close(self) -> None:
        self.sock.close()
        for c in self.clients:
            c.close()


async def test_a_silent_server_times_out_and_the_worker_is_released() -> None:
    server = SilentServer()
    devices = AdbDevices(port=server.port, call_timeout_s=0.3, max_workers=1)
    try:
        with pytest.raises(RpcError) as info:
            await devices.shell("s1", ["echo", "hi"])
        assert info.value.code is ErrorCode.TIMEOUT
        assert server.closed.wait(10), "the blocked exchange's socket was not shut"
        # The single worker is free again: a second call times out the same way, not forever.
        with pytest.raises(RpcError) as info:
            await devices.devices()
        assert info.value.code is ErrorCode.TIMEOUT
    finally:
        await devices.aclose()
        server.close()


@pytest.mark.parametrize("serial", ["", "a b", "x" * 129, "é"])
async def test_bad_serials_are_bad_requests(serial: str) -> None:
    devices = AdbDevices(port=free_port())
    try:
        with pytest.raises(RpcError) as info:
            await devices.shell(serial, ["echo"])
        assert info.value.code is ErrorCode.BAD_REQUEST
    finally:
        await devices.aclose()


async def test_aclose_abandons_running_calls() -> None:
    server = SilentServer()
    devices = AdbDevices(port=server.port, call_timeout_s=600)
    try:
        call = asyncio.create_task(devices.devices())
        assert await asyncio.to_thread(server.accepted.wait, 10)  # the call is in a worker
        async with asyncio.timeout(10):
            await devices.aclose()  # would wait for the 600 s socket timeout otherwise
            with pytest.raises(RpcError) as info:
                await call
            assert info.value.code is ErrorCode.CANCELLED
        assert server.closed.wait(10)
    finally:
        server.close()


async def test_aclose_fails_queued_calls_as_cancelled() -> None:
    server = SilentServer()
    devices = AdbDevices(port=server.port, call_timeout_s=600, max_workers=1)
    try:
        first = asyncio.create_task(devices.devices())
        assert await asyncio.to_thread(server.accepted.wait, 10)  # the only worker is busy
        queued = asyncio.create_task(devices.devices())
        await asyncio.sleep(0)  # let it reach the pool's queue
        async with asyncio.timeout(10):
            await devices.aclose()
            for call in (first, queued):
                with pytest.raises(RpcError) as info:
                    await call
                assert info.value.code is ErrorCode.CANCELLED
    finally:
        server.close()


@pytest.mark.parametrize("give_up", ["cancel", "deadline"])
async def test_a_connection_opened_after_the_caller_gave_up_is_closed(give_up: str) -> None:
    """The worker finishes opening a stream just after its caller was cancelled or timed out:
    nobody will read that connection, so it is closed (before, it leaked until GC)."""
    devices = AdbDevices(port=free_port())
    opening, finish = threading.Event(), threading.Event()
    ours, theirs = socket.socketpair()

    def open_late(_abort: object) -> socket.socket:
        opening.set()
        finish.wait(10)
        return ours

    try:
        call = asyncio.create_task(devices._call(
            open_late, what="open logcat", release=lambda s: s.close(),
            timeout_s=0.05 if give_up == "deadline" else 600,
        ))
        assert await asyncio.to_thread(opening.wait, 10)
        if give_up == "cancel":
            call.cancel()
        with pytest.raises((asyncio.CancelledError, RpcError)):
            await call
        finish.set()
        theirs.settimeout(10)
        assert await asyncio.to_thread(theirs.recv, 1) == b""  # our end was closed
        assert ours.fileno() == -1
    finally:
        finish.set()
        await devices.aclose()
        ours.close()
        theirs.close()


# --------------------------------------------------------------------------------------------
# a connection that dies is blamed on its other end: the adb server before the transport
# switch (``unavailable``), the device after it (``device_offline``)


@pytest.mark.parametrize(
    "exc",
    [ConnectionResetError(), EOFError("Expected 4 bytes, got 0"), BrokenPipeError(),
     AdbError("connection closed")],
)
def test_a_host_request_cut_short_means_the_server_is_gone(exc: BaseException) -> None:
    assert translate(exc).code is ErrorCode.UNAVAILABLE  # no serial: a host request
    assert translate(exc, "s1").code is ErrorCode.DEVICE_OFFLINE


class DyingServer:
    """An adb server that accepts, reads one request, then dies: a reset, no answer."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        self.requests.append(conn.recv(4096))
        # SO_LINGER 0: close() sends RST, like a process killed mid-request.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("call", ["devices", "shell"])
async def test_a_server_dying_mid_request_is_unavailable(call: str) -> None:
    server = DyingServer()
    devices = AdbDevices(port=server.port, call_timeout_s=10)
    devices._features["s1"] = frozenset({"shell_v2"})  # straight to host:transport:s1
    try:
        with pytest.raises(RpcError) as info:
            if call == "devices":
                await devices.devices()
            else:
                await devices.shell("s1", ["echo", "hi"])
        assert info.value.code is ErrorCode.UNAVAILABLE, info.value
        assert server.requests and server.requests[0][4:].startswith(b"host:")
    finally:
        await devices.aclose()
        server.close()


async def test_kill_server_returns_only_once_the_server_has_exited() -> None:
    """The server answers OKAY to host:kill, then exits; kill_server waits for the exit."""
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    answered = threading.Event()
    exit_now = threading.Event()

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            assert conn.recv(4096) == b"0009host:kill"
            conn.sendall(b"OKAY")
            answered.set()
            exit_now.wait(30)
            sock.close()  # the process exits: its listening socket first, then the rest

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    devices = AdbDevices(port=port, call_timeout_s=30)
    try:
        kill = asyncio.create_task(devices.kill_server())
        ended_after_exit: list[bool] = []
        kill.add_done_callback(lambda _: ended_after_exit.append(exit_now.is_set()))
        assert await asyncio.to_thread(answered.wait, 10)
        # OKAY alone does not mean the server is gone (a bounded look; it cannot pass wrongly)
        done, _ = await asyncio.wait({kill}, timeout=0.2)
        assert not done
        exit_now.set()
        await asyncio.wait_for(kill, 10)
        assert ended_after_exit == [True]
        with pytest.raises(RpcError) as info:
            await devices.devices()
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert isinstance(info.value.__cause__, AdbConnectionError)  # refused, not dropped
        await devices.kill_server()  # nothing listens: nothing to do
    finally:
        await devices.aclose()
        sock.close()
        thread.join(10)


# -- a stream's socket, opened on the event loop -----------------------------------------------


class FailingServer(DyingServer):
    """Answers ``host:transport:`` with OKAY, then FAILs the service with ``message``."""

    def __init__(self, message: bytes) -> None:
        self.message = message
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        self.requests.append(conn.recv(4096))  # host:transport:…
        conn.sendall(b"OKAY")
        self.requests.append(conn.recv(4096))  # the service
        conn.sendall(b"FAIL" + b"%04x" % len(self.message) + self.message)


async def test_open_socket_without_a_server_is_unavailable_and_frees_its_slot() -> None:
    devices = AdbDevices(port=free_port(), call_timeout_s=5, max_streams=1)
    try:
        for _ in range(2):  # the one stream slot is free again after each failure
            with pytest.raises(RpcError) as info:
                await devices.open_socket("s1", "shell:echo hi", what="open shell")
            assert info.value.code is ErrorCode.UNAVAILABLE
    finally:
        await devices.aclose()


async def test_open_socket_on_a_silent_server_times_out_and_frees_its_slot() -> None:
    server = SilentServer()
    devices = AdbDevices(port=server.port, call_timeout_s=0.3, max_streams=1)
    try:
        for _ in range(2):
            with pytest.raises(RpcError) as info:
                await devices.open_socket("s1", "shell:echo hi", what="open shell")
            assert info.value.code is ErrorCode.TIMEOUT
            assert "open shell on s1" in info.value.message
        assert server.closed.wait(10), "the socket of the abandoned open was not closed"
    finally:
        await devices.aclose()
        server.close()


async def test_open_socket_on_a_server_dying_mid_request_is_unavailable() -> None:
    server = DyingServer()
    devices = AdbDevices(port=server.port, call_timeout_s=10)
    try:
        with pytest.raises(RpcError) as info:
            await devices.open_socket("s1", "shell:echo hi", what="open shell")
        assert info.value.code is ErrorCode.UNAVAILABLE, info.value
        assert server.requests == [b"0011host:transport:s1"]
    finally:
        await devices.aclose()
        server.close()


@pytest.mark.parametrize(("message", "code"), [
    (b"device 's1' not found", ErrorCode.NOT_FOUND),
    (b"device offline", ErrorCode.DEVICE_OFFLINE),
    (b"closed", ErrorCode.DEVICE_OFFLINE),
])
async def test_open_socket_refused_by_the_server_says_why(message: bytes,
                                                          code: ErrorCode) -> None:
    server = FailingServer(message)
    devices = AdbDevices(port=server.port, call_timeout_s=10)
    try:
        with pytest.raises(RpcError) as info:
            await devices.open_socket("s1", "shell:echo hi", what="open shell")
        assert info.value.code is code, info.value
        assert info.value.data is not None and info.value.data["adb"] == message.decode()
    finally:
        await devices.aclose()
        server.close()
