"""Layer 2 of the shell check, every profile (``full`` included): the deny list.

Refused whatever the profile, judged by effect: ``su``, ``reboot``, ``setprop``, ``dd``,
``chmod``/``chown``, any shell interpreter, wrappers that run another command (``env``,
``toybox APPLET`` is judged as ``APPLET``), a leading ``NAME=value``, programs run by a path
outside the system's own, recursive ``rm`` of a system root, and arguments that take the
device or its adb link away (``svc power reboot``, ``stop adbd``, ``kill 1`` …). The controller
may be compromised, and these take a device away from its owner.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from device_bridge.policy.rules import Rule, refuse

__all__ = ["check_denied"]

_SHELLS = frozenset({"sh", "bash", "mksh", "ash", "dash", "zsh", "ksh", "csh", "tcsh", "fish"})
# Programs whose job is to run another program (or arbitrary code): refused in every profile,
# whatever they would run — their effect cannot be judged from their name. Judged by effect,
# assuming a rooted or userdebug build: the dynamic linker (`linker64 /system/bin/reboot`),
# the runtime (`app_process64`, `dalvikvm64` run any class), scheduling and logging shims
# (`chrt`, `nice`, `logwrapper`, `timeout`, `nohup`), debuggers and profilers that launch
# (`gdbserver`, `simpleperf record -- …`), root managers (`magisk su`).
_WRAPPERS = frozenset(
    {
        "env", "exec", "nohup", "nice", "ionice", "timeout", "xargs", "time", "command",
        "run-as", "chroot", "strace", "ltrace", "setsid", "taskset", "watch", "eval", "source",
        ".", "builtin", "cmd", "script", "find", "unshare", "nsenter", "stdbuf", "flock",
        "parallel", "chrt", "runcon", "logwrapper", "linker", "linker64", "linker_asan",
        "linker_asan64", "app_process", "app_process32", "app_process64", "dalvikvm",
        "dalvikvm32", "dalvikvm64", "simpleperf", "perf", "gdbserver", "gdbserver64",
        "lldb-server", "valgrind", "magisk", "ksud", "apd", "start-stop-daemon", "daemonize",
        "unbuffer", "capsh", "setpriv", "prlimit", "sg", "newgrp", "busybox-static",
    }
)  # fmt: skip
# Multi-call binaries: `toybox APPLET …` is judged as `APPLET …` (an applet that runs another
# program is then refused like any wrapper; a bare multi-call name is refused).
_MULTICALL = frozenset({"toybox", "toolbox", "busybox"})
# `cmd SERVICE …` reaches every system service (`cmd power reboot`), `find -exec` runs
# anything: both count as wrappers.
_DENIED: dict[str, Rule] = {
    "su": Rule.SU,
    "sudo": Rule.SU,
    "doas": Rule.SU,
    "reboot": Rule.REBOOT,
    "shutdown": Rule.REBOOT,
    "halt": Rule.REBOOT,
    "poweroff": Rule.REBOOT,
    "recovery": Rule.REBOOT,
    "uncrypt": Rule.REBOOT,
    "vdc": Rule.REBOOT,  # vold: wipe, encrypt, unmount storage
    "dpm": Rule.LOCK_SCREEN,  # device policy: device owner, force-lock, wipe
    "locksettings": Rule.LOCK_SCREEN,
    "setprop": Rule.SETPROP,
    "resetprop": Rule.SETPROP,
    "mount": Rule.CHMOD,  # remounting /system writable is how a root shell plants binaries
    "umount": Rule.CHMOD,
    "remount": Rule.CHMOD,
    "iptables": Rule.ADB_OFF,  # a firewall rule can cut the adb link
    "ip6tables": Rule.ADB_OFF,
    "ndc": Rule.ADB_OFF,
    "dd": Rule.DD,
    "chmod": Rule.CHMOD,
    "chown": Rule.CHMOD,
    "chgrp": Rule.CHMOD,
    "chcon": Rule.CHMOD,
}
# Processes whose death takes the device (or its adb link) away.
_CRITICAL = frozenset(
    {"init", "adbd", "zygote", "zygote64", "system_server", "servicemanager",
     "hwservicemanager", "surfaceflinger", "vold", "lmkd", "netd", "ueventd", "logd"}
)  # fmt: skip
# Settings that turn adb off, and the lock screen's.
_ADB_SETTINGS = frozenset(
    {"adb_enabled", "adb_wifi_enabled", "development_settings_enabled", "usb_mass_storage_enabled"}
)  # fmt: skip
_LOCK_SETTING = re.compile(r"(?i)^(lockscreen|lock_screen|screen_lock|lock_pattern|lock_to_app)")
# Intents that reboot, shut down or wipe the device.
_POWER_INTENT = re.compile(r"(?i)(REBOOT|SHUTDOWN|MASTER_CLEAR|FACTORY_RESET|ACTION_REQUEST_SHUTDOWN)")
# Where a program may be run from by path: the system's own binaries. Anything else (a file
# pushed under /data/local/tmp, say) cannot be judged by its name.
_SYSTEM_BIN = re.compile(
    r"^/(system/bin|system/xbin|system_ext/bin|vendor/bin|product/bin|odm/bin"
    r"|apex/[A-Za-z0-9_.@\-]+/bin)/[A-Za-z0-9_.\-]+$"
)
# Paths a recursive rm must never name, even under `full`.
_SYSTEM_ROOTS = frozenset(
    {"/", "/data", "/system", "/vendor", "/product", "/sdcard", "/storage", "/mnt", "/apex",
     "/odm", "/cache", "/metadata", "/proc", "/sys", "/dev", "/data/data", "/data/app",
     "/data/local", "/data/local/tmp", "/data/user", "/data/media", "/storage/emulated",
     "/storage/emulated/0", "/sdcard/Android"}
)  # fmt: skip


def _command_name(argv0: str) -> str:
    return posixpath.basename(argv0)


# A leading `NAME=value` word is a variable assignment to the device's shell, so the real
# command is the next word (`X=1 reboot`, `LD_PRELOAD=/x.so id`): refused in every profile
# rather than parsed, since the assignment itself can change what runs.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def check_denied(argv: Sequence[str]) -> None:
    """Layer 2, every profile: refuse what takes the device away from its owner or runs
    another program, judged by effect (see the tables above)."""
    if _ASSIGNMENT.match(argv[0]):
        refuse(Rule.ENV_ASSIGNMENT, "a leading NAME=value (environment assignment) is not allowed")
    if "/" in argv[0] and not _SYSTEM_BIN.match(posixpath.normpath(argv[0])):
        refuse(Rule.COMMAND_WRAPPER,
                f"{argv[0]}: only the system's own programs may be run by path")
    name = _command_name(argv[0])
    if name in _MULTICALL:
        if len(argv) < 2 or argv[1].startswith("-"):
            refuse(Rule.COMMAND_WRAPPER, f"{name}: name the applet to run")
        check_denied(argv[1:])  # `toybox reboot` is `reboot`
        return
    if name in _SHELLS:
        refuse(Rule.SHELL_INTERPRETER, f"{name}: running a shell interpreter is not allowed")
    if name in _WRAPPERS:
        refuse(Rule.COMMAND_WRAPPER, f"{name}: commands that run other commands are not allowed")
    rule = _DENIED.get(name)
    if rule is not None:
        refuse(rule, f"{name} is not allowed on shared devices")
    args = list(argv[1:])
    _check_effects(name, args)
    if name == "rm":
        flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
        recursive = "r" in flags or "R" in flags or "--recursive" in args
        if recursive:
            for arg in args:
                if (
                    not arg.startswith("-")
                    and posixpath.normpath("/" + arg.lstrip("/")) in _SYSTEM_ROOTS
                ):
                    refuse(Rule.RM_ROOT, f"rm -r of {arg!r} is not allowed")


def _check_effects(name: str, args: list[str]) -> None:
    """Commands that are fine in general but take the device away with some arguments."""
    lower = [a.lower() for a in args]
    if name in ("start", "stop", "restart"):
        # init's service control: `stop adbd` turns adb off, `stop` alone the framework.
        rule = Rule.ADB_OFF if "adbd" in args else Rule.REBOOT
        refuse(rule, f"{name}: controlling init's services is not allowed")
    if name == "svc" and args:
        # `svc power reboot|shutdown`; `svc usb …` (the adb link over USB), `svc wifi|data
        # disable` (the link over the network).
        if args[0] == "power" and any(a in ("reboot", "shutdown") for a in args[1:]):
            refuse(Rule.REBOOT, "svc power reboot/shutdown is not allowed")
        if args[0] == "usb" or (args[0] in ("wifi", "data", "ethernet") and "disable" in args):
            refuse(Rule.ADB_OFF, f"svc {args[0]} may cut the adb link")
        if args[0] == "system-server":
            refuse(Rule.REBOOT, "svc system-server is not allowed")
    if name == "service" and args[:1] == ["call"]:
        rule = Rule.REBOOT if args[1:2] == ["power"] else Rule.COMMAND_WRAPPER
        refuse(rule, "service call (raw binder transactions) is not allowed")
    if name == "am" and any(_POWER_INTENT.search(a) for a in args):
        refuse(Rule.REBOOT, "intents that reboot, shut down or wipe the device are not allowed")
    verb = next((i for i, a in enumerate(args) if a in ("put", "delete", "reset")), None)
    if name == "settings" and verb is not None:
        keys = [a for a in args[verb + 1:] if not a.startswith("-")][1:2]
        if args[verb] == "reset" or any(k in _ADB_SETTINGS for k in keys):
            refuse(Rule.ADB_OFF, "changing the debugging settings may turn adb off")
        if any(_LOCK_SETTING.match(k) for k in keys):
            refuse(Rule.LOCK_SCREEN, "the lock screen is the owner's")
    if name == "kill":
        # Targets, after the signal (`-9`, `-KILL`, `-s KILL`, `-n 9`) and `--`: init (1)
        # or a negative pid (a process group; -1 is every process) are refused.
        rest = list(args)
        if rest[:1] in (["-s"], ["-n"]):
            rest = rest[2:]
        elif rest and rest[0].startswith("-") and rest[0] != "--" and len(rest) > 1:
            rest = rest[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        if any(t == "1" or (t.startswith("-") and t != "-l") for t in rest):
            refuse(Rule.SIGNAL_INIT, "signalling init or every process is not allowed")
    if name in ("pkill", "killall") and any(a in _CRITICAL for a in args):
        refuse(Rule.SIGNAL_INIT, "killing the system's own daemons is not allowed")
    if name in ("ip", "ifconfig") and "down" in lower:
        refuse(Rule.ADB_OFF, "taking an interface down may cut the adb link")

