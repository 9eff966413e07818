"""A user-build phone's system services behind the shell: ``settings``, ``pm`` install sessions,
``bugreport``/``bugreportz``, and the ``/proc`` files scripts read (stat, meminfo, loadavg…).

* :class:`Settings`: the system, secure and global tables of ``settings get/put/list/delete``
  (Android's defaults for the keys scripts touch). Other parts of the device read them:
  ``dumpsys power`` reports ``screen_off_timeout``, ``stay_on_while_plugged_in`` and the
  brightness, ``dumpsys window`` the animation scales.
* :class:`InstallSessions`: ``pm install-create/-write/-commit/-abandon`` — what
  ``adb install-multiple`` and streamed installs use. Sessions are bounded in number and bytes.
* :func:`bugreport_zip`: a plausible ``bugreportz`` archive (``main_entry.txt``,
  ``version.txt``, the dumpstate text) written to ``/bugreports``.
"""

from __future__ import annotations

import io
import itertools
import random
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any

from device_bridge.sim.shell_io import Proc

__all__ = ["MAX_SESSIONS", "InstallSessions", "Settings", "bugreport_zip", "proc_files",
           "register"]

NAMESPACES = ("system", "secure", "global")
MAX_SETTINGS = 2048  # keys per namespace
MAX_VALUE = 4096
MAX_SESSIONS = 16
MAX_SESSION_FILES = 64


def _defaults(serial: str) -> dict[str, dict[str, str]]:
    android_id = f"{abs(hash(serial)) & 0xFFFFFFFFFFFFFFFF:016x}"
    return {
        "system": {"screen_off_timeout": "60000", "screen_brightness": "102",
                   "screen_brightness_mode": "1", "accelerometer_rotation": "1",
                   "font_scale": "1.0", "time_12_24": "24"},
        "secure": {"android_id": android_id, "default_input_method":
                   "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME",
                   "location_mode": "3", "install_non_market_apps": "1"},
        "global": {"adb_enabled": "1", "airplane_mode_on": "0", "animator_duration_scale": "1.0",
                   "transition_animation_scale": "1.0", "window_animation_scale": "1.0",
                   "development_settings_enabled": "1", "stay_on_while_plugged_in": "0",
                   "device_provisioned": "1", "wifi_on": "1"},
    }


class Settings:
    def __init__(self, serial: str) -> None:
        self.tables = _defaults(serial)

    def get(self, namespace: str, key: str) -> str | None:
        return self.tables[namespace].get(key)

    def put(self, namespace: str, key: str, value: str) -> None:
        table = self.tables[namespace]
        if key not in table and len(table) >= MAX_SETTINGS:
            raise ValueError("too many settings")
        table[key] = value

    def delete(self, namespace: str, key: str) -> bool:
        return self.tables[namespace].pop(key, None) is not None

    def number(self, namespace: str, key: str, default: float) -> float:
        try:
            return float(self.tables[namespace].get(key, default))
        except ValueError:
            return default


_SETTINGS_USAGE = ("usage:  settings [--user <USER_ID> | current] get namespace key\n"
                   "        settings [--user <USER_ID> | current] put namespace key value\n"
                   "        settings [--user <USER_ID> | current] delete namespace key\n"
                   "        settings [--user <USER_ID> | current] list namespace\n")


async def settings_cmd(p: Proc, args: list[str]) -> int:
    if args[:1] == ["--user"]:
        args = args[2:]
    if len(args) < 2:
        await p.err(_SETTINGS_USAGE)
        return 1
    verb, namespace, rest = args[0], args[1], args[2:]
    store: Settings = p.device.settings
    if namespace not in NAMESPACES:
        await p.err(f"Invalid namespace '{namespace}'\n" + _SETTINGS_USAGE)
        return 1
    if verb == "get" and len(rest) == 1:
        value = store.get(namespace, rest[0])
        await p.out(("null" if value is None else value) + "\n")
        return 0
    if verb == "put" and len(rest) >= 2:
        value = rest[1]
        if len(rest[0]) > 256 or len(value) > MAX_VALUE:
            await p.err("settings: key or value too long\n")
            return 1
        try:
            store.put(namespace, rest[0], value)
        except ValueError as exc:
            await p.err(f"settings: {exc}\n")
            return 1
        return 0
    if verb == "delete" and len(rest) == 1:
        await p.out(f"Deleted {int(store.delete(namespace, rest[0]))} rows\n")
        return 0
    if verb == "list" and not rest:
        await p.out("".join(f"{k}={v}\n" for k, v in sorted(store.tables[namespace].items())))
        return 0
    await p.err(_SETTINGS_USAGE)
    return 1


