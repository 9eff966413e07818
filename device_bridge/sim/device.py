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
The device implements :class:`device_bridge.sim.apk.DeviceHooks` for that player. Its clock,
log and kernel facts are :mod:`~device_bridge.sim.device_core`, its packages, processes and
instrumentation :mod:`~device_bridge.sim.device_apps`; this module is the phone on the wire
(listener, services, authentication, ``adb reverse``, the shell, reboot) and on its screen.

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
from collections.abc import Callable
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
from device_bridge.sim.auth import AdbAuth, PendingKey
from device_bridge.sim.device_apps import DeviceApps
from device_bridge.sim.device_core import AppProcess, InstalledPackage
from device_bridge.sim.dumpsys import dumpsys
from device_bridge.sim.files import SimFiles
from device_bridge.sim.listener import StreamListener
from device_bridge.sim.logbuf import BUFFERS, LogBuffer
from device_bridge.sim.net import DeviceNet, normalize
from device_bridge.sim.pace import Pace, get_pace
from device_bridge.sim.profiles import DeviceProfile, get_profile
from device_bridge.sim.screen import Screen, hit, render_png, render_raw, render_ui_xml
from device_bridge.sim.services import adbd_service, bridge
from device_bridge.sim.shell import Shell
from device_bridge.sim.shell_io import BytesSource
from device_bridge.sim.sync import serve_sync
from device_bridge.sim.system import InstallSessions, Settings, proc_files
from device_bridge.sim.ui_demo import DemoUi

__all__ = ["FEATURES", "InstalledPackage", "SimDevice"]

logger = logging.getLogger("droidwire.sim.device")

FEATURES = ("shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir")
DEFAULT_MAXDATA = 256 * 1024

SYSTEM_PACKAGES = (
    "android", "com.android.bluetooth", "com.android.chrome", "com.android.phone",
    "com.android.providers.settings", "com.android.settings", "com.android.shell",
    "com.android.systemui", "com.google.android.gms",
)


# -- the device -------------------------------------------------------------------------------


class SimDevice(DeviceApps):
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
        pace: str | Pace = "instant",  # wall time of installs, app starts, tests (sim.pace)
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
        self.pace = pace if isinstance(pace, Pace) else get_pace(pace)
        self.maxdata = maxdata
        self.logbuf = LogBuffer(capacity=log_capacity)
        self.files = SimFiles(quota=storage_quota)
        self.packages: dict[str, InstalledPackage] = {}
        self.processes: dict[str, AppProcess] = {}
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
