"""The plumbing under every device call: the adb server connection, a worker pool with deadlines,
and a device's service opened on that connection.

The adb client (:mod:`.wire`) is synchronous, so every call runs off the event loop
(docs/design.md §4.8): short exchanges in a bounded thread pool, long streams (logcat follow,
instrumentation output, the device tracker) each in a reader thread of their own, bounded by
``max_streams``. A blocking exchange that overruns its deadline, or whose caller is
cancelled, has its socket shut down so its thread ends too. Whatever adb raised leaves as
:class:`~protocol.errors.RpcError`, translated by :func:`.errors.translate`.

:class:`AdbCore` holds that state (pool, stream slots, caches, open calls and streams); the
device services build on it (:mod:`.host`, :mod:`.shell`, :mod:`.sync`, :mod:`.packages`) and
:class:`.client.AdbDevices` is all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from device_bridge.adb.errors import AdbServerLost, translate
from device_bridge.adb.streams import DEFAULT_STALL_S, LineStream
from device_bridge.adb.wire import (
    CONNECT_TIMEOUT_S,
    AdbConnection,
    AdbConnectionError,
    AdbError,
    AdbTimeout,
)
from protocol.errors import ErrorCode, RpcError
from protocol.settings import DEFAULTS, MIB

__all__ = ["AdbCore", "default_server_port"]

T = TypeVar("T")

_SERIAL = re.compile(r"[!-~]{1,128}")


def default_server_port() -> int:
    """The adb server port: ``ANDROID_ADB_SERVER_PORT``, else adb's 5037."""
    raw = os.environ.get("ANDROID_ADB_SERVER_PORT", "")
    try:
        port = int(raw)
    except ValueError:
        return 5037
    return port if 0 < port < 65536 else 5037


class _Connection(AdbConnection):
    """A connection to the adb server, registered with the call running in this thread so
    that giving up on the call shuts it."""


class _Client:
    """Connections to one adb server, each bounded by ``socket_timeout`` unless a call gives
    its own."""

    def __init__(self, host: str, port: int, socket_timeout: float | None) -> None:
        self.host = host
        self.port = port
        self._timeout = socket_timeout

    def make_connection(self, timeout: float | None = None) -> AdbConnection:
        conn = _Connection(self.host, self.port)
        limit = timeout or self._timeout
        if limit:
            conn.conn.settimeout(limit)
        # Every connection opened inside one of our calls is registered with that call, so
        # giving up on the call shuts all of them.
        abort: _Abort | None = getattr(_current, "abort", None)
        if abort is not None:
            abort.register(conn)
        return conn

    def server_version(self) -> int:
        with self.make_connection() as conn:
            conn.send_command("host:version")
            conn.check_okay()
            return int(conn.read_string_block(), 16)

    def list(self) -> list[tuple[str, str]]:
        """``host:devices``: (serial, state) of every transport the server knows."""
        with self.make_connection() as conn:
            conn.send_command("host:devices")
            conn.check_okay()
            text = conn.read_string_block()
        found = []
        for line in text.splitlines():
            serial, _, state = line.strip().partition("\t")
            if serial and state:
                found.append((serial, state))
        return found

    def host_request(self, request: str, timeout: float | None = None) -> str:
        """A ``host:`` request answered by one string (``host:connect:…``, ``…disconnect…``)."""
        with self.make_connection(timeout=timeout) as conn:
            conn.send_command(request)
            conn.check_okay()
            return conn.read_string_block()


_current = threading.local()  # the _Abort of the call running in this worker thread