# -- pm install sessions ----------------------------------------------------------------------


@dataclass
class _Session:
    sid: int
    expected: int | None
    files: dict[str, bytes] = field(default_factory=dict)
    replace: bool = True
    downgrade: bool = False


class InstallSessions:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.sessions: dict[int, _Session] = {}

    def create(self, expected: int | None, opts: set[str]) -> int:
        if len(self.sessions) >= MAX_SESSIONS:
            raise ValueError("Too many active sessions")
        sid = self._rng.randrange(100_000_000, 2_000_000_000)
        self.sessions[sid] = _Session(sid, expected, replace="-R" not in opts,
                                      downgrade="-d" in opts)
        return sid

    def get(self, sid_text: str) -> _Session:
        try:
            return self.sessions[int(sid_text)]
        except (ValueError, KeyError):
            raise KeyError(sid_text) from None

    def size(self) -> int:
        return sum(len(d) for s in self.sessions.values() for d in s.files.values())


async def pm_session(p: Proc, sub: str, rest: list[str]) -> int:
    """``pm install-create|install-write|install-commit|install-abandon``."""
    device = p.device
    sessions: InstallSessions = device.install_sessions
    if sub == "install-create":
        size: int | None = None
        opts = set()
        j = 0
        while j < len(rest):
            if rest[j] == "-S" and j + 1 < len(rest):
                try:
                    size = int(rest[j + 1])
                except ValueError:
                    size = -1
                j += 2
                continue
            if rest[j] in ("-i", "--user", "--install-reason", "-p", "--referrer"):
                j += 2
                continue
            opts.add(rest[j])
            j += 1
        if size is not None and (size < 0 or size > device.files.quota):
            await p.out("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n")
            return 1
        try:
            sid = sessions.create(size, opts)
        except ValueError as exc:
            await p.err(f"Error: {exc}\n")
            return 1
        await p.out(f"Success: created install session [{sid}]\n")
        return 0
    if sub == "install-write":
        size = None
        args: list[str] = []
        j = 0
        while j < len(rest):
            if rest[j] == "-S" and j + 1 < len(rest):
                try:
                    size = int(rest[j + 1])
                except ValueError:
                    size = -1
                j += 2
                continue
            args.append(rest[j])
            j += 1
        if len(args) < 2:
            await p.err("Error: usage: install-write [-S BYTES] SESSION_ID SPLIT_NAME [PATH|-]\n")
            return 1
        try:
            session = sessions.get(args[0])
        except KeyError:
            await p.err(f"Error: Invalid session id: {args[0]}\n")
            return 1
        name = args[1]
        source = args[2] if len(args) > 2 else "-"
        if len(session.files) >= MAX_SESSION_FILES or len(name) > 255 or "/" in name:
            await p.err(f"Error: bad split name {name[:40]}\n")
            return 1
        if source == "-":
            if size is None or size < 0:
                await p.err("Error: -S is required when reading from stdin\n")
                return 1
            if sessions.size() + size > device.files.quota:
                await p.out("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n")
                return 1
            data = bytearray()
            while len(data) < size:
                chunk = await p.stdin.read(min(65536, size - len(data)))
                if not chunk:
                    break
                data += chunk
            if len(data) < size:
                await p.err(f"Error: Unable to write {name}: short read "
                            f"({len(data)} of {size} bytes)\n")
                session.files.pop(name, None)
                return 1
        else:
            try:
                data = bytearray(device.files.read(p.path(source)))
            except OSError as exc:
                await p.err(f"Error: Unable to open file: {source}: {exc}\n")
                return 1
            if sessions.size() + len(data) > device.files.quota:
                await p.out("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n")
                return 1
        session.files[name] = bytes(data)
        await p.out(f"Success: streamed {len(data)} bytes\n")
        return 0
    if sub in ("install-commit", "install-abandon"):
        sid_text = rest[0] if rest else ""
        try:
            session = sessions.get(sid_text)
        except KeyError:
            await p.err(f"Error: Invalid session id: {sid_text}\n" if sub == "install-abandon"
                        else f"java.lang.SecurityException: Session {sid_text} does not exist\n")
            return 1
        del sessions.sessions[session.sid]
        if sub == "install-abandon":
            await p.out("Success\n")
            return 0
        await device.pace.installing(sum(len(b) for b in session.files.values()))
        result = commit(device, session)
        await p.out(result + "\n")
        return 0 if result == "Success" else 1
    return -1  # not a session command


