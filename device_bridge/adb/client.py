"""The bridge's device layer: async access to adb devices through the adb server (adbutils).

adbutils is synchronous, so every call here runs off the event loop (docs/design.md §4.8): short
exchanges in a bounded thread pool, long streams (logcat follow, instrumentation output, the
device tracker) each in a reader thread of their own, bounded by ``max_streams``. A blocking
exchange that overruns its deadline, or whose caller is cancelled, has its socket shut down so
its thread ends too.

Errors leave this module as :class:`~protocol.errors.RpcError` (``device_offline``,
``not_found``, ``timeout``, ``unavailable`` …), translated by :func:`.errors.translate`.

This layer does not apply the command policy: the RPC handlers check
:class:`device_bridge.policy.Policy` first and hand over what it returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import os
import re
import shlex
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from adbutils import AdbClient, AdbConnection, adb_path
from adbutils.errors import AdbConnectionError, AdbError, AdbTimeout

from device_bridge.adb.errors import AdbServerLost, translate
from device_bridge.adb.streams import DEFAULT_STALL_S, LineStream, RawDecoder, ShellV2Decoder
from protocol.envelope import DeviceInfo, Profile
from protocol.errors import ErrorCode, RpcError
from protocol.methods import InstrumentResult, ShellResult
from protocol.settings import DEFAULTS, MIB

if TYPE_CHECKING:
    from device_bridge.adb.tracker import DeviceWatcher

__all__ = [
    "INSTALL_DIR",
    "AdbDevices",
    "DeviceFacts",
    "DeviceState",
    "Installed",
    "ShellSocket",
    "default_server_port",
]

log = logging.getLogger("droidwire.bridge.adb")

T = TypeVar("T")

#: Where the bridge stages APKs it installs (inside the borrower's folder, docs/design.md §6).
INSTALL_DIR = "/data/local/tmp/droidwire/.install"

_SERIAL = re.compile(r"[!-~]{1,128}")
_PROP_LINE = re.compile(r"^\[([^\]]+)\]: \[(.*)\]$")
_WM_SIZE = re.compile(r"(Physical|Override) size: (\d+)x(\d+)")
_BATTERY_LEVEL = re.compile(r"^\s*level: (\d+)\s*$", re.M)
_V1_EXIT = "X4EXIT:"


def default_server_port() -> int:
    """The adb server port: ``ANDROID_ADB_SERVER_PORT``, else adb's 5037."""
    raw = os.environ.get("ANDROID_ADB_SERVER_PORT", "")
    try:
        port = int(raw)
    except ValueError:
        return 5037
    return port if 0 < port < 65536 else 5037


@dataclass(frozen=True, slots=True)
class Installed:
    """What an install put on the device, as the device tells it: ``package`` ("" when it
    cannot be told), and whether it ``existed`` there before (an update of it)."""

    package: str
    existed: bool


@dataclass(frozen=True, slots=True)
class DeviceState:
    """One line of ``adb devices``: ``state`` is adb's (``device``, ``offline``, ``unauthorized`` …)."""

    serial: str
    state: str


class ShellSocket:
    """An open adb stream socket; :meth:`close` (any thread, idempotent) frees its slot."""

    def __init__(self, sock: socket.socket, release: Callable[[], object]) -> None:
        self.sock = sock
        self._release: Callable[[], object] | None = release
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is None:
            return
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        release()


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """What :meth:`AdbDevices.info` learns from ``getprop``, ``dumpsys battery`` and ``wm size``."""

    serial: str
    state: str = "device"
    model: str | None = None
    manufacturer: str | None = None
    release: str | None = None
    sdk: int | None = None
    abi: str | None = None
    battery: int | None = None
    screen: tuple[int, int] | None = None  # (width, height) in pixels, override size first
    props: dict[str, str] = field(default_factory=dict, repr=False)

    def to_device_info(self, profile: Profile = Profile.STANDARD) -> DeviceInfo:
        def name(value: str | None) -> str | None:
            return value[:256] if value else None

        battery = self.battery if self.battery is not None and 0 <= self.battery <= 100 else None
        return DeviceInfo(
            serial=self.serial,
            state=self.state,
            model=name(self.model),
            manufacturer=name(self.manufacturer),
            release=name(self.release),
            sdk=self.sdk,
            abi=name(self.abi),
            battery=battery,
            profile=profile,
        )