class _Abort:
    """The sockets of one blocking exchange, so the loop can shut them if it gives up, and
    the worker close them all when the exchange fails.

    Shutting (from the loop) only wakes the worker: the socket stays open until closed. A
    connection whose handshake raised never reaches the caller that would close it, so the
    worker closes whatever it registered once ``fn`` raised (:meth:`close_all`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._opened: list[socket.socket] = []  # every one registered, shut or not
        self.aborted = False

    def register(self, conn: AdbConnection) -> AdbConnection:
        with self._lock:
            if self.aborted:
                conn.close()
                raise RpcError(ErrorCode.CANCELLED, "the call was abandoned")
            self._socks.append(conn.conn)
            self._opened.append(conn.conn)
        return conn

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close_all(self) -> None:
        """Close every connection of the exchange (it failed: nobody will use them)."""
        with self._lock:
            socks, self._opened, self._socks = self._opened, [], []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()


class AdbCore:
    """The state and plumbing every device call shares: one adb server's client, the worker
    pool, the stream slots, the per-device caches, and the calls and streams still open.

    Options are keyword-only; defaults come from :data:`protocol.settings.DEFAULTS` where a
    setting exists.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        # Timeouts
        call_timeout_s: float = DEFAULTS.rpc_timeout_s,
        long_timeout_s: float = DEFAULTS.rpc_long_timeout_s,
        connect_timeout_s: float = 10.0,
        # Limits
        max_workers: int = DEFAULTS.handler_concurrency,
        max_streams: int = 64,
        max_output_bytes: int = 8 * MIB,
        max_pull_bytes: int = 64 * MIB,
        # Streams
        batch_lines: int = DEFAULTS.logcat_batch_lines,
        flush_s: float = DEFAULTS.logcat_flush_s,
        stream_max_lines: int = DEFAULTS.logcat_batch_lines * DEFAULTS.stream_queue_batches,
        stall_s: float | None = DEFAULT_STALL_S,
    ) -> None:
        self.host = host
        self.port = port if port is not None else default_server_port()
        self.call_timeout_s = call_timeout_s
        self.long_timeout_s = long_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_output_bytes = max_output_bytes
        self.max_pull_bytes = max_pull_bytes
        self.batch_lines = batch_lines
        self.flush_s = flush_s
        self.stream_max_lines = stream_max_lines
        self.stall_s = stall_s
        # socket_timeout bounds every blocking read on a connection opened without a timeout of
        # its own (sync): an idle exchange fails after it instead of holding a pool thread.
        self._client = _Client(host, self.port, call_timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="droidwire-adb")
        self._streams = threading.BoundedSemaphore(max_streams)
        self._features: dict[str, frozenset[str]] = {}
        self._install_locks: dict[str, asyncio.Lock] = {}
        self._running: set[_Abort] = set()
        self._live: set[LineStream] = set()  # open streams, ended by aclose() too
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Abandon running calls and open streams (their sockets are shut); stop the pool."""
        if self._closed:
            return
        self._closed = True
        for abort in list(self._running):
            abort.abort()
        for stream in list(self._live):
            stream.stop()
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: self._pool.shutdown(wait=True, cancel_futures=True)
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing ------------------------------------------------------------------------------

    async def _call(
        self,
        fn: Callable[[_Abort], T],
        *,
        serial: str | None = None,
        timeout_s: float | None = None,
        what: str = "adb call",
        release: Callable[[T], object] | None = None,
    ) -> T:
        """Run ``fn`` in the pool with a deadline; translate whatever adb raised.

        ``release`` frees a result nobody will take: when the caller gives up (deadline,
        cancellation) while ``fn`` still ends well in its thread, say with an open connection.
        """
        if self._closed:
            raise RpcError(ErrorCode.UNAVAILABLE, "the device layer is closed")
        abort = _Abort()

        def run() -> T:
            _current.abort = abort
            try:
                return fn(abort)
            except BaseException as exc:
                # Failed (abandoned or not): no result holds a connection of this exchange,
                # and one left open would otherwise wait for the garbage collector.
                abort.close_all()
                if isinstance(exc, RpcError) or not isinstance(exc, Exception):
                    raise
                if abort.aborted:
                    raise RpcError(ErrorCode.CANCELLED, f"{what} was abandoned") from exc
                raise translate(exc, serial) from exc
            finally:
                _current.abort = None

        def abandon() -> None:
            abort.abort()
            if release is not None and not work.cancel():  # already running: it may end well
                work.add_done_callback(
                    lambda w: None if w.cancelled() or w.exception() else release(w.result())
                )

        limit = self.call_timeout_s if timeout_s is None else timeout_s
        work = self._pool.submit(run)
        self._running.add(abort)
        try:
            async with asyncio.timeout(limit):
                return await asyncio.wrap_future(work)
        except TimeoutError as exc:
            abandon()
            where = f" on {serial}" if serial else ""
            raise RpcError(
                ErrorCode.TIMEOUT, f"{what}{where} took longer than {limit:g} s", {"serial": serial}
            ) from exc
        except asyncio.CancelledError:
            abandon()
            task = asyncio.current_task()
            if self._closed and task is not None and task.cancelling() == 0:
                # Not our caller's cancellation: aclose() dropped the queued call.
                raise RpcError(ErrorCode.CANCELLED, f"{what}: the device layer closed") from None
            raise
        finally:
            self._running.discard(abort)

    def _connect(self, abort: _Abort, timeout: float | None) -> AdbConnection:
        return self._client.make_connection(timeout=timeout)  # registered with ``abort``

    def _open(
        self, abort: _Abort, serial: str, service: str, timeout: float | None
    ) -> AdbConnection:
        """A connection switched to ``serial``'s transport with ``service`` opened on it."""
        conn = self._connect(abort, timeout)
        try:
            try:
                conn.send_command(f"host:transport:{serial}")
                conn.check_okay()
            except (ConnectionError, EOFError) as exc:
                # Still talking to the server, not the device: it went away (errors.py).
                raise AdbServerLost(f"adb server hung up on host:transport: {exc}") from exc
            conn.send_command(service)
            conn.check_okay()
        except BaseException:
            conn.close()
            raise
        return conn

    async def _open_on_loop(self, serial: str, service: str) -> socket.socket:
        """As :meth:`_open`, on the event loop (a non-blocking socket, no pool thread): a
        connection switched to ``serial``'s transport with ``service`` opened on it. Nothing past
        each ``OKAY`` is read: what the service sends first stays in the socket for its reader.
        The same exceptions as the blocking client's, for :func:`.errors.translate`."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(min(self.connect_timeout_s, CONNECT_TIMEOUT_S)):
                family, kind, proto, address = await _address(loop, self.host, self.port)
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                try:
                    await loop.sock_connect(sock, address)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise AdbTimeout("connect to adb server timeout") from exc
        except OSError as exc:
            raise AdbConnectionError(f"connect to adb server failed: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await _request(loop, sock, f"host:transport:{serial}")
            except (ConnectionError, EOFError) as exc:
                # Still talking to the server, not the device: it went away (errors.py).
                raise AdbServerLost(f"adb server hung up on host:transport: {exc}") from exc
            await _request(loop, sock, service)
        except BaseException:
            sock.close()
            raise
        return sock

    @staticmethod
    def _check_serial(serial: str) -> str:
        if not isinstance(serial, str) or not _SERIAL.fullmatch(serial):
            raise RpcError(ErrorCode.BAD_REQUEST, "a serial is 1-128 printable ASCII characters")
        return serial


async def _address(loop: asyncio.AbstractEventLoop, host: str,
                   port: int) -> tuple[int, int, int, tuple[Any, ...]]:
    """Where the adb server listens. An address given as digits (the usual ``127.0.0.1``) is
    not looked up: a lookup runs in the loop's default executor, whose few threads may all be
    taken by callers that wait for this very stream."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        family, kind, proto, _, address = (await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM))[0]
        return family, kind, proto, address
    if ip.version == 6:
        return socket.AF_INET6, socket.SOCK_STREAM, 0, (host, port, 0, 0)
    return socket.AF_INET, socket.SOCK_STREAM, 0, (host, port)


async def _request(loop: asyncio.AbstractEventLoop, sock: socket.socket, text: str) -> None:
    """One smart-socket request on a non-blocking socket: its length in four hex digits and its
    text, then ``OKAY``, or ``FAIL`` and the server's message (:class:`AdbError`)."""
    data = text.encode("utf-8")
    await loop.sock_sendall(sock, f"{len(data):04x}".encode() + data)
    status = await _read(loop, sock, 4)
    if status == b"FAIL":
        length = (await _read(loop, sock, 4)).decode("ascii", errors="replace")
        try:
            size = int(length, 16)
        except ValueError:
            raise AdbError(f"Unknown data: {length!r}") from None
        raise AdbError((await _read(loop, sock, size)).decode("utf-8", errors="replace"))
    if status != b"OKAY":
        raise AdbError(f"Unknown data: {status!r}")


async def _read(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    """``n`` bytes, or fewer if the stream ends first; never more (what follows is not ours)."""
    buffer = bytearray()
    while len(buffer) < n:
        chunk = await loop.sock_recv(sock, n - len(buffer))
        if not chunk:
            break
        buffer += chunk
    return bytes(buffer)