def commit(device: Any, session: _Session) -> str:
    """Install what a session holds: one base APK, any number of splits of that package."""
    from device_bridge.sim.apk import ApkError, read_apk

    if not session.files:
        return "Failure [INSTALL_FAILED_INVALID_APK: No APK files given]"
    total = sum(len(d) for d in session.files.values())
    if session.expected is not None and total != session.expected:
        return (f"Failure [INSTALL_FAILED_INVALID_APK: Session size mismatch: expected "
                f"{session.expected} bytes, got {total}]")
    bases: list[tuple[str, bytes, str]] = []
    for name, data in session.files.items():
        try:
            pkg = read_apk(data)
        except ApkError:
            continue  # a split (config/feature APK): nothing more the simulated device checks
        bases.append((name, data, pkg.package))
    if not bases:
        return ("Failure [INSTALL_FAILED_INVALID_APK: Missing existing base package or new "
                "base package]")
    if len({b[2] for b in bases}) > 1:
        names = ", ".join(sorted({b[2] for b in bases}))
        return (f"Failure [INSTALL_FAILED_INVALID_APK: Split packages have inconsistent "
                f"package names: {names}]")
    if len(bases) > 1:
        return "Failure [INSTALL_FAILED_INVALID_APK: Split null was defined multiple times]"
    name, data, _ = bases[0]
    return str(device.install(data, source=f"session {session.sid}/{name}",
                              replace=session.replace, allow_downgrade=session.downgrade))


# -- bugreport --------------------------------------------------------------------------------


def dumpstate_text(device: Any) -> str:
    p = device.profile
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(device.now()))
    props = "".join(f"[{k}]: [{v}]\n" for k, v in sorted(device.props.items()))
    log = "".join(device.logbuf_lines(500))
    return (
        "========================================================\n"
        f"== dumpstate: {now}\n"
        "========================================================\n\n"
        f"Build: {p.build_id}\nBuild fingerprint: '{device.props['ro.build.fingerprint']}'\n"
        f"Bootloader: unknown\nRadio: unknown\nNetwork: unknown\n"
        f"Kernel: Linux version {device.kernel_release()}\n\n"
        "------ SYSTEM PROPERTIES (getprop) ------\n" + props + "\n"
        "------ SYSTEM LOG (logcat -v threadtime -d *:v) ------\n" + log + "\n"
        "------ UPTIME (uptime) ------\n"
        f"up time: {device.uptime_text()}\n"
    )


def bugreport_zip(device: Any) -> tuple[str, bytes]:
    """(name without directory, zip bytes) of a ``bugreportz`` report."""
    p = device.profile
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(device.now()))
    base = f"bugreport-{p.device}-{p.build_id}-{stamp}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{base}.txt", dumpstate_text(device))
        z.writestr("main_entry.txt", f"{base}.txt")
        z.writestr("version.txt", "2.0")
        z.writestr("dumpstate_log.txt", f"dumpstate started at {stamp}\n")
        z.writestr("FS/proc/meminfo", device.proc_meminfo())
    return f"{base}.zip", buf.getvalue()