class _Connection(AdbConnection):  # type: ignore[misc]
    """adbutils' connection without its fallback of running ``adb start-server``.

    A bridge starts its server once, on purpose (:meth:`AdbDevices.start_server`), on the
    port it was given; a call made while the server is down fails as ``unavailable`` instead
    of spawning a server (possibly on another port) from inside a worker thread.
    """

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        super().__init__(host, port)

    def _safe_connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._address, timeout=3.0)
        except TimeoutError as exc:
            raise AdbTimeout("connect to adb server timeout") from exc
        except OSError as exc:
            raise AdbConnectionError(f"connect to adb server failed: {exc}") from exc
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


class _Client(AdbClient):  # type: ignore[misc]
    def __init__(self, host: str, port: int, socket_timeout: float | None) -> None:
        super().__init__(host=host, port=port, socket_timeout=socket_timeout)
        self._timeout = socket_timeout

    def make_connection(self, timeout: float | None = None) -> AdbConnection:
        conn = _Connection(self.host, self.port)
        limit = timeout or self._timeout
        if limit:
            conn.conn.settimeout(limit)
        # Every connection adbutils opens inside one of our calls (sync, list, connect…) is
        # registered with that call, so giving up on the call shuts all of them.
        abort: _Abort | None = getattr(_current, "abort", None)
        if abort is not None:
            abort.register(conn)
        return conn


_current = threading.local()  # the _Abort of the call running in this worker thread


