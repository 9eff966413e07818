"""A simulated Android device that the real adb server accepts with ``adb connect``.

One :class:`SimDevice` is a TCP listener speaking the adb *transport* protocol (AOSP
``protocol.txt``; ``docs/simulated-device.md`` says what it answers; connection and streams live
in :mod:`device_bridge.sim.adbd`). It announces maxdata 256 KiB and the banner
``device::…;features=shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir``: an honest list, every
feature advertised is implemented, and ``abb_exec``, ``delayed_ack``, ``sendrecv_v2`` are not
advertised. Services: ``shell:``, ``shell,v2,…:`` (with ``pty`` and
interactive sessions), ``exec:`` and ``sync:``, and adbd's others as a user build answers them
(:mod:`device_bridge.sim.services`: ``reverse:``, ``tcp:``, ``jdwp``, ``root:``, ``reboot:``…).
With ``auth=True`` it is a secure phone: adb's RSA handshake (:mod:`device_bridge.sim.auth`)
before anything else, "unauthorized" until a key it trusts signs in or :meth:`allow` is called.

Behind the transport sits a small Android: properties from a :mod:`profile
<device_bridge.sim.profiles>`, a logcat (:mod:`~device_bridge.sim.logbuf`) with light
background noise and a ``SimShell`` line for every command run, a file system for
``/data/local/tmp`` (:mod:`~device_bridge.sim.files`), packages installed from simulated APKs,
processes, window focus, and ``am instrument`` played by the toolchain's instrumentation player.
The device implements :class:`device_bridge.sim.apk.DeviceHooks` for that player.

Usage::

    async with SimDevice(port=0, profile="pixel-7") as dev:
        ...  # adb connect dev.address
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from device_bridge.sim import commands
from device_bridge.sim.adbd import (
    Connection,
    CrLfSink,
    Handler,
    Stream,
    StreamSink,
    V2Sink,
    V2Source,
)
from device_bridge.sim.apk import ApkError, SimPackage, read_apk
from device_bridge.sim.auth import AdbAuth, PendingKey
from device_bridge.sim.dumpsys import dumpsys
from device_bridge.sim.files import SimFiles
from device_bridge.sim.listener import StreamListener
from device_bridge.sim.logbuf import BUFFERS, LogBuffer
from device_bridge.sim.net import DeviceNet, normalize
from device_bridge.sim.profiles import DeviceProfile, get_profile
from device_bridge.sim.screen import Screen, hit, render_png, render_raw, render_ui_xml
from device_bridge.sim.services import adbd_service, bridge
from device_bridge.sim.shell import Shell
from device_bridge.sim.shell_io import BytesSource
from device_bridge.sim.sync import serve_sync
from device_bridge.sim.system import InstallSessions, Settings, proc_files
from device_bridge.sim.toybox import kernel_release
from device_bridge.sim.ui_demo import DEMO_PACKAGE, DemoUi

__all__ = ["FEATURES", "InstalledPackage", "SimDevice"]

logger = logging.getLogger("droidwire.sim.device")

FEATURES = ("shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir")
DEFAULT_MAXDATA = 256 * 1024

SYSTEM_PACKAGES = (
    "android", "com.android.bluetooth", "com.android.chrome", "com.android.phone",
    "com.android.providers.settings", "com.android.settings", "com.android.shell",
    "com.android.systemui", "com.google.android.gms",
)
_SYSTEM_TAGS = {"ActivityManager", "ActivityTaskManager", "PackageManager", "WindowManager",
                "BatteryService", "ConnectivityService", "AlarmManager", "JobScheduler",
                "PowerManagerService", "InputDispatcher"}


@dataclass
class InstalledPackage:
    pkg: SimPackage
    path: str
    uid: int
    installed_at: float = field(default_factory=time.time)


@dataclass
class _Process:
    pid: int
    package: str
    uid: int


# -- the device -------------------------------------------------------------------------------


class SimDevice:
    """A simulated device; ``async with`` it (or ``start``/``stop``) to serve on ``port``."""

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        serial: str | None = None,
        profile: str | DeviceProfile = "pixel-7",
        # Behaviour
        noise_interval: float | None = 1.0,
        seed: int | None = None,
        # Limits
        log_capacity: int = 256 * 1024,
        storage_quota: int = 512 * 1024 * 1024,
        maxdata: int = DEFAULT_MAXDATA,
        # Security: adb's RSA authentication (a secure phone), keys it already trusts
        auth: bool = False,
        adb_keys: list[str] | None = None,
        auto_allow: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.profile = profile if isinstance(profile, DeviceProfile) else get_profile(profile)
        self._serial = serial
        self.noise_interval = noise_interval
        self.maxdata = maxdata
        self.logbuf = LogBuffer(capacity=log_capacity)
        self.files = SimFiles(quota=storage_quota)
        self.packages: dict[str, InstalledPackage] = {}
        self.processes: dict[str, _Process] = {}
        self.input_log: deque[tuple[str, dict[str, Any]]] = deque(maxlen=1000)
        self.typed_text = ""  # the focused app's text field
        self.keyboard_shown = False
        self._rng = random.Random(seed)
        self._clock_offset = 0.0
        self._next_pid = 4000 + self._rng.randrange(3000)
        self._next_uid = 10150
        self.system_pid = 1400 + self._rng.randrange(200)
        self.shell_pid = self.system_pid + 2000
        self.launcher = self._component(*self.profile.launcher.split("/", 1))
        self.focus = self.launcher
        self.system_packages = (*SYSTEM_PACKAGES, self.launcher.split("/", 1)[0])
        self.recent: list[str] = [self.launcher]
        self.battery_level = 87
        self.battery_temperature = 285  # tenths of a degree Celsius, as dumpsys prints it
        self.app_ui = DemoUi()  # the demo app's screens (ui_demo), on its own UI clock
        self._server: StreamListener | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped = asyncio.Event()
        self._booted = False
        self.auth: AdbAuth | None = (AdbAuth(adb_keys, auto_allow=auto_allow)
                                     if auth or adb_keys else None)
        self.net = DeviceNet(lambda coro: self.keep_task(asyncio.ensure_future(coro)))
        self._reverses: dict[Connection, dict[str, str]] = {}
        self.boots = 1
        self._booted_at = time.monotonic()
        self.settings = Settings(self.serial)
        self.install_sessions = InstallSessions(self._rng)
        self.files.virtual.update(proc_files(self))

    # -- identity -----------------------------------------------------------------------

    @property
    def serial(self) -> str:
        """``ro.serialno``; adb itself names the device by :attr:`address`."""
        return self._serial or f"SIM{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def props(self) -> dict[str, str]:
        props = self.profile.props(self.serial)
        props["ro.adb.secure"] = "1" if self.auth is not None else "0"
        return props

    def banner(self) -> str:
        p = self.profile
        model = p.model.replace(" ", "_")
        return (
            f"device::ro.product.name={p.product};ro.product.model={model};"
            f"ro.product.device={p.device};features={','.join(FEATURES)}"
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            return
        self._stopped.clear()
        self._server = await StreamListener.open(self._on_client, self.host, self.port)
        self.port = self._server.port
        if not self._booted:
            self._booted = True
            self._boot_log()
        if self.noise_interval:
            self.keep_task(asyncio.create_task(self._noise()))
        logger.info("simulated device %s (%s) listening on %s", self.serial, self.profile.name,
                    self.address)

    async def stop(self) -> None:
        """Close the listener and every connection: adb sees the device go offline."""
        server, self._server = self._server, None
        for conn in list(self._connections):
            conn.close()  # its reader sees EOF and its handler returns
        if server is not None:
            await server.close()  # and every connection accepted but not yet handled
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._stopped.set()

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await self._stopped.wait()
        finally:
            await self.stop()

    async def __aenter__(self) -> SimDevice:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def keep_task(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # Without TCP_NODELAY each round trip costs ~30 ms more.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, reader, writer)
        self._connections.add(conn)
        logger.debug("device %s: adb server connected", self.serial)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)

    # -- services -----------------------------------------------------------------------

    def service_for(self, service: str, conn: Connection) -> Handler | None:
        if service.startswith("shell"):
            head, sep, cmdline = service.partition(":")
            if not sep:
                return None
            args = head.split(",")[1:]
            v2 = "v2" in args
            # An empty command is an interactive shell, on a PTY unless "raw" is asked.
            pty = "pty" in args or ("raw" not in args and not cmdline.strip())
            # adbd sets $TERM from the service's TERM= argument, "dumb" without one.
            term = next((a[5:] for a in args if a.startswith("TERM=")), "dumb")[:64] or "dumb"
            return lambda s: self._shell_service(s, cmdline, v2=v2, pty=pty, term=term)
        if service.startswith("exec:"):
            cmdline = service[len("exec:"):]
            return lambda s: self._shell_service(s, cmdline, v2=False)
        if service == "sync:":
            return lambda s: serve_sync(s, self.files)
        return adbd_service(self, service, conn)

    def connection_lost(self, conn: Connection) -> None:
        self.reverse_remove_all(conn)

    # -- authentication (secure phone) ---------------------------------------------------

    @property
    def pending_keys(self) -> list[PendingKey]:
        """Hosts waiting at the "Allow USB debugging?" prompt."""
        return self.auth.pending if self.auth is not None else []

    def allow(self, fingerprint: str | None = None, *, always: bool = True) -> int:
        """The user taps "Allow" (``always``: "Always allow from this computer")."""
        return self.auth.allow(fingerprint, always=always) if self.auth is not None else 0

    def deny(self, fingerprint: str | None = None) -> int:
        return self.auth.deny(fingerprint) if self.auth is not None else 0

    # -- adb reverse: listeners on the phone that lead back to the host --------------------

    def reverse_add(self, conn: Connection, local: str, remote: str, *, rebind: bool) -> str:
        table = self._reverses.setdefault(conn, {})

        async def accept(sock: Any) -> None:
            stream = await conn.open_stream(remote)
            if stream is None:
                return  # the host refused: the app on the phone sees the connection closed
            try:
                await bridge(stream, sock)
            finally:
                await stream.finish()

        wanted = normalize(local)
        if wanted is not None and wanted in self.net.listeners() and wanted not in table:
            # Someone else's socket (another transport's reverse, an app's server): adbd
            # cannot take it over either.
            raise OSError("cannot bind listener: Address already in use")
        name = self.net.listen(local, accept, owner=conn, rebind=rebind)
        table[name] = remote
        return name

    def reverse_remove(self, conn: Connection, local: str) -> bool:
        table = self._reverses.get(conn, {})
        name = normalize(local) or ""
        if name not in table:
            return False
        del table[name]
        self.net.unlisten(name, owner=conn)
        return True

    def reverse_remove_all(self, conn: Connection) -> None:
        self._reverses.pop(conn, None)
        self.net.unlisten_all(conn)

    def reverse_targets(self, conn: Connection) -> list[tuple[str, str]]:
        return list(self._reverses.get(conn, {}).items())

    # -- what /proc, uname and bugreport read -------------------------------------------

    def uptime(self) -> float:
        """Seconds since boot (a phone that booted an hour before the simulator started)."""
        return 3600.0 + time.monotonic() - self._booted_at

    def uptime_text(self) -> str:
        up = int(self.uptime())
        return f"0 weeks, 0 days, {up // 3600} hours, {up % 3600 // 60} minutes"

    def cpu_count(self) -> int:
        return 8 if self.profile.abi == "arm64-v8a" else 4

    def uid_of(self, pid: int) -> int:
        """The uid a log record carries for ``pid``."""
        if pid == self.shell_pid:
            return 2000
        for proc in self.processes.values():
            if proc.pid == pid:
                return proc.uid
        return 1000 if pid >= 1000 else 0

    def last_pid(self) -> int:
        return self._next_pid

    def kernel_release(self) -> str:
        return kernel_release(self.profile.sdk)

    def proc_meminfo(self) -> str:
        total = 8 * 1024 * 1024 if self.profile.sdk >= 31 else 3 * 1024 * 1024  # kB
        used_by_apps = 180_000 * len(self.processes)
        free = total // 10
        available = max(total // 3 - used_by_apps, free)
        rows = [("MemTotal", total), ("MemFree", free), ("MemAvailable", available),
                ("Buffers", total // 200), ("Cached", total // 4), ("SwapCached", 0),
                ("Active", total // 3), ("Inactive", total // 5), ("SwapTotal", total // 2),
                ("SwapFree", total // 2 - 1024), ("Dirty", 120), ("AnonPages", total // 4),
                ("Mapped", total // 8), ("Shmem", 9000), ("Slab", total // 40),
                ("KernelStack", 40_000), ("PageTables", 90_000), ("VmallocTotal", 263061440)]
        return "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in rows)

    def logbuf_lines(self, n: int) -> list[str]:
        from device_bridge.sim.logbuf import format_entry

        return [format_entry(e) for e in self.logbuf.entries()][-n:]

    # -- reboot ---------------------------------------------------------------------------

    def reboot(self, reason: str = "adb") -> None:
        """``adb reboot``: every app stops, the log starts afresh, adb loses the device.

        The listener stays: adb's server reconnects on its own, as it does to a network phone
        that comes back. Installed packages, files and settings survive, as on a phone.
        """
        self._sys("I", "ShutdownThread", f"Rebooting, reason: {reason}")
        for pkg in list(self.processes):
            self.kill_process(pkg, reason="shutdown")
        self.focus = self.launcher
        self.recent = [self.launcher]
        self.typed_text = ""
        self.keyboard_shown = False
        self.boots += 1
        self._booted_at = time.monotonic()
        self.install_sessions.sessions.clear()
        self.logbuf.clear(BUFFERS)
        self._boot_log()
        for conn in list(self._connections):
            conn.close()

    async def _shell_service(self, stream: Stream, cmdline: str, *, v2: bool,
                             pty: bool = False, term: str = "dumb") -> None:
        if v2:
            stdout: Any = V2Sink(stream, 1)
            stderr: Any = V2Sink(stream, 2)
            stdin: Any = V2Source(stream)
        else:
            stdout = stderr = StreamSink(stream)
            stdin = stream
        if pty:
            # A terminal merges stderr into its output and turns \n into \r\n (which is why
            # binary output needs exec-out, on a real device too).
            stdout = stderr = CrLfSink(stdout)
        shell = self._new_shell()
        shell.env["TERM"] = term
        if not cmdline.strip():
            code = await self._interactive(stdin, stdout, stderr, pty=pty, shell=shell)
        else:
            code = await self.run_shell(cmdline, stdin=stdin, stdout=stdout, stderr=stderr,
                                        shell=shell)
        if v2:
            await stream.write(struct.pack("<BIB", 3, 1, code & 0xFF))

    async def _interactive(self, stdin: Any, stdout: Any, stderr: Any, *, pty: bool,
                           shell: Shell) -> int:
        """``adb shell`` without a command: a prompt and line editing on a PTY, or a script
        read line by line from stdin (``echo ls | adb shell``)."""

        def prompt() -> bytes:
            return f"{self.profile.device}:{shell.cwd} $ ".encode()

        line = bytearray()
        if pty:
            await stdout.write(prompt())
        while True:
            chunk = await stdin.read(4096)
            if not chunk:
                if line.strip():
                    await self.run_shell(line.decode(errors="replace"), stdin=BytesSource(),
                                         stdout=stdout, stderr=stderr, shell=shell)
                return shell.status
            for byte in chunk:
                if pty and byte in (0x7F, 0x08):
                    if line:
                        line.pop()
                        await stdout.write(b"\b \b")
                elif pty and byte == 0x03:  # ^C
                    line.clear()
                    await stdout.write(b"^C\n" + prompt())
                elif pty and byte == 0x04 and not line:  # ^D
                    return shell.status
                elif byte == 0x0A or (pty and byte == 0x0D):
                    if pty:
                        await stdout.write(b"\n")
                    if line.strip():
                        await self.run_shell(line.decode(errors="replace"), stdin=BytesSource(),
                                             stdout=stdout, stderr=stderr, shell=shell)
                        if shell.exited:
                            return shell.status
                    line.clear()
                    if pty:
                        await stdout.write(prompt())
                else:
                    line.append(byte)
                    if pty:
                        await stdout.write(bytes([byte]))

    def _new_shell(self) -> Shell:
        self._next_pid += 1
        return Shell(self, commands.lookup, env=self._shell_env(), pid=self._next_pid)

    async def run_shell(self, cmdline: str, *, stdin: Any, stdout: Any, stderr: Any,
                        shell: Shell | None = None) -> int:
        """Run one shell command line as adbd would (also logged with tag ``SimShell``)."""
        shell = shell or self._new_shell()
        self.log("I", "SimShell", cmdline, pid=shell.pid, tid=shell.pid)
        return await shell.run(cmdline, stdin=stdin, stdout=stdout, stderr=stderr)

    def _shell_env(self) -> dict[str, str]:
        return {"PATH": "/product/bin:/apex/com.android.runtime/bin:/system/bin:/system/xbin",
                "HOME": "/", "USER": "shell", "HOSTNAME": self.profile.device,
                "ANDROID_DATA": "/data", "ANDROID_ROOT": "/system", "TMPDIR": "/data/local/tmp",
                "TERM": "dumb"}

    # shell helpers: files

    def read_file(self, path: str) -> bytes | None:
        try:
            return self.files.read(path)
        except OSError:
            return None

    def write_file(self, path: str, data: bytes, *, append: bool = False) -> None:
        self.files.write(path, data, append=append)

    def glob(self, pattern: str) -> list[str]:
        return self.files.glob(pattern)

    def is_dir(self, path: str) -> bool:
        return self.files.is_dir(path)

    # -- clock and log (DeviceHooks) --------------------------------------------------------

    def now(self) -> float:
        return time.time() + self._clock_offset

    def advance(self, ms: float) -> None:
        """Simulated time passes: later log lines carry a later timestamp."""
        if ms > 0:
            self._clock_offset += ms / 1000.0

    def log(self, priority: str, tag: str, message: str, *, pid: int, tid: int,
            buffer: str | None = None) -> None:
        priority = priority[:1].upper()
        if priority not in "VDIWEF" or not priority:
            priority = "F" if priority == "A" else "I"  # logcat prints assert as F
        if buffer is None:
            if tag == "AndroidRuntime" and priority in ("E", "F"):
                buffer = "crash"
            elif pid == self.system_pid and tag in _SYSTEM_TAGS:
                buffer = "system"
            else:
                buffer = "main"
        self.logbuf.append(priority, tag, message, pid=pid, tid=tid, ts=self.now(), buffer=buffer)

    def _sys(self, priority: str, tag: str, message: str) -> None:
        self.log(priority, tag, message, pid=self.system_pid, tid=self.system_pid + 17)

    async def log_burst(self, count: int, *, tag: str = "SimBurst", priority: str = "I",
                        pid: int | None = None, message: str = "line {i}") -> None:
        """Append ``count`` lines, pausing whenever a live logcat reader falls behind.

        For tests and benchmarks: ``message`` is formatted with ``i`` (0-based).
        """
        pid = pid or self.shell_pid
        lag = max(self.logbuf.capacity // 512, 64)
        for i in range(count):
            self.log(priority, tag, message.format(i=i), pid=pid, tid=pid)
            if i % 64 == 63:
                await self.logbuf.wait_readers(max_lag=lag)

    def _boot_log(self) -> None:
        p = self.profile
        self._sys("I", "SystemServer", "Entered the Android system server!")
        self._sys("I", "ActivityManager", "System now ready")
        self._sys("I", "ActivityTaskManager", f"START u0 {{act=android.intent.action.MAIN "
                  f"cat=[android.intent.category.HOME] cmp={self.launcher}}} from uid 0")
        self.log("I", "BootReceiver", f"Copying /proc/cmdline to DropBox (sdk {p.sdk})",
                 pid=self.system_pid, tid=self.system_pid + 40)

    async def _noise(self) -> None:
        """About one plausible system line a second."""
        assert self.noise_interval
        rng = self._rng
        while True:
            await asyncio.sleep(self.noise_interval * rng.uniform(0.5, 1.5))
            kind = rng.randrange(8)
            sp = self.system_pid
            if kind == 0:
                lvl = self.battery_level
                self.log("I", "health", f"battery l={lvl} v=4{rng.randrange(100, 300)} "
                         f"t=28.{rng.randrange(10)} h=2 st=2 c=-{rng.randrange(80, 400)} "
                         "fc=4011000 cc=412 chg=u", pid=sp - 900, tid=sp - 900)
            elif kind == 1:
                self.log("D", "WifiNl80211Manager", "Scan result ready event",
                         pid=sp, tid=sp + rng.randrange(30, 90))
            elif kind == 2:
                self.log("I", "chatty", f"uid=1000(system) Binder:{sp}_{rng.randrange(1, 9)} "
                         f"expire {rng.randrange(2, 9)} lines", pid=sp, tid=sp + 3)
            elif kind == 3:
                self._sys("D", "ConnectivityService", "requestNetwork for uid/pid:10"
                          f"{rng.randrange(100, 199)}/{rng.randrange(3000, 9000)} "
                          "activeRequest: null callbackRequest: 0")
            elif kind == 4:
                self.log("D", "KernelCpuUidFreqTimeReader", "Read uid cpu freq times",
                         pid=sp, tid=sp + 12)
            elif kind == 5:
                self._sys("I", "JobScheduler", f"Job {rng.randrange(1, 400)} for "
                          "com.google.android.gms scheduled")
            elif kind == 6:
                self.log("W", "ThermalManagerService", "Thermal status: NONE",
                         pid=sp, tid=sp + 21)
            else:
                self.log("D", "SurfaceFlinger", "Display 0 HWC layers: 3", pid=sp - 800,
                         tid=sp - 800)

    # -- packages and processes -------------------------------------------------------

    def package_listing(self) -> list[tuple[str, str, bool]]:
        """(name, apk path, third-party?) for every package, sorted by name."""
        rows = [(n, f"/system/app/{n.rsplit('.', 1)[-1]}/{n.rsplit('.', 1)[-1]}.apk", False)
                for n in self.system_packages]
        rows += [(n, inst.path, True) for n, inst in self.packages.items()]
        return sorted(rows)

    def install(self, data: bytes, *, source: str, replace: bool = True,
                allow_downgrade: bool = False) -> str:
        """``pm install``: "Success" or Android's ``Failure [CODE: message]`` text."""
        try:
            pkg = read_apk(data)
        except ApkError as exc:
            return f"Failure [INSTALL_PARSE_FAILED_NOT_APK: Failed to parse {source}: {exc}]"
        if pkg.package in self.system_packages:
            return (f"Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: Package {pkg.package} "
                    "signatures do not match previously installed version; ignoring!]")
        old = self.packages.get(pkg.package)
        if old is not None:
            if old.pkg.signer != pkg.signer:
                return (f"Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: Existing package "
                        f"{pkg.package} signatures do not match newer version; ignoring!]")
            if not replace:
                return (f"Failure [INSTALL_FAILED_ALREADY_EXISTS: Attempt to re-install "
                        f"{pkg.package} without first uninstalling.]")
            if pkg.version_code < old.pkg.version_code and not allow_downgrade:
                return (f"Failure [INSTALL_FAILED_VERSION_DOWNGRADE: Downgrade detected: Update "
                        f"version code {pkg.version_code} is older than current "
                        f"{old.pkg.version_code}]")
            self._sys("I", "ActivityManager", f"Force stopping {pkg.package} appid={old.uid} "
                      "user=-1: installPackageLI")
            self.kill_process(pkg.package, reason="installPackageLI")
            uid = old.uid
        else:
            self._next_uid += 1
            uid = self._next_uid
        token = "".join(self._rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789", k=22))
        path = f"/data/app/~~{token}==/{pkg.package}-{token[:8]}==/base.apk"
        self.packages[pkg.package] = InstalledPackage(pkg, path, uid)
        return "Success"

    def uninstall(self, package: str) -> bool:
        inst = self.packages.pop(package, None)
        if inst is None:
            return False
        self.kill_process(package, reason="uninstall pkg")
        return True

    def clear_data(self, package: str) -> bool:
        inst = self.packages.get(package)
        if inst is None and package not in self.system_packages:
            return False
        appid = inst.uid if inst else 1000
        self._sys("I", "ActivityManager", f"Force stopping {package} appid={appid} user=0: "
                  "clear data")
        self.kill_process(package, reason="clear data")
        return True

    def _component(self, pkg: str, activity: str) -> str:
        full = pkg + activity if activity.startswith(".") else activity
        short = full[len(pkg):] if full.startswith(pkg + ".") else full
        return f"{pkg}/{short}"

    def _launch_tag(self) -> str:
        return "ActivityTaskManager" if self.profile.sdk >= 29 else "ActivityManager"

    def start_activity(self, pkg: str, activity: str) -> tuple[bool, int]:
        inst = self.packages.get(pkg)
        launcher_pkg = self.launcher.split("/", 1)[0]
        if (inst is None or inst.pkg.kind != "app") and pkg not in (launcher_pkg,
                                                                    "com.android.settings"):
            return False, 0
        comp = self._component(pkg, activity)
        self._sys("I", self._launch_tag(), f"START u0 {{flg=0x10000000 cmp={comp}}} from uid 2000")
        total = self._rng.randrange(180, 900)
        kind = "top-activity" if self.profile.sdk >= 31 else "activity"
        self._start(pkg, f"{kind} {{{comp}}}")
        self.advance(total)
        user = " for user 0" if self.profile.sdk >= 34 else ""
        self._sys("I", self._launch_tag(), f"Displayed {comp}{user}: +{total}ms")
        self._set_focus(comp)
        return True, total

    def _set_focus(self, comp: str) -> None:
        if comp != self.focus:
            self.typed_text = ""
            self.keyboard_shown = False
            # The event log records every resume, as Android's does (AOSP event.logtags).
            tag = "wm_set_resumed_activity" if self.profile.sdk >= 29 else "am_set_resumed_activity"
            self.log("I", tag, f"[0,{comp},resumeTopActivity]", pid=self.system_pid,
                     tid=self.system_pid + 17, buffer="events")
        self.focus = comp
        if comp in self.recent:
            self.recent.remove(comp)
        self.recent.insert(0, comp)
        del self.recent[20:]

    def force_stop(self, package: str) -> None:
        inst = self.packages.get(package)
        appid = inst.uid if inst else 1000
        self._sys("I", "ActivityManager", f"Force stopping {package} appid={appid} user=0: "
                  f"from pid {self.shell_pid}")
        self.kill_process(package, reason=f"stop {package} due to from pid {self.shell_pid}")

    def _start(self, package: str, why: str) -> int:
        proc = self.processes.get(package)
        if proc is not None:
            return proc.pid
        inst = self.packages.get(package)
        uid = inst.uid if inst else 10000 + self._rng.randrange(50, 99)
        self._next_pid += 1
        proc = _Process(self._next_pid, package, uid)
        self.processes[package] = proc
        self._sys("I", "ActivityManager",
                  f"Start proc {proc.pid}:{package}/u0a{uid - 10000} for {why}")
        return proc.pid

    def pid_of(self, name: str) -> int | None:
        """``pidof``: the pid of a running app (or of system_server), else None."""
        if name == "system_server":
            return self.system_pid
        proc = self.processes.get(name)
        return proc.pid if proc else None

    def process_table(self) -> list[tuple[str, int, str]]:
        """(user, pid, name) rows for ``ps``: a few system processes, then running apps."""
        launcher_pkg = self.launcher.split("/", 1)[0]
        rows = [("root", 1, "init"), ("logd", 300, "logd"), ("root", 600, "zygote64"),
                ("system", self.system_pid, "system_server"),
                ("u0_a40", self.system_pid + 400, launcher_pkg),
                ("shell", self.shell_pid, "adbd")]
        rows += [(f"u0_a{p.uid - 10000}", p.pid, name) for name, p in self.processes.items()]
        return rows

    def start_process(self, package: str) -> int:
        return self._start(package, f"added application {package}")

    def kill_process(self, package: str, *, reason: str) -> None:
        proc = self.processes.pop(package, None)
        if proc is None:
            return
        if package == DEMO_PACKAGE:
            self.app_ui.stopped()
        self._sys("I", "ActivityManager",
                  f"Killing {proc.pid}:{package}/u0a{proc.uid - 10000} (adj 0): {reason}")
        self.log("I", "Process", f"Sending signal. PID: {proc.pid} SIG: 9",
                 pid=self.system_pid, tid=self.system_pid + 17)
        self._sys("I", "ActivityManager", f"Process {package} (pid {proc.pid}) has died: fg  TOP")
        if self.focus.split("/", 1)[0] == package:
            self.recent = [c for c in self.recent if not c.startswith(package + "/")]
            self._set_focus(self.recent[0] if self.recent else self.launcher)

    # -- instrumentation --------------------------------------------------------------

    async def instrument(self, component: str, *, class_filter: str | None
                         ) -> AsyncIterator[tuple[int, str]]:
        """``am instrument -w -r`` output as (fd, text) pieces; fd 2 is stderr."""
        pkg_name, _, runner = component.partition("/")
        runner_full = pkg_name + runner if runner.startswith(".") else runner
        inst = self.packages.get(pkg_name)
        if inst is None or inst.pkg.kind != "test" or inst.pkg.runner != runner_full:
            yield 1, ("INSTRUMENTATION_STATUS: id=ActivityManagerService\n"
                      "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: "
                      f"ComponentInfo{{{pkg_name}/{runner_full}}}\n"
                      "INSTRUMENTATION_STATUS_CODE: -1\n")
            yield 2, (f"android.util.AndroidException: INSTRUMENTATION_FAILED: "
                      f"{pkg_name}/{runner_full}\n"
                      "\tat com.android.commands.am.Instrument.run(Instrument.java:519)\n"
                      "\tat com.android.commands.am.Am.runInstrument(Am.java:202)\n"
                      "\tat com.android.commands.am.Am.onRun(Am.java:80)\n"
                      "\tat com.android.internal.os.BaseCommand.run(BaseCommand.java:60)\n"
                      "\tat com.android.commands.am.Am.main(Am.java:50)\n"
                      "\tat com.android.internal.os.RuntimeInit.nativeFinishInit(Native Method)\n"
                      "\tat com.android.internal.os.RuntimeInit.main(RuntimeInit.java:399)\n")
            return
        target = inst.pkg.target_package
        app = self.packages.get(target) if target else None
        try:
            from device_bridge.sim.player import default_player
        except ImportError:
            for piece in self._broken_instrumentation(inst, runner_full):
                yield 1, piece
            return
        player = default_player()
        lines = player.play(inst.pkg, app.pkg if app else None, class_filter=class_filter,
                            device=self)
        for line in lines:
            yield 1, line if line.endswith("\n") else line + "\n"
            await asyncio.sleep(0)  # the player runs on the loop: let other streams breathe

    def _broken_instrumentation(self, inst: InstalledPackage, runner: str) -> list[str]:
        """A test package whose runner class cannot be loaded: the process crashes at start."""
        pkg = inst.pkg.package
        pid = self.start_process(inst.pkg.target_package or pkg)
        where = (f'DexPathList[[zip file "{inst.path}"],nativeLibraryDirectories='
                 "[/system/lib64, /system_ext/lib64]]")
        error = (f"java.lang.RuntimeException: Unable to instantiate instrumentation "
                 f"ComponentInfo{{{pkg}/{runner}}}: java.lang.ClassNotFoundException: "
                 f'Didn\'t find class "{runner}" on path: {where}')
        self.log("D", "AndroidRuntime", "Shutting down VM", pid=pid, tid=pid)
        self.log("E", "AndroidRuntime", f"FATAL EXCEPTION: main\nProcess: {pkg}, PID: {pid}\n"
                 f"{error}\n\tat android.app.ActivityThread.handleBindApplication"
                 "(ActivityThread.java:6774)", pid=pid, tid=pid)
        self.kill_process(inst.pkg.target_package or pkg, reason="crash")
        return [
            "INSTRUMENTATION_RESULT: shortMsg=java.lang.RuntimeException\n",
            f"INSTRUMENTATION_RESULT: longMsg={error}\n",
            "INSTRUMENTATION_CODE: 0\n",
        ]

    # -- window, input, screen --------------------------------------------------------

    def screen(self) -> Screen:
        """What is on the display now (the layout taps, screenshots and dumps share)."""
        p = self.profile
        apps = sorted(n for n, i in self.packages.items() if i.pkg.kind == "app")
        return Screen(p.width, p.height, self.focus, launcher=self.focus == self.launcher,
                      apps=(*apps, "com.android.chrome", "com.android.settings"),
                      typed=self.typed_text, keyboard=self.keyboard_shown,
                      app_view=self.app_ui.view(self.focus))

    def input_event(self, kind: str, args: dict[str, Any]) -> None:
        """An ``input`` event: taps hit the on-screen layout, keys move focus, text is typed."""
        self.input_log.append((kind, args))
        on_launcher = self.focus == self.launcher
        if kind == "tap":
            node = hit(self.screen(), float(args["x"]), float(args["y"]))
            if node is None:
                return
            if on_launcher and node.desc:
                activity = ".Settings" if node.desc == "com.android.settings" else ".MainActivity"
                self.start_activity(node.desc, activity)
            elif self.app_ui.tap(self, node):
                pass
            elif node.cls == "android.widget.EditText":
                self.keyboard_shown = True
        elif kind == "text" and not on_launcher:
            self.typed_text += str(args["text"])
        elif kind == "keyevent":
            code = args["code"]
            if code == 3:  # HOME
                self._set_focus(self.launcher)
            elif code == 4:  # BACK: first the keyboard, then the activity
                if self.keyboard_shown:
                    self.keyboard_shown = False
                elif not on_launcher and len(self.recent) > 1:
                    self.recent.pop(0)
                    self._set_focus(self.recent[0])
            elif code == 67 and not on_launcher:  # DEL
                self.typed_text = self.typed_text[:-1]

    def screenshot(self, *, png: bool) -> bytes:
        return self.screenshot_of(self.screen(), png=png)()

    def screenshot_of(self, screen: Screen, *, png: bool) -> Callable[[], bytes]:
        """A renderer for ``screen`` that touches no device state (safe in a worker thread)."""
        if png:
            return lambda: render_png(screen)
        sdk = self.profile.sdk
        return lambda: render_raw(screen, sdk=sdk)

    def ui_xml(self) -> str:
        return render_ui_xml(self.screen())

    def dumpsys(self, service: str, args: list[str]) -> str | None:
        return dumpsys(self, service, args)