async def bugreportz(p: Proc) -> int:
    args = p.argv[1:]
    if "-v" in args:
        await p.err("bugreportz 1.2\n")
        return 0
    if "-h" in args or any(a not in ("-p",) for a in args):
        await p.err("usage: bugreportz [-hpsv]\n")
        return 1
    name, data = bugreport_zip(p.device)
    path = f"/bugreports/{name}"
    progress = "-p" in args
    await p.out(f"BEGIN:{path}\n")
    if progress:
        for pct in (25, 50, 75, 100):
            await p.out(f"PROGRESS:{pct}/100\n")
    try:
        p.device.files.write_system(path, data)
    except OSError as exc:
        await p.out(f"FAIL:{exc}\n")
        return 1
    await p.out(f"OK:{path}\n")
    return 0


async def bugreport(p: Proc) -> int:
    if p.argv[1:]:
        await p.err("bugreport: a file argument needs 'adb bugreport FILE' on the host\n")
        return 1
    await p.out(dumpstate_text(p.device))
    return 0


# -- /proc ------------------------------------------------------------------------------------


def proc_files(device: Any) -> dict[str, Any]:
    """Generators for the /proc files a shell user may read."""
    ticks = itertools.count(1)

    def stat() -> bytes:
        up = device.uptime() * 100  # USER_HZ
        n = next(ticks)
        cpus = device.cpu_count()
        rows = []
        total = [0] * 10
        for c in range(cpus):
            user = int(up * 0.08) + 13 * n + c * 7
            nice, system = int(up * 0.004), int(up * 0.05) + 5 * n
            idle = int(up * 0.85) + 80 * n
            iowait, irq, softirq = int(up * 0.002), int(up * 0.001), int(up * 0.003)
            row = [user, nice, system, idle, iowait, irq, softirq, 0, 0, 0]
            total = [a + b for a, b in zip(total, row, strict=True)]
            rows.append(f"cpu{c} " + " ".join(map(str, row)))
        boot = int(time.time() - device.uptime())
        return ("cpu  " + " ".join(map(str, total)) + "\n" + "\n".join(rows) + "\n"
                f"intr {int(up * 40)}\nctxt {int(up * 90)}\nbtime {boot}\n"
                f"processes {4000 + len(device.processes)}\nprocs_running 2\nprocs_blocked 0\n"
                "softirq 0 0 0 0 0 0 0 0 0 0 0\n").encode()

    def loadavg() -> bytes:
        procs = 900 + len(device.processes)
        return f"0.52 0.61 0.70 2/{procs} {device.last_pid()}\n".encode()

    def uptime() -> bytes:
        up = device.uptime()
        return f"{up:.2f} {up * device.cpu_count() * 0.85:.2f}\n".encode()

    def version() -> bytes:
        return (f"Linux version {device.kernel_release()} (build-user@build-host) "
                "(Android clang version 17.0.2) #1 SMP PREEMPT Thu Jan 11 00:00:00 UTC 2024\n"
                ).encode()

    return {"/proc/stat": stat, "/proc/meminfo": lambda: device.proc_meminfo().encode(),
            "/proc/loadavg": loadavg, "/proc/uptime": uptime, "/proc/version": version}


async def reboot(p: Proc) -> int:
    """``reboot [TARGET]``: the shell user may (SELinux lets shell set sys.powerctl)."""
    args = [a for a in p.argv[1:] if not a.startswith("-")]
    p.device.reboot(args[0] if args else "shell")
    return 0


def register(command: Any) -> None:
    async def settings(p: Proc) -> int:
        return await settings_cmd(p, p.argv[1:])

    command("reboot")(reboot)
    command("settings")(settings)
    command("bugreportz")(bugreportz)
    command("bugreport")(bugreport)
