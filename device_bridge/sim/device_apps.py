"""Packages and processes of the simulated phone: installing simulated APKs, the package
listing, activities and window focus, app processes started and killed (with the log lines
Android writes), and ``am instrument`` played by the toolchain's instrumentation player.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from device_bridge.sim.apk import ApkError, read_apk
from device_bridge.sim.device_core import AppProcess, DeviceCore, InstalledPackage
from device_bridge.sim.pace import Pace
from device_bridge.sim.ui_demo import DEMO_PACKAGE, DemoUi

__all__ = ["DeviceApps"]


class DeviceApps(DeviceCore):
    """What is installed and running on the simulated phone; implements
    :class:`device_bridge.sim.apk.DeviceHooks` for the instrumentation player."""

    packages: dict[str, InstalledPackage]
    system_packages: tuple[str, ...]
    focus: str
    recent: list[str]
    typed_text: str
    keyboard_shown: bool
    app_ui: DemoUi
    pace: Pace  # how long a step takes in wall time (device_bridge.sim.pace)
    _next_uid: int

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
        proc = AppProcess(self._next_pid, package, uid)
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
        await self.pace.starting_process()
        player = default_player()
        lines = player.play(inst.pkg, app.pkg if app else None, class_filter=class_filter,
                            device=self)
        offset = self._clock_offset
        for line in lines:
            yield 1, line if line.endswith("\n") else line + "\n"
            owed = self._clock_offset - offset
            if self.pace.real_time and owed > 0:
                # The test's time passes for real: what it moved the clock by is slept
                # instead, so later lines come when a phone would print them.
                self._clock_offset = offset
                await self.pace.wait(owed)
            else:
                offset = self._clock_offset
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