class _Abort:
    """The sockets of one blocking exchange, so the loop can shut them if it gives up, and
    the worker close them all when the exchange fails.

    Shutting (from the loop) only wakes the worker: the socket stays open until closed. adbutils
    does not close every connection it opened when an exchange fails (``open_transport`` leaves
    its connection to the caller, who never receives it when the handshake raises), so the
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


class AdbDevices:
    """Async access to every device of one adb server.

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
        # socket_timeout bounds every blocking read adbutils does on its own connections (sync):
        # an idle exchange fails after it instead of holding a pool thread forever.
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

    async def __aenter__(self) -> AdbDevices:
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
                # and one adbutils left open would otherwise wait for the garbage collector.
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

    @staticmethod
    def _check_serial(serial: str) -> str:
        if not isinstance(serial, str) or not _SERIAL.fullmatch(serial):
            raise RpcError(ErrorCode.BAD_REQUEST, "a serial is 1-128 printable ASCII characters")
        return serial

    # -- devices -------------------------------------------------------------------------------

    async def start_server(self, *, timeout_s: float = 20.0) -> None:
        """``adb start-server`` on this layer's port (a no-op when one is already running)."""
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(self.port)}

        def run(_: _Abort) -> None:
            # The server daemon inherits our stdio: a pipe would stay open until it exits, so
            # its messages go to a file instead.
            with tempfile.TemporaryFile() as errors:
                done = subprocess.run(
                    [adb_path(), "start-server"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    timeout=timeout_s,
                    check=False,
                )
                if done.returncode != 0:
                    errors.seek(0)
                    text = errors.read(4096).decode(errors="replace").strip()
                    raise RpcError(ErrorCode.UNAVAILABLE, f"adb start-server failed: {text[:300]}")

        await self._call(run, timeout_s=timeout_s + 1.0, what="adb start-server")

    async def kill_server(self) -> None:
        """``adb kill-server`` for this layer's port; returns once the server has exited.

        Used by tests and ``droidwire demo``. The server answers ``OKAY`` and then exits,
        leaving its sockets to the kernel (AOSP ``adb/adb.cpp`` ``handle_host_request``,
        "kill": "Rely on process exit to close the socket for us"). Until it has exited it
        still accepts connections, so the kill connection is read to its end: only then is
        the next call refused (``unavailable``) rather than accepted and dropped.
        """

        def run(abort: _Abort) -> None:
            try:
                conn = self._connect(abort, self.call_timeout_s)
            except AdbConnectionError:
                return  # nothing listens: no server to kill
            with conn:
                conn.send_command("host:kill")
                conn.check_okay()
                try:
                    while conn.conn.recv(4096):
                        pass  # the server sends nothing more; EOF comes with its exit
                except ConnectionError:
                    pass  # a reset says the same: the process is gone

        await self._call(run, what="adb kill-server")

    async def server_version(self) -> int:
        return await self._call(lambda _: int(self._client.server_version()), what="adb version")

    async def devices(self) -> list[DeviceState]:
        """Every transport the adb server knows, in any state."""
        infos = await self._call(lambda _: self._client.list(), what="adb devices")
        return [DeviceState(i.serial, i.state) for i in infos]

    async def state(self, serial: str) -> str:
        """adb's state of one device, ``not_found`` if it is not attached."""
        self._check_serial(serial)
        for device in await self.devices():
            if device.serial == serial:
                return device.state
        raise RpcError(ErrorCode.NOT_FOUND, f"no device {serial!r}", {"serial": serial})

    def forget(self, serial: str) -> None:
        """Drop what is cached about a device (call on every state change)."""
        self._features.pop(serial, None)

    async def features(self, serial: str) -> frozenset[str]:
        self._check_serial(serial)
        cached = self._features.get(serial)
        if cached is not None:
            return cached

        def get(abort: _Abort) -> frozenset[str]:
            conn = self._connect(abort, self.call_timeout_s)
            with conn:
                conn.send_command(f"host-serial:{serial}:features")
                conn.check_okay()
                return frozenset(f for f in conn.read_string_block().split(",") if f)

        found = await self._call(get, serial=serial, what="features")
        self._features[serial] = found
        return found

    async def connect(self, address: str, *, timeout_s: float | None = None) -> str:
        """``adb connect HOST:PORT``; returns the serial; ``unavailable`` when it fails."""
        self._check_serial(address)
        limit = self.connect_timeout_s if timeout_s is None else timeout_s
        text = await self._call(
            lambda _: self._client.connect(address, timeout=limit),
            timeout_s=limit + 1.0,
            what=f"adb connect {address}",
        )
        if text.startswith(("connected to", "already connected to")):
            self.forget(address)
            return address
        raise RpcError(
            ErrorCode.UNAVAILABLE, f"adb connect {address}: {text.strip()}", {"adb": text}
        )

    async def disconnect(self, address: str) -> bool:
        """``adb disconnect HOST:PORT``; ``True`` if adb knew the address."""
        self._check_serial(address)
        self.forget(address)

        def run(_: _Abort) -> bool:
            try:
                text = self._client.disconnect(address, raise_error=True)
            except AdbError:
                return False
            return bool(text) and str(text).startswith("disconnected")

        return await self._call(run, what=f"adb disconnect {address}")

    async def info(self, serial: str) -> DeviceFacts:
        """Model, manufacturer, release, SDK, ABI, battery level and screen size."""
        props_out, battery_out, wm_out = await asyncio.gather(
            self.shell(serial, ["getprop"]),
            self.shell(serial, ["dumpsys", "battery"]),
            self.shell(serial, ["wm", "size"]),
        )
        props: dict[str, str] = {}
        for line in props_out.stdout.splitlines():
            match = _PROP_LINE.match(line.strip())
            if match:
                props[match[1]] = match[2]
        sizes = {m[1]: (int(m[2]), int(m[3])) for m in _WM_SIZE.finditer(wm_out.stdout)}
        level = _BATTERY_LEVEL.search(battery_out.stdout)
        sdk = props.get("ro.build.version.sdk", "")
        return DeviceFacts(
            serial=serial,
            model=props.get("ro.product.model") or None,
            manufacturer=props.get("ro.product.manufacturer") or None,
            release=props.get("ro.build.version.release") or None,
            sdk=int(sdk) if sdk.isdigit() else None,
            abi=props.get("ro.product.cpu.abi") or None,
            battery=int(level[1]) if level else None,
            screen=sizes.get("Override") or sizes.get("Physical"),
            props=props,
        )

    # -- shell ---------------------------------------------------------------------------------

    async def shell(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
    ) -> ShellResult:
        """Run ``argv`` (quoted with ``shlex.join``) and return its exit code and output.

        Uses the shell protocol v2 (separate stderr, real exit code) when the device has it,
        else the legacy shell with adbutils' ``; echo X4EXIT:$?`` trick (stderr then arrives
        mixed into stdout). Output over ``max_output_bytes`` is dropped and ``truncated`` set;
        the command still runs to its end or to ``timeout``.
        """
        self._check_serial(serial)
        if not argv:
            raise RpcError(ErrorCode.BAD_REQUEST, "empty command")
        command = shlex.join(argv)
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        cap = self.max_output_bytes if max_output_bytes is None else max_output_bytes
        v2 = "shell_v2" in await self.features(serial)

        def run(abort: _Abort) -> ShellResult:
            if v2:
                return self._shell_v2(abort, serial, command, limit, cap)
            return self._shell_v1(abort, serial, command, limit, cap)

        return await self._call(run, serial=serial, timeout_s=limit, what=f"shell {argv[0]}")

    def _shell_v2(
        self, abort: _Abort, serial: str, command: str, limit: float, cap: int
    ) -> ShellResult:
        conn = self._open(abort, serial, f"shell,v2,raw:{command}", limit)
        stdout, stderr = bytearray(), bytearray()
        truncated = False
        exit_code: int | None = None
        with conn:
            while exit_code is None:
                header = conn.read_exact(5)
                kind, length = header[0], int.from_bytes(header[1:5], "little")
                payload = conn.read_exact(length) if length else b""
                if kind == 3:
                    exit_code = payload[0] if payload else 255
                elif kind in (1, 2):
                    target = stdout if kind == 1 else stderr
                    room = cap - len(stdout) - len(stderr)
                    if len(payload) > room:
                        truncated = True
                        payload = payload[: max(room, 0)]
                    target += payload
        return ShellResult(
            exit_code=exit_code,
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            truncated=truncated,
        )

    def _shell_v1(
        self, abort: _Abort, serial: str, command: str, limit: float, cap: int
    ) -> ShellResult:
        conn = self._open(abort, serial, f"shell:{command}; echo {_V1_EXIT}$?", limit)
        out = bytearray()
        tail = b""  # the marker must survive truncation: keep the last bytes apart
        truncated = False
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data = tail + chunk
                tail = data[-64:]
                data = data[:-64]
                room = cap - len(out)
                if len(data) > room:
                    truncated = True
                    data = data[: max(room, 0)]
                out += data
        out += tail
        marker = out.rfind(_V1_EXIT.encode())
        if marker < 0:
            raise RpcError(
                ErrorCode.DEVICE_OFFLINE,
                f"shell on {serial} ended without an exit status",
                {"serial": serial},
            )
        code_text = out[marker + len(_V1_EXIT) :].strip()
        exit_code = int(code_text) if code_text.isdigit() else 255
        return ShellResult(
            exit_code=exit_code,
            stdout=out[:marker].decode("utf-8", errors="replace"),
            truncated=truncated,
        )

    async def exec_out(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """Raw stdout of ``argv`` over ``exec:`` (binary safe, no PTY, no exit code)."""
        self._check_serial(serial)
        command = shlex.join(argv)
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        cap = self.max_output_bytes if max_bytes is None else max_bytes

        def run(abort: _Abort) -> bytes:
            conn = self._open(abort, serial, f"exec:{command}", limit)
            out = bytearray()
            with conn:
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return bytes(out)
                    out += chunk
                    if len(out) > cap:
                        raise RpcError(
                            ErrorCode.BAD_REQUEST,
                            f"{argv[0]} output exceeds {cap} bytes",
                            {"serial": serial},
                        )

        return await self._call(run, serial=serial, timeout_s=limit, what=f"exec {argv[0]}")

    async def screenshot(self, serial: str, *, timeout_s: float | None = None) -> bytes:
        """``screencap -p``: PNG bytes, checked for the PNG signature."""
        # A PNG must fit in one frame (docs/design.md §3 limits), whatever the shell output cap is.
        cap = DEFAULTS.max_frame_bytes - 64 * 1024
        png = await self.exec_out(serial, ["screencap", "-p"], timeout_s=timeout_s, max_bytes=cap)
        if not png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise RpcError(
                ErrorCode.UNAVAILABLE, f"screencap on {serial} returned no PNG", {"serial": serial}
            )
        return png

    # -- logcat --------------------------------------------------------------------------------

    @staticmethod
    def _logcat_args(
        *,
        format: str = "threadtime",
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
    ) -> list[str]:
        args = ["-v", format]
        if buffers:
            args += ["-b", ",".join(buffers)]
        if pid is not None:
            args += ["--pid", str(int(pid))]
        return args

    async def logcat_clear(self, serial: str, *, buffers: Iterable[str] | None = None) -> None:
        argv = ["logcat", "-c"] + (["-b", ",".join(buffers)] if buffers else [])
        result = await self.shell(serial, argv)
        if result.exit_code != 0:
            raise RpcError(
                ErrorCode.INTERNAL,
                f"logcat -c on {serial} failed: {result.stderr.strip()}",
                {"serial": serial, "exit_code": result.exit_code},
            )

    async def logcat_dump(
        self,
        serial: str,
        *,
        format: str = "threadtime",
        lines: int | None = None,
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
        timeout_s: float | None = None,
    ) -> list[str]:
        """``logcat -d`` (``-t N`` for the last N lines): the buffer's lines, in order."""
        argv = ["logcat", "-d", *self._logcat_args(format=format, buffers=buffers, pid=pid)]
        if lines is not None:
            argv += ["-t", str(int(lines))]
        result = await self.shell(serial, argv, timeout_s=timeout_s)
        if result.exit_code != 0:
            raise RpcError(
                ErrorCode.INTERNAL,
                f"logcat -d on {serial} failed: {result.stderr.strip()}",
                {"serial": serial, "exit_code": result.exit_code},
            )
        return [line.rstrip("\r") for line in result.stdout.splitlines()]

    async def logcat_follow(
        self,
        serial: str,
        *,
        format: str = "threadtime",
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
        tail: int | None = None,
        batch_lines: int | None = None,
        flush_s: float | None = None,
        max_lines: int | None = None,
        lossless: bool = False,
    ) -> LineStream:
        """Follow logcat live: an async iterator of :class:`~protocol.methods.LogBatch`.

        Without ``tail`` it starts with the whole buffer, as ``logcat`` does; ``tail=N`` (N ≥ 1)
        starts with the last N lines (``-T N``). ``lossless`` never drops lines (the device
        waits instead). Close it with ``aclose()`` (``async with``), which also ends the
        ``logcat`` on the device.
        """
        argv = ["logcat", *self._logcat_args(format=format, buffers=buffers, pid=pid)]
        if tail:
            argv += ["-T", str(int(tail))]
        return await self.stream(
            serial,
            argv,
            v2=False,
            batch_lines=batch_lines,
            flush_s=flush_s,
            max_lines=max_lines,
            lossless=lossless,
            name=f"logcat {serial}",
        )

    async def stream(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        v2: bool = True,
        batch_lines: int | None = None,
        flush_s: float | None = None,
        max_lines: int | None = None,
        lossless: bool = False,
        name: str | None = None,
    ) -> LineStream:
        """Run ``argv`` and stream its output lines in batches (see :class:`LineStream`).

        ``v2`` uses the shell protocol when the device has it, so the stream ends with the
        command's ``exit_code``.
        """
        self._check_serial(serial)
        command = shlex.join(argv)
        use_v2 = v2 and "shell_v2" in await self.features(serial)
        service = f"shell,v2,raw:{command}" if use_v2 else f"shell:{command}"
        if not self._streams.acquire(blocking=False):
            raise RpcError(ErrorCode.BUSY, "too many device streams open on this bridge")
        try:
            conn = await self._call(
                lambda abort: self._open(abort, serial, service, self.connect_timeout_s),
                serial=serial,
                what=f"open {argv[0]}",
                release=lambda abandoned: abandoned.close(),
            )
        except BaseException:
            self._streams.release()
            raise
        sock = conn.conn
        sock.settimeout(None)  # the reader blocks; aclose() shuts the socket to stop it
        decoder: RawDecoder | ShellV2Decoder = ShellV2Decoder() if use_v2 else RawDecoder()

        def done() -> None:
            self._live.discard(stream)
            self._streams.release()

        stream = LineStream(
            sock,
            decoder=decoder,
            batch_lines=batch_lines or self.batch_lines,
            flush_s=flush_s if flush_s is not None else self.flush_s,
            max_lines=max_lines or self.stream_max_lines,
            stall_s=None if lossless else self.stall_s,
            name=name or f"{argv[0]} {serial}",
            on_done=done,
        )
        self._live.add(stream)
        return stream.start()

    async def open_socket(self, serial: str, service: str, *, what: str) -> ShellSocket:
        """A raw socket on ``service`` of ``serial`` (a persistent shell, ``exec:`` output
        read as bytes). It counts as one of the bridge's device streams until closed."""
        self._check_serial(serial)
        if not self._streams.acquire(blocking=False):
            raise RpcError(ErrorCode.BUSY, "too many device streams open on this bridge")
        try:
            conn = await self._call(
                lambda abort: self._open(abort, serial, service, self.connect_timeout_s),
                serial=serial,
                what=what,
                release=lambda abandoned: abandoned.close(),
            )
        except BaseException:
            self._streams.release()
            raise
        sock: socket.socket = conn.conn
        sock.settimeout(None)
        return ShellSocket(sock, self._streams.release)

    # -- files and packages --------------------------------------------------------------------

    async def push(
        self,
        serial: str,
        path: str,
        data: bytes,
        *,
        mode: int = 0o644,
        timeout_s: float | None = None,
    ) -> int:
        """Write ``data`` to ``path`` on the device (sync SEND); returns the size written."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            return int(self._client.device(serial).sync.push(data, path, mode & 0o777))

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"push {path}")

    async def pull(
        self,
        serial: str,
        path: str,
        *,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> bytes:
        """Read ``path`` from the device (sync RECV); ``not_found`` if it does not exist."""
        self._check_serial(serial)
        cap = self.max_pull_bytes if max_bytes is None else max_bytes

        def run(abort: _Abort) -> bytes:
            out = bytearray()
            for chunk in self._client.device(serial).sync.iter_content(path):
                out += chunk
                if len(out) > cap:
                    raise RpcError(
                        ErrorCode.BAD_REQUEST,
                        f"{path} is larger than {cap} bytes",
                        {"serial": serial, "path": path},
                    )
            return bytes(out)

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"pull {path}")

    async def push_file(
        self,
        serial: str,
        local: str | BinaryIO,
        path: str,
        *,
        mode: int = 0o644,
        timeout_s: float | None = None,
    ) -> int:
        """Stream the host file ``local`` (a name, or a readable binary file) to ``path`` on
        the device (sync SEND, chunk by chunk: never whole in memory); the size written."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            # An open file, not its name: a directory at ``path`` is an error, never a file
            # quietly written inside it under the host file's name.
            if not isinstance(local, str):
                return int(self._client.device(serial).sync.push(local, path, mode & 0o777))
            with open(local, "rb") as src:
                return int(self._client.device(serial).sync.push(src, path, mode & 0o777))

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"push {path}")

    async def pull_file(
        self,
        serial: str,
        path: str,
        local: str,
        *,
        max_bytes: int,
        timeout_s: float | None = None,
    ) -> int:
        """Stream ``path`` from the device into the host file ``local`` (sync RECV); returns
        its size; ``bad_request`` past ``max_bytes`` (the file is left partial)."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            size = 0
            with open(local, "wb") as out:
                for chunk in self._client.device(serial).sync.iter_content(path):
                    size += len(chunk)
                    if size > max_bytes:
                        raise RpcError(
                            ErrorCode.BAD_REQUEST,
                            f"{path} is larger than {max_bytes} bytes",
                            {"serial": serial, "path": path, "reason": "too_large"},
                        )
                    out.write(chunk)
            return size

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"pull {path}")

    async def install(
        self,
        serial: str,
        apk: bytes,
        *,
        replace: bool = True,
        allow_test: bool = True,
        grant_permissions: bool = False,
        timeout_s: float | None = None,
    ) -> Installed:
        """Install APK bytes (push to :data:`INSTALL_DIR`, ``pm install``, remove the copy).

        What was installed is learned from the device, never from the APK's own claims: the
        package whose entry in ``pm list packages -f`` appeared or changed (a new install, or
        an update, gets a new code path) across the install, with whether it was on the device
        before (:class:`Installed`). Installs on one device are serialised, so two of ours
        never blur each other's difference. ``-g`` (grant every runtime permission) only when
        asked: the controller asks only for the device's owner (docs/security.md).
        """
        self._check_serial(serial)
        limit = self.long_timeout_s if timeout_s is None else timeout_s
        lock = self._install_locks.setdefault(serial, asyncio.Lock())
        async with lock:
            before = await self._package_paths(serial)
            remote = f"{INSTALL_DIR}/{hashlib.sha256(apk).hexdigest()[:16]}.apk"
            await self.push(serial, remote, apk, timeout_s=limit)
            flags = (["-r"] if replace else []) + (["-t"] if allow_test else [])
            flags += ["-g"] if grant_permissions else []
            try:
                result = await self.shell(
                    serial, ["pm", "install", *flags, remote], timeout_s=limit
                )
            finally:
                with contextlib.suppress(RpcError):
                    await self.shell(serial, ["rm", "-f", remote])
            text = (result.stdout + result.stderr).strip()
            if "Success" not in text:
                match = re.search(r"Failure \[([A-Z_]+)", text)
                reason = match[1] if match else "UNKNOWN"
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"install on {serial} failed: {text[:300]}",
                    {"serial": serial, "reason": reason},
                )
            after = await self._package_paths(serial)
        changed = sorted(name for name, path in after.items() if before.get(name) != path)
        if len(changed) != 1:
            log.warning("install on %s: cannot tell which package it installed (%d changed)",
                        serial, len(changed))
            return Installed("", existed=True)
        return Installed(changed[0], existed=changed[0] in before)

    async def uninstall(self, serial: str, package: str) -> bool:
        """``pm uninstall``; ``True`` if it was installed."""
        result = await self.shell(serial, ["pm", "uninstall", package])
        return "Success" in result.stdout

    async def package_paths(self, serial: str) -> dict[str, str]:
        """``pm list packages -f``: package → code path (what an install changes)."""
        return await self._package_paths(serial)

    async def _package_paths(self, serial: str) -> dict[str, str]:
        """``pm list packages -f``: package → code path (``package:PATH=NAME`` lines)."""
        result = await self.shell(serial, ["pm", "list", "packages", "-f"])
        out: dict[str, str] = {}
        for line in result.stdout.splitlines():
            line = line.strip()
            if line.startswith("package:") and "=" in line:
                path, _, name = line[len("package:"):].rpartition("=")
                if name:
                    out[name] = path
        return out

    async def instrument_stream(
        self,
        serial: str,
        package: str,
        runner: str = "androidx.test.runner.AndroidJUnitRunner",
        *,
        args: dict[str, str] | None = None,
    ) -> LineStream:
        """``am instrument -w -r [-e K V]… PKG/RUNNER``, its raw output lines as they come."""
        argv = ["am", "instrument", "-w", "-r"]
        for key, value in (args or {}).items():
            argv += ["-e", key, value]
        argv.append(f"{package}/{runner}")
        # Never drop instrumentation output: it is the run's evidence.
        return await self.stream(serial, argv, v2=True, lossless=True, name=f"instrument {serial}")

    async def instrument(
        self,
        serial: str,
        package: str,
        runner: str = "androidx.test.runner.AndroidJUnitRunner",
        *,
        args: dict[str, str] | None = None,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        on_lines: Callable[[list[str]], Any] | None = None,
    ) -> InstrumentResult:
        """Run an instrumentation to its end; raw output (the controller parses it).

        ``on_lines`` (plain or async) sees each batch as it arrives. Past ``timeout_s`` the
        instrumentation is stopped and ``timeout`` raised, with the output so far in its data.
        """
        cap = self.max_output_bytes if max_output_bytes is None else max_output_bytes
        limit = self.long_timeout_s if timeout_s is None else timeout_s
        lines: list[str] = []
        size = 0
        truncated = False
        stream = await self.instrument_stream(serial, package, runner, args=args)
        try:
            async with asyncio.timeout(limit):
                async for batch in stream:
                    if on_lines is not None and batch.lines:
                        pending = on_lines(batch.lines)
                        if inspect.isawaitable(pending):
                            await pending
                    for line in batch.lines:
                        size += len(line) + 1
                        if size > cap:
                            truncated = True
                            continue
                        lines.append(line)
                    if batch.eof and batch.reason not in ("closed", "exited"):
                        raise RpcError(
                            ErrorCode.DEVICE_OFFLINE,
                            f"instrumentation on {serial} lost: {batch.reason}",
                            {"serial": serial, "output": "\n".join(lines)[-65536:]},
                        )
        except TimeoutError as exc:
            raise RpcError(
                ErrorCode.TIMEOUT,
                f"instrumentation on {serial} took longer than {limit:g} s",
                {"serial": serial, "output": "\n".join(lines)[-65536:]},
            ) from exc
        finally:
            await stream.aclose()
        exit_code = stream.exit_code if stream.exit_code is not None else 0
        output = "\n".join(lines) + ("\n" if lines else "")
        return InstrumentResult(output=output, exit_code=exit_code, truncated=truncated)

    # -- tracking ------------------------------------------------------------------------------

    def watch(self, *, retry_s: float = 0.5) -> DeviceWatcher:
        """A new tracker of device states (``adb track-devices``); use with ``async with``."""
        from device_bridge.adb.tracker import DeviceWatcher

        return DeviceWatcher(self, retry_s=retry_s)
