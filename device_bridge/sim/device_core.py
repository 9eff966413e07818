"""The simulated phone's core: the state its parts share, its clock and log (with light
background noise and the boot lines), and what ``/proc``, ``uname`` and ``bugreport`` read.

:class:`DeviceCore` is the base of :class:`~device_bridge.sim.device.SimDevice`, which sets
the state declared here in its ``__init__``; the packages and processes build on it
(:mod:`~device_bridge.sim.device_apps`).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from device_bridge.sim.apk import SimPackage
from device_bridge.sim.logbuf import LogBuffer
from device_bridge.sim.profiles import DeviceProfile
from device_bridge.sim.toybox import kernel_release

__all__ = ["AppProcess", "DeviceCore", "InstalledPackage"]

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
class AppProcess:
    pid: int
    package: str
    uid: int


class DeviceCore:
    """Clock, log and kernel facts of the simulated phone."""

    profile: DeviceProfile
    logbuf: LogBuffer
    noise_interval: float | None
    processes: dict[str, AppProcess]
    launcher: str
    system_pid: int
    shell_pid: int
    battery_level: int
    _rng: random.Random
    _clock_offset: float
    _next_pid: int
    _booted_at: float

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

