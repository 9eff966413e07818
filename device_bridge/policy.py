"""The host owner's command policy: what the controller may do with each device on this host.

docs/design.md §6, "defence in depth on the host": whatever the controller asks, the bridge owner's
local config decides which devices are exposed, under which **profile**, and can pause sharing
at once. A profile governs every RPC kind, not only shell:

================  ======================  ==================  ===========  ============  ===========
profile           shell                   logcat              screenshot,  install,      push / pull
                                                              UI           instrument
================  ======================  ==================  ===========  ============  ===========
standard          the allow-list below    all buffers         yes          APKs sent     droidwire
                                                                           through us    folder only
instrument-only   none                    the app under       no           yes           no
                                          test's processes
no-shell          none                    all buffers         yes          yes           as standard
full              anything without        all buffers         yes          yes           any path
                  metacharacters
================  ======================  ==================  ===========  ============  ===========

The droidwire folder is ``/data/local/tmp/droidwire/`` (:data:`DROIDWIRE_DIR`). Before any of
that, the owner's switches: while sharing is paused every check fails ``forbidden`` (rule
``paused``); a device the owner does not expose answers ``not_found`` (rule ``not_exposed``),
as if it were not attached.

Every check is one method of :class:`Policy` (``check_shell``, ``check_logcat``, ``check_push``…)
and refuses by raising ``RpcError(FORBIDDEN, message, {"rule": NAME, ...})``. The rule names
are part of the REST error (``rule``), so they are constants of this module (``Rule``).

Shell commands are checked in three layers, the first two identical for every profile:

1. *Lexical screen* of the raw text (or of every argv element): no shell metacharacter
   (``; & | ` $ < > ( ) \\ * ? [ ] { } ~ ! #``), no control character (newline, NUL, tab…), no
   non-ASCII character that is whitespace, invisible, punctuation or a symbol, nor one whose NFKC
   form contains a metacharacter or a quote (fullwidth ``；``, the Greek question mark …); command
   names are plain ASCII. Then ``shlex`` splits it; an argument that still contains a quote after
   splitting was smuggling one and is refused.
2. *Deny list*: ``su``, ``reboot``, ``setprop``, ``dd``, ``chmod``/``chown``, any shell
   interpreter (``sh -c …``), wrappers that run another command (``env``, ``toybox``, ``xargs``,
   ``run-as``…), recursive ``rm`` of a system root. Refused in every profile, ``full`` included:
   the controller may be compromised, and these take a device away from its owner.
3. *Profile*: ``standard`` matches argv patterns with bounded arguments (``_STANDARD``), ``full``
   takes what passed 1 and 2, the others have no shell.

What reaches the device is always the normalised argv, re-quoted (``shlex.join``), never the
text the controller sent.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn

from protocol.envelope import LABEL_PATTERN, MAX_LABELS, Profile
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "DROIDWIRE_DIR",
    "METACHARACTERS",
    "CommandContext",
    "LogcatScope",
    "Policy",
    "PolicyConfig",
    "Profile",
    "Rule",
    "TunnelOpen",
    "parse_command",
]

# The one device folder a borrower may touch (push/pull, ls/rm, uiautomator dumps).
DROIDWIRE_DIR = "/data/local/tmp/droidwire"

# Characters a POSIX/mksh shell gives a meaning to outside quotes. Newline and the other control
# characters are refused by their own rule.
METACHARACTERS = frozenset(";&|`$<>()\\*?[]{}~!#")
_QUOTES = frozenset("'\"")

MAX_COMMAND_CHARS = 4096
MAX_ARGS = 64
MAX_LOGCAT_LINES = 5000
MAX_SWIPE_MS = 10_000
MAX_INPUT_TEXT = 500
MAX_KEYEVENTS = 16


class Rule(StrEnum):
    """Names of the policy rules: the ``rule`` of a ``forbidden`` error (contract)."""

    # Host owner's switches.
    PAUSED = "paused"
    NOT_EXPOSED = "not_exposed"
    # Lexical screen (every profile).
    EMPTY_COMMAND = "empty_command"
    TOO_LONG = "too_long"
    METACHARACTER = "metacharacter"
    CONTROL_CHARACTER = "control_character"
    UNICODE_LOOKALIKE = "unicode_lookalike"
    NON_ASCII_COMMAND = "non_ascii_command"
    QUOTE = "quote"
    UNPARSEABLE = "unparseable"
    # Deny list (every profile).
    SU = "su"
    REBOOT = "reboot"
    SETPROP = "setprop"
    DD = "dd"
    CHMOD = "chmod"
    SHELL_INTERPRETER = "shell_interpreter"
    COMMAND_WRAPPER = "command_wrapper"
    RM_ROOT = "rm_root"
    ENV_ASSIGNMENT = "env_assignment"
    LOCK_SCREEN = "lock_screen"
    ADB_OFF = "adb_off"
    SIGNAL_INIT = "signal_init"
    # Profiles.
    SHELL_NOT_ALLOWED = "shell_not_allowed"
    NOT_ALLOWLISTED = "not_allowlisted"
    ARGUMENT = "argument"
    LOGCAT_FOLLOW = "logcat_follow"
    LOGCAT_COUNT = "logcat_count"
    SCREEN_UNKNOWN = "screen_unknown"
    OUTSIDE_SCREEN = "outside_screen"
    SWIPE_DURATION = "swipe_duration"
    TEXT_TOO_LONG = "text_too_long"
    PACKAGE_SCOPE = "package_scope"
    PACKAGE_PREEXISTING = "package_preexisting"
    PATH_OUTSIDE_WORKSPACE = "path_outside_workspace"
    PATH_INVALID = "path_invalid"
    LOGCAT_SCOPE = "logcat_scope"
    SCREENSHOT_NOT_ALLOWED = "screenshot_not_allowed"
    UI_NOT_ALLOWED = "ui_not_allowed"
    PUSH_NOT_ALLOWED = "push_not_allowed"
    PULL_NOT_ALLOWED = "pull_not_allowed"
    INSTALL_NOT_ALLOWED = "install_not_allowed"
    INSTRUMENT_NOT_ALLOWED = "instrument_not_allowed"
    # adb services opened through a tunnel (docs/tunnel.md).
    SERVICE_NOT_ALLOWED = "service_not_allowed"
    INTERACTIVE_SHELL = "interactive_shell"
    ADBD_CONTROL = "adbd_control"
    REVERSE_NOT_CARRIED = "reverse_not_carried"
    FORWARD_NOT_ALLOWED = "forward_not_allowed"


def _refuse(rule: Rule, message: str, **data: Any) -> NoReturn:
    raise RpcError(ErrorCode.FORBIDDEN, message, {"rule": rule.value, **data})


# --------------------------------------------------------------------------------------------
# Context and configuration


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What the bridge knows about the run a command belongs to.

    ``installed_packages`` are the packages this bridge installed through droidwire (still
    installed); ``preexisting`` those of them that were on the device before (droidwire
    updated them): they may be started and instrumented, never cleared or uninstalled.
    ``screen`` is the device's screen size (width, height), for ``input`` bounds.
    """

    app_package: str | None = None
    test_package: str | None = None
    installed_packages: frozenset[str] = frozenset()
    preexisting: frozenset[str] = frozenset()
    screen: tuple[int, int] | None = None

    @property
    def packages(self) -> frozenset[str]:
        """Packages a borrower may start, stop, clear and instrument."""
        own = {p for p in (self.app_package, self.test_package) if p}
        return frozenset(own) | self.installed_packages


@dataclass(frozen=True, slots=True)
class LogcatScope:
    """What a logcat read may return: everything, or only the lines of these packages' processes."""

    packages: frozenset[str] | None = None  # None: every line

    @property
    def unrestricted(self) -> bool:
        return self.packages is None


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The host owner's settings (the ``[policy]`` table of the bridge config).

    ``expose``: ``None`` exposes every attached device (the default), else only these serials.
    ``hide`` always wins over ``expose``. ``pause_file``: while this file exists, sharing is
    paused (a kill switch the owner flips with ``touch``, no restart needed).
    """

    profile: Profile = Profile.STANDARD
    devices: Mapping[str, Profile] = field(default_factory=dict)
    expose: frozenset[str] | None = None
    hide: frozenset[str] = frozenset()
    paused: bool = False
    pause_file: str | None = None
    # Placement labels and pool (controller selectors ``label=``/``pool=``): the host's, and
    # each device's own (added to, respectively put over, the host's).
    labels: tuple[str, ...] = ()
    pool: str | None = None
    device_labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    device_pools: Mapping[str, str] = field(default_factory=dict)

    def labels_for(self, serial: str) -> tuple[list[str], str | None]:
        """The labels and pool the owner gave ``serial`` (host-wide ones included)."""
        labels = sorted({*self.labels, *self.device_labels.get(serial, ())})
        return labels, self.device_pools.get(serial, self.pool)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> PolicyConfig:
        """Build from a parsed TOML/JSON table; raises ``ValueError`` naming the bad key."""
        known = {"profile", "devices", "expose", "hide", "paused", "pause_file", "labels", "pool"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"policy: unknown key(s) {sorted(unknown)}")
        profile = _profile(raw.get("profile", Profile.STANDARD.value), "policy.profile")
        devices: dict[str, Profile] = {}
        device_labels: dict[str, tuple[str, ...]] = {}
        device_pools: dict[str, str] = {}
        raw_devices = raw.get("devices", {})
        if not isinstance(raw_devices, Mapping):
            raise ValueError("policy.devices must be a table of serial = profile")
        for serial, value in raw_devices.items():
            # Accept both `serial = "full"` and `[policy.devices."serial"] profile = "full"`.
            if isinstance(value, Mapping):
                extra = set(value) - {"profile", "labels", "pool"}
                if extra:
                    raise ValueError(f"policy.devices.{serial}: unknown key(s) {sorted(extra)}")
                if "labels" in value:
                    device_labels[str(serial)] = _labels(
                        value["labels"], f"policy.devices.{serial}.labels")
                if value.get("pool") is not None:
                    device_pools[str(serial)] = _label(
                        value["pool"], f"policy.devices.{serial}.pool")
                value = value.get("profile", profile.value)
            devices[str(serial)] = _profile(value, f"policy.devices.{serial}")
        expose_raw = raw.get("expose", "all")
        expose: frozenset[str] | None
        if expose_raw == "all":
            expose = None
        elif isinstance(expose_raw, list) and all(isinstance(s, str) for s in expose_raw):
            expose = frozenset(expose_raw)
        else:
            raise ValueError('policy.expose must be "all" or a list of serials')
        hide_raw = raw.get("hide", [])
        if not (isinstance(hide_raw, list) and all(isinstance(s, str) for s in hide_raw)):
            raise ValueError("policy.hide must be a list of serials")
        paused = raw.get("paused", False)
        if not isinstance(paused, bool):
            raise ValueError("policy.paused must be true or false")
        pause_file = raw.get("pause_file")
        if pause_file is not None and not isinstance(pause_file, str):
            raise ValueError("policy.pause_file must be a path")
        return cls(
            profile=profile,
            devices=devices,
            expose=expose,
            hide=frozenset(hide_raw),
            paused=paused,
            pause_file=os.path.expanduser(pause_file) if pause_file else None,
            labels=_labels(raw.get("labels", []), "policy.labels"),
            pool=_label(raw["pool"], "policy.pool") if raw.get("pool") is not None else None,
            device_labels=device_labels,
            device_pools=device_pools,
        )


def _label(value: object, where: str) -> str:
    if not isinstance(value, str) or not re.match(LABEL_PATTERN, value):
        raise ValueError(f"{where}: a label is 1-64 of A-Z a-z 0-9 . _ - (not {value!r})")
    return value


def _labels(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_LABELS:
        raise ValueError(f"{where} must be a list of at most {MAX_LABELS} labels")
    return tuple(sorted({_label(v, where) for v in value}))


def _profile(value: object, where: str) -> Profile:
    try:
        return Profile(str(value))
    except ValueError:
        names = ", ".join(p.value for p in Profile)
        raise ValueError(f"{where}: unknown profile {value!r} (one of {names})") from None


# --------------------------------------------------------------------------------------------
# Layer 1: lexical screen and parsing


def _screen_char(ch: str, *, in_command_name: bool) -> None:
    code = ord(ch)
    if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
        _refuse(Rule.CONTROL_CHARACTER, f"control character U+{code:04X} in command")
    if ch in METACHARACTERS:
        _refuse(Rule.METACHARACTER, f"shell metacharacter {ch!r} in command", char=ch)
    if code < 0x80:
        return
    if in_command_name:
        _refuse(Rule.NON_ASCII_COMMAND, f"non-ASCII character U+{code:04X} in a command name")
    folded = unicodedata.normalize("NFKC", ch)
    category = unicodedata.category(ch)
    if (
        any(c in METACHARACTERS or c in _QUOTES or ord(c) < 0x20 for c in folded)
        or category[0] in "PSZC"  # punctuation, symbols, separators, format/control/unassigned
    ):
        _refuse(
            Rule.UNICODE_LOOKALIKE,
            f"character U+{code:04X} ({unicodedata.name(ch, 'unnamed')}) may pass for shell syntax",
        )


def _screen_text(text: str) -> None:
    """Screen raw command text; command names are checked after splitting."""
    for ch in text:
        _screen_char(ch, in_command_name=False)


def _screen_argv(argv: Sequence[str]) -> None:
    for index, arg in enumerate(argv):
        if not isinstance(arg, str):
            _refuse(Rule.UNPARSEABLE, "argv elements must be strings")
        for ch in arg:
            _screen_char(ch, in_command_name=index == 0)
        if _QUOTES.intersection(arg):
            _refuse(Rule.QUOTE, f"quote character inside argument {index}")


def parse_command(command: str | Sequence[str]) -> list[str]:
    """Screen and split a command (layer 1); returns its argv or raises ``forbidden``.

    A string is split with ``shlex`` (POSIX rules); an argv is taken as given. Either way every
    element passes the same screen, so quoting cannot hide a metacharacter and a quote inside
    an argument (what remains of smuggling) is refused.
    """
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_CHARS:
            _refuse(Rule.TOO_LONG, f"command longer than {MAX_COMMAND_CHARS} characters")
        _screen_text(command)
        try:
            argv = shlex.split(command, comments=False, posix=True)
        except ValueError as exc:
            _refuse(Rule.UNPARSEABLE, f"cannot parse command: {exc}")
    else:
        argv = list(command)
        if sum(len(a) if isinstance(a, str) else 0 for a in argv) > MAX_COMMAND_CHARS:
            _refuse(Rule.TOO_LONG, f"command longer than {MAX_COMMAND_CHARS} characters")
    if not argv or not argv[0]:
        _refuse(Rule.EMPTY_COMMAND, "empty command")
    if len(argv) > MAX_ARGS:
        _refuse(Rule.TOO_LONG, f"more than {MAX_ARGS} arguments")
    _screen_argv(argv)
    return argv


# --------------------------------------------------------------------------------------------
# Layer 2: deny list, every profile

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


def _check_denied(argv: Sequence[str]) -> None:
    """Layer 2, every profile: refuse what takes the device away from its owner or runs
    another program, judged by effect (see the tables above)."""
    if _ASSIGNMENT.match(argv[0]):
        _refuse(Rule.ENV_ASSIGNMENT, "a leading NAME=value (environment assignment) is not allowed")
    if "/" in argv[0] and not _SYSTEM_BIN.match(posixpath.normpath(argv[0])):
        _refuse(Rule.COMMAND_WRAPPER,
                f"{argv[0]}: only the system's own programs may be run by path")
    name = _command_name(argv[0])
    if name in _MULTICALL:
        if len(argv) < 2 or argv[1].startswith("-"):
            _refuse(Rule.COMMAND_WRAPPER, f"{name}: name the applet to run")
        _check_denied(argv[1:])  # `toybox reboot` is `reboot`
        return
    if name in _SHELLS:
        _refuse(Rule.SHELL_INTERPRETER, f"{name}: running a shell interpreter is not allowed")
    if name in _WRAPPERS:
        _refuse(Rule.COMMAND_WRAPPER, f"{name}: commands that run other commands are not allowed")
    rule = _DENIED.get(name)
    if rule is not None:
        _refuse(rule, f"{name} is not allowed on shared devices")
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
                    _refuse(Rule.RM_ROOT, f"rm -r of {arg!r} is not allowed")


def _check_effects(name: str, args: list[str]) -> None:
    """Commands that are fine in general but take the device away with some arguments."""
    lower = [a.lower() for a in args]
    if name in ("start", "stop", "restart"):
        # init's service control: `stop adbd` turns adb off, `stop` alone the framework.
        rule = Rule.ADB_OFF if "adbd" in args else Rule.REBOOT
        _refuse(rule, f"{name}: controlling init's services is not allowed")
    if name == "svc" and args:
        # `svc power reboot|shutdown`; `svc usb …` (the adb link over USB), `svc wifi|data
        # disable` (the link over the network).
        if args[0] == "power" and any(a in ("reboot", "shutdown") for a in args[1:]):
            _refuse(Rule.REBOOT, "svc power reboot/shutdown is not allowed")
        if args[0] == "usb" or (args[0] in ("wifi", "data", "ethernet") and "disable" in args):
            _refuse(Rule.ADB_OFF, f"svc {args[0]} may cut the adb link")
        if args[0] == "system-server":
            _refuse(Rule.REBOOT, "svc system-server is not allowed")
    if name == "service" and args[:1] == ["call"]:
        rule = Rule.REBOOT if args[1:2] == ["power"] else Rule.COMMAND_WRAPPER
        _refuse(rule, "service call (raw binder transactions) is not allowed")
    if name == "am" and any(_POWER_INTENT.search(a) for a in args):
        _refuse(Rule.REBOOT, "intents that reboot, shut down or wipe the device are not allowed")
    verb = next((i for i, a in enumerate(args) if a in ("put", "delete", "reset")), None)
    if name == "settings" and verb is not None:
        keys = [a for a in args[verb + 1:] if not a.startswith("-")][1:2]
        if args[verb] == "reset" or any(k in _ADB_SETTINGS for k in keys):
            _refuse(Rule.ADB_OFF, "changing the debugging settings may turn adb off")
        if any(_LOCK_SETTING.match(k) for k in keys):
            _refuse(Rule.LOCK_SCREEN, "the lock screen is the owner's")
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
            _refuse(Rule.SIGNAL_INIT, "signalling init or every process is not allowed")
    if name in ("pkill", "killall") and any(a in _CRITICAL for a in args):
        _refuse(Rule.SIGNAL_INIT, "killing the system's own daemons is not allowed")
    if name in ("ip", "ifconfig") and "down" in lower:
        _refuse(Rule.ADB_OFF, "taking an interface down may cut the adb link")


# --------------------------------------------------------------------------------------------
# Layer 3: the `standard` allow-list (argv patterns, bounded arguments)

_PROP_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
_COMPONENT = re.compile(r"(?P<pkg>[A-Za-z][A-Za-z0-9_.]*)/(?P<cls>\.?[A-Za-z][A-Za-z0-9_.$]*)")
_NUMBER = re.compile(r"\d{1,6}(\.\d{1,3})?")
_INT = re.compile(r"\d{1,9}")
_KEYCODE = re.compile(r"(\d{1,3}|KEYCODE_[A-Z0-9_]{1,40})")
_WORD = re.compile(r"[A-Za-z0-9_.:/=,@%+\-]{1,200}")
_EXTRA_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_EXTRA_VALUE = re.compile(r"[A-Za-z0-9_.,:/=@%+\-]{1,256}")
_LOGCAT_FORMATS = frozenset(
    {"brief", "long", "process", "raw", "tag", "thread", "threadtime", "time", "epoch",
     "monotonic", "uid", "usec", "printable", "year", "zone", "color", "descriptive", "nsec"}
)  # fmt: skip
_LOGCAT_BUFFERS = frozenset({"main", "system", "crash", "events"})  # the shell allow-list's
# The logcat RPC reads every buffer (§6: "all buffers"); instrument-only filters by process.
_LOGCAT_RPC_BUFFERS = _LOGCAT_BUFFERS | {"radio", "kernel", "default", "all"}
_DUMPSYS_SERVICES = frozenset({"window", "activity", "battery", "meminfo", "gfxinfo", "package"})
# dumpsys arguments that change state rather than read it.
_DUMPSYS_WRITES = frozenset(
    {"set", "reset", "unplug", "--reset", "clear", "enable", "disable", "kill", "put", "delete",
     "start", "stop", "write", "force", "--set", "--clear", "framestats-reset", "trim-memory"}
)  # fmt: skip
_LOGCAT_TIME = re.compile(r"(\d{1,7}|\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}|\d{1,10}\.\d{1,9})")

_Validator = Callable[[list[str], CommandContext], None]


def _bad_arg(argv: Sequence[str], why: str) -> NoReturn:
    _refuse(Rule.ARGUMENT, f"{shlex.join(argv[:3])}: {why}")


def _in_workspace(path: str, *, allow_root: bool) -> str:
    """Normalise ``path`` and require it inside the droidwire folder (``..`` cannot escape)."""
    if not path.startswith("/"):
        _refuse(Rule.PATH_INVALID, f"path {path!r} must be absolute")
    # normpath keeps a leading '//' (POSIX allows it to mean something else): collapse it.
    normal = posixpath.normpath("/" + path.lstrip("/"))
    if normal == DROIDWIRE_DIR and allow_root:
        return normal
    if not normal.startswith(DROIDWIRE_DIR + "/"):
        _refuse(
            Rule.PATH_OUTSIDE_WORKSPACE,
            f"path {path!r} is outside {DROIDWIRE_DIR}/",
            path=normal,
        )
    return normal


def _own_package(pkg: str, ctx: CommandContext) -> None:
    if pkg not in ctx.packages:
        _refuse(
            Rule.PACKAGE_SCOPE,
            f"package {pkg!r} is not the app under test, its test package, "
            "or a package installed through droidwire",
            package=pkg,
        )


def _echo(argv: list[str], ctx: CommandContext) -> None:
    return None


def _getprop(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) > 2 or (len(argv) == 2 and not _PROP_KEY.fullmatch(argv[1])):
        _bad_arg(argv, "expected `getprop [KEY]`")


def _logcat(argv: list[str], ctx: CommandContext) -> None:
    args = argv[1:]
    exits = False  # -d, -c and -t print and exit; anything else would follow forever
    i = 0
    while i < len(args):
        arg = args[i]
        value: str | None = None
        if arg.startswith("--pid="):
            arg, value = "--pid", arg.split("=", 1)[1]
        elif arg in ("-v", "-b", "-t", "-T", "--pid", "--format", "--buffer"):
            if i + 1 >= len(args):
                _bad_arg(argv, f"{arg} needs a value")
            value = args[i + 1]
            i += 1
        if arg in ("-d", "-c", "--clear"):
            exits = True
        elif arg in ("-v", "--format"):
            assert value is not None
            if value not in _LOGCAT_FORMATS:
                _bad_arg(argv, f"unknown format {value!r}")
        elif arg in ("-b", "--buffer"):
            assert value is not None
            for buf in value.split(","):
                if buf not in _LOGCAT_BUFFERS:
                    _bad_arg(argv, f"buffer {buf!r} is not one of main, system, crash, events")
        elif arg in ("-t", "-T"):
            assert value is not None
            if arg == "-t":
                exits = True
            if _INT.fullmatch(value):
                if int(value) > MAX_LOGCAT_LINES:
                    _refuse(
                        Rule.LOGCAT_COUNT, f"logcat {arg} {value}: at most {MAX_LOGCAT_LINES} lines"
                    )
            elif not _LOGCAT_TIME.fullmatch(value):
                _bad_arg(argv, f"{arg} takes a line count or a time")
        elif arg == "--pid":
            assert value is not None
            if not _INT.fullmatch(value):
                _bad_arg(argv, "--pid takes a process id")
        else:
            _bad_arg(argv, f"logcat option {arg!r} is not allowed")
        i += 1
    if not exits:
        _refuse(
            Rule.LOGCAT_FOLLOW, "logcat without -d, -c or -t follows forever: use the logcat stream"
        )


def _dumpsys(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) < 2 or argv[1] not in _DUMPSYS_SERVICES:
        _bad_arg(argv, f"dumpsys service must be one of {', '.join(sorted(_DUMPSYS_SERVICES))}")
    rest = argv[2:]
    if argv[1] == "battery" and rest:
        _bad_arg(argv, "dumpsys battery takes no arguments (they would change state)")
    if len(rest) > 4:
        _bad_arg(argv, "too many arguments")
    for arg in rest:
        if arg.lower() in _DUMPSYS_WRITES or not _WORD.fullmatch(arg):
            _bad_arg(argv, f"argument {arg!r} is not a read")


def _wm(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) != 2 or argv[1] not in ("size", "density"):
        _bad_arg(argv, "only `wm size` and `wm density`, without arguments")


def _point(argv: list[str], xs: str, ys: str, ctx: CommandContext) -> None:
    if not (_NUMBER.fullmatch(xs) and _NUMBER.fullmatch(ys)):
        _bad_arg(argv, "coordinates must be non-negative numbers")
    if ctx.screen is None:
        _refuse(Rule.SCREEN_UNKNOWN, "the screen size is unknown; input is refused")
    width, height = ctx.screen
    x, y = float(xs), float(ys)
    if not (0 <= x < width and 0 <= y < height):
        _refuse(Rule.OUTSIDE_SCREEN, f"point ({xs}, {ys}) is outside the {width}x{height} screen")


def _input(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) < 2:
        _bad_arg(argv, "input needs an action")
    action, rest = argv[1], argv[2:]
    if action == "tap":
        if len(rest) != 2:
            _bad_arg(argv, "expected `input tap X Y`")
        _point(argv, rest[0], rest[1], ctx)
    elif action == "swipe":
        if len(rest) not in (4, 5):
            _bad_arg(argv, "expected `input swipe X1 Y1 X2 Y2 [MS]`")
        _point(argv, rest[0], rest[1], ctx)
        _point(argv, rest[2], rest[3], ctx)
        if len(rest) == 5:
            if not _INT.fullmatch(rest[4]):
                _bad_arg(argv, "swipe duration must be whole milliseconds")
            if int(rest[4]) > MAX_SWIPE_MS:
                _refuse(Rule.SWIPE_DURATION, f"swipe longer than {MAX_SWIPE_MS} ms")
    elif action == "text":
        if len(rest) != 1:
            _bad_arg(argv, "expected `input text TEXT` (one argument)")
        if len(rest[0]) > MAX_INPUT_TEXT:
            _refuse(Rule.TEXT_TOO_LONG, f"input text longer than {MAX_INPUT_TEXT} characters")
    elif action == "keyevent":
        keys = [k for k in rest if k != "--longpress"]
        if not keys or len(keys) > MAX_KEYEVENTS or not all(_KEYCODE.fullmatch(k) for k in keys):
            _bad_arg(argv, f"expected `input keyevent KEY…` (1 to {MAX_KEYEVENTS} key codes)")
    else:
        _bad_arg(argv, "input action must be tap, swipe, text or keyevent")


def _component(argv: list[str], value: str, ctx: CommandContext) -> None:
    match = _COMPONENT.fullmatch(value)
    if match is None:
        _bad_arg(argv, f"{value!r} is not a PACKAGE/CLASS component")
    _own_package(match["pkg"], ctx)


def _am(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) < 3:
        _bad_arg(argv, "expected `am start|force-stop|instrument …`")
    sub, rest = argv[1], argv[2:]
    if sub == "force-stop":
        if len(rest) != 1 or not _PACKAGE.fullmatch(rest[0]):
            _bad_arg(argv, "expected `am force-stop PACKAGE`")
        _own_package(rest[0], ctx)
    elif sub == "start":
        component = None
        i = 0
        while i < len(rest):
            arg = rest[i]
            if arg in ("-W", "-S"):
                i += 1
                continue
            if arg in ("-n", "-a", "-c") and i + 1 < len(rest):
                value = rest[i + 1]
                if arg == "-n":
                    component = value
                    _component(argv, value, ctx)
                elif not _WORD.fullmatch(value):
                    _bad_arg(argv, f"bad {arg} value")
                i += 2
                continue
            _bad_arg(argv, f"am start option {arg!r} is not allowed")
        if component is None:
            _bad_arg(argv, "am start needs -n PACKAGE/ACTIVITY of an allowed package")
    elif sub == "instrument":
        opts, target = rest[:-1], rest[-1]
        i = 0
        while i < len(opts):
            arg = opts[i]
            if arg in ("-w", "-r"):
                i += 1
                continue
            if arg == "-e" and i + 2 < len(opts):
                key, value = opts[i + 1], opts[i + 2]
                if not (_EXTRA_KEY.fullmatch(key) and _EXTRA_VALUE.fullmatch(value)):
                    _bad_arg(argv, f"bad -e {key!r} value")
                i += 3
                continue
            _bad_arg(argv, f"am instrument option {arg!r} is not allowed")
        _component(argv, target, ctx)
    else:
        _bad_arg(argv, "only am start, force-stop and instrument")


def _not_preexisting(pkg: str, ctx: CommandContext) -> None:
    if pkg in ctx.preexisting:
        _refuse(
            Rule.PACKAGE_PREEXISTING,
            f"package {pkg!r} was on the device before droidwire installed over it: "
            "its data and its installation are the owner's",
            package=pkg,
        )


def _pm(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) == 3 and argv[1] == "clear":
        _own_package(argv[2], ctx)
        _not_preexisting(argv[2], ctx)
        return
    if argv[1:3] == ["list", "packages"]:
        # The owner's other apps are not the borrower's business: name one of the run's packages.
        if len(argv) != 4:
            _refuse(
                Rule.PACKAGE_SCOPE,
                "pm list packages needs a filter naming one of the run's packages",
            )
        _own_package(argv[3], ctx)
        return
    _bad_arg(argv, "only `pm clear PACKAGE` and `pm list packages PACKAGE`")


def _screencap(argv: list[str], ctx: CommandContext) -> None:
    if argv[1:] != ["-p"]:
        _bad_arg(argv, "only `screencap -p` (to stdout)")


def _uiautomator(argv: list[str], ctx: CommandContext) -> None:
    args = [a for a in argv[2:] if a != "--compressed"]
    if len(argv) < 2 or argv[1] != "dump" or len(args) != 1:
        _bad_arg(argv, "expected `uiautomator dump [--compressed] /dev/tty|DROIDWIRE_PATH`")
    if args[0] not in ("/dev/tty", "/dev/stdout"):
        _in_workspace(args[0], allow_root=False)


def _ls(argv: list[str], ctx: CommandContext) -> None:
    paths = [a for a in argv[1:] if not a.startswith("-")]
    for flag in (a for a in argv[1:] if a.startswith("-")):
        if not re.fullmatch(r"-[laRhtsd1]{1,6}", flag):
            _bad_arg(argv, f"ls option {flag!r} is not allowed")
    if not paths:
        _refuse(Rule.PATH_OUTSIDE_WORKSPACE, f"ls needs a path inside {DROIDWIRE_DIR}/")
    for path in paths:
        _in_workspace(path, allow_root=True)


def _rm(argv: list[str], ctx: CommandContext) -> None:
    paths = [a for a in argv[1:] if not a.startswith("-")]
    for flag in (a for a in argv[1:] if a.startswith("-")):
        if not re.fullmatch(r"-[rRf]{1,3}", flag):
            _bad_arg(argv, f"rm option {flag!r} is not allowed")
    if not paths:
        _bad_arg(argv, "rm needs a path")
    for path in paths:
        _in_workspace(path, allow_root=False)


_STANDARD: dict[str, _Validator] = {
    "echo": _echo,
    "getprop": _getprop,
    "logcat": _logcat,
    "dumpsys": _dumpsys,
    "wm": _wm,
    "input": _input,
    "am": _am,
    "pm": _pm,
    "screencap": _screencap,
    "uiautomator": _uiautomator,
    "ls": _ls,
    "rm": _rm,
}


# --------------------------------------------------------------------------------------------
# The policy


class Policy:
    """The host owner's policy, applied to every request whatever the controller asks.

    ``paused`` can be flipped at run time (``pause()`` / ``resume()``) besides the config's
    ``paused`` and ``pause_file``.
    """

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._paused = self.config.paused
        self._base: Policy | None = None  # set on a caller's view (for_caller)
        self._cap_full = False

    def for_caller(self, *, as_owner: bool) -> Policy:
        """This policy as it applies to one caller: ``full`` is for the bridge owner's own
        use, so for anyone else (a borrower, an admin, a caller the controller did not vouch
        for) a ``full`` device answers as ``standard``. The view shares the owner's switches
        (pause, exposure) with this policy."""
        base = self._base or self
        if as_owner:
            return base
        view = Policy.__new__(Policy)
        view.config = base.config
        view._paused = False
        view._base = base
        view._cap_full = True
        return view

    # -- host owner's switches ---------------------------------------------------------------

    @property
    def paused(self) -> bool:
        if self._base is not None:
            return self._base.paused
        pause_file = self.config.pause_file
        return self._paused or (pause_file is not None and os.path.exists(pause_file))

    def pause(self) -> None:
        if self._base is not None:
            self._base.pause()
        self._paused = True

    def resume(self) -> None:
        """Lift the run-time pause (a ``pause_file`` that exists still pauses)."""
        if self._base is not None:
            self._base.resume()
        self._paused = False

    def is_exposed(self, serial: str) -> bool:
        """Whether the device may be shown to the controller at all (no pause check)."""
        if serial in self.config.hide:
            return False
        return self.config.expose is None or serial in self.config.expose

    def profile_for(self, serial: str) -> Profile:
        profile = self.config.devices.get(serial, self.config.profile)
        if profile is Profile.FULL and self._cap_full:
            return Profile.STANDARD  # full is the owner's own (for_caller)
        return profile

    def check_exposed(self, serial: str) -> Profile:
        """Every check starts here: paused → ``forbidden``; a hidden device → ``not_found``.

        A device the owner does not expose answers as if it were not attached, so the
        controller learns nothing about it.
        """
        if self.paused:
            _refuse(Rule.PAUSED, "the host owner has paused sharing of this host's devices")
        if not self.is_exposed(serial):
            raise RpcError(
                ErrorCode.NOT_FOUND, f"no device {serial!r}", {"rule": Rule.NOT_EXPOSED.value}
            )
        return self.profile_for(serial)

    # -- one check per RPC kind --------------------------------------------------------------

    def check_shell(
        self,
        serial: str,
        command: str | Sequence[str],
        context: CommandContext | None = None,
    ) -> list[str]:
        """Return the normalised argv to run, or raise ``forbidden`` naming the rule."""
        profile = self.check_exposed(serial)
        if profile in (Profile.INSTRUMENT_ONLY, Profile.NO_SHELL):
            _refuse(
                Rule.SHELL_NOT_ALLOWED,
                f"profile {profile.value} has no shell",
                profile=profile.value,
            )
        argv = parse_command(command)
        _check_denied(argv)
        if profile is Profile.FULL:
            return argv
        validator = _STANDARD.get(argv[0])
        if validator is None:
            _refuse(Rule.NOT_ALLOWLISTED, f"{argv[0]!r} is not on the standard allow-list")
        validator(argv, context or CommandContext())
        return argv

    def check_logcat(
        self,
        serial: str,
        context: CommandContext | None = None,
        *,
        buffers: Iterable[str] = ("main",),
    ) -> LogcatScope:
        """Which lines a logcat read (dump or follow) may return."""
        profile = self.check_exposed(serial)
        unknown = set(buffers) - _LOGCAT_RPC_BUFFERS
        if unknown:
            _refuse(Rule.ARGUMENT, f"unknown logcat buffer(s) {sorted(unknown)}")
        if profile is not Profile.INSTRUMENT_ONLY:
            return LogcatScope()
        packages = frozenset(p for p in (context or CommandContext()).packages)
        if not packages:
            _refuse(
                Rule.LOGCAT_SCOPE,
                "profile instrument-only shows only the app under test's logs: name the app",
                profile=profile.value,
            )
        return LogcatScope(packages=packages)

    def check_screenshot(self, serial: str) -> None:
        self._not_in(serial, Rule.SCREENSHOT_NOT_ALLOWED, "screenshots", Profile.INSTRUMENT_ONLY)

    def check_ui(self, serial: str) -> None:
        """UI reads and actions of the agent toolkit (tap, swipe, text, key, ui dump)."""
        self._not_in(serial, Rule.UI_NOT_ALLOWED, "UI access", Profile.INSTRUMENT_ONLY)

    def check_install(self, serial: str) -> None:
        """Install of APK bytes sent through droidwire (the only install the bridge offers)."""
        self.check_exposed(serial)

    def check_uninstall(
        self, serial: str, package: str, context: CommandContext | None = None
    ) -> None:
        profile = self.check_exposed(serial)
        if profile is not Profile.FULL:
            _own_package(package, context or CommandContext())
            _not_preexisting(package, context or CommandContext())

    def check_instrument(
        self, serial: str, component: str, context: CommandContext | None = None
    ) -> None:
        """``am instrument`` of ``PACKAGE/RUNNER``: the run's test package unless ``full``."""
        profile = self.check_exposed(serial)
        match = _COMPONENT.fullmatch(component)
        if match is None:
            _refuse(Rule.ARGUMENT, f"{component!r} is not a PACKAGE/RUNNER component")
        if profile is not Profile.FULL:
            _own_package(match["pkg"], context or CommandContext())

    def check_push(self, serial: str, path: str) -> str:
        """Return the normalised device path a push may write."""
        return self._transfer(serial, path, Rule.PUSH_NOT_ALLOWED, "push")

    def check_pull(self, serial: str, path: str) -> str:
        """Return the normalised device path a pull may read."""
        return self._transfer(serial, path, Rule.PULL_NOT_ALLOWED, "pull")

    def check_tunnel(
        self, serial: str, service: str, context: CommandContext | None = None
    ) -> TunnelOpen:
        """An adb service a tunnel opens (``shell,v2,raw:CMD``, ``sync:``, ``tcp:PORT`` …):
        what to open on the device, or ``forbidden`` naming the rule (docs/tunnel.md)."""
        return _check_tunnel(self, serial, service, context)

    def check_sync(self, serial: str, request: str, path: str) -> None:
        """One request on a tunnel's ``sync:`` stream (``SEND``, ``RECV``, ``STAT`` …): its
        path confined as pushes and pulls are."""
        _check_sync(self, serial, request, path)

    # -- helpers -----------------------------------------------------------------------------

    def _not_in(self, serial: str, rule: Rule, what: str, *profiles: Profile) -> Profile:
        profile = self.check_exposed(serial)
        if profile in profiles:
            _refuse(rule, f"profile {profile.value} allows no {what}", profile=profile.value)
        return profile

    def _transfer(self, serial: str, path: str, rule: Rule, what: str) -> str:
        profile = self._not_in(serial, rule, what, Profile.INSTRUMENT_ONLY)
        if not isinstance(path, str) or not path:
            _refuse(Rule.PATH_INVALID, "empty path")
        for ch in path:
            code = ord(ch)
            if code < 0x20 or code == 0x7F:
                _refuse(Rule.CONTROL_CHARACTER, f"control character U+{code:04X} in path")
        if len(path.encode("utf-8")) > 1024:  # the sync protocol's limit
            _refuse(Rule.PATH_INVALID, "path longer than 1024 bytes")
        if profile is Profile.FULL:
            if not path.startswith("/"):
                _refuse(Rule.PATH_INVALID, f"path {path!r} must be absolute")
            return posixpath.normpath("/" + path.lstrip("/"))
        return _in_workspace(path, allow_root=False)


# --------------------------------------------------------------------------------------------
# adb services opened through a tunnel (docs/tunnel.md)

# adb's `adb logcat` runs `export ANDROID_LOG_TAGS=''; exec logcat ARGS` (older clients quote
# the empty value in double quotes): the prefix is adb's own, the rest is checked as a command.
_LOGCAT_PREFIX = re.compile(r"""export ANDROID_LOG_TAGS=(?:''|"''"|""); exec (?=logcat(?: |$))""")
_SHELL_OPTION = re.compile(r"v2|raw|pty|TERM=[A-Za-z0-9._+-]{1,64}")
# Services that change adbd itself or the device's state: the owner's (``full``) alone.
_ADBD_CONTROL = frozenset({
    "reboot", "root", "unroot", "remount", "tcpip", "usb", "enable-verity", "disable-verity",
    "sideload", "sideload-host", "backup", "restore",
})
_FORWARD_TARGET = re.compile(r"tcp:(?:localhost:)?\d{1,5}|localabstract:[A-Za-z0-9._@/:-]{1,107}")
_INSTALL_FLAGS = frozenset({"-r", "-t", "-d"})
_INSTALL_SESSION = re.compile(r"\d{1,10}")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SYNC_READS = frozenset({"STAT", "LST2", "STA2", "LIST", "LIS2"})


@dataclass(frozen=True, slots=True)
class TunnelOpen:
    """A tunnel ``OPEN`` the policy let through: what to open on the device (the checked,
    re-quoted command, never the client's text) and how the bridge relays it (``sync``: every
    request's path checked; ``raw``: bytes as they come)."""

    service: str
    kind: str = "raw"
    installs: bool = False  # ends an install (``install`` or ``install-commit``)


def _size_arg(argv: Sequence[str], value: str) -> None:
    if not re.fullmatch(r"\d{1,12}", value) or int(value) > 4 << 30:
        _bad_arg(argv, "-S takes a size in bytes")


def _install_command(argv: list[str], *, owner: bool) -> None:
    """``cmd package install|install-create|install-write|install-commit|install-abandon``
    as ``adb install`` and ``adb install-multiple`` send them (APK bytes on stdin)."""
    verb, args = argv[2], argv[3:]
    if verb in ("install", "install-create"):
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-S" and i + 1 < len(args):
                _size_arg(argv, args[i + 1])
                i += 2
                continue
            if arg == "-p" and i + 1 < len(args) and _PACKAGE.fullmatch(args[i + 1]):
                i += 2  # a split of an installed package (install-multiple -p)
                continue
            if arg not in _INSTALL_FLAGS and not (owner and arg == "-g"):
                _bad_arg(argv, f"install option {arg!r} is not allowed")
            i += 1
        if verb == "install" and "-S" not in args:
            _bad_arg(argv, "a streamed install names its size (-S)")
        return
    if verb == "install-write":
        if (len(args) != 5 or args[0] != "-S" or not _INSTALL_SESSION.fullmatch(args[2])
                or not _SPLIT_NAME.fullmatch(args[3]) or args[4] != "-"):
            _bad_arg(argv, "expected `install-write -S SIZE SESSION NAME -`")
        _size_arg(argv, args[1])
        return
    if len(args) != 1 or not _INSTALL_SESSION.fullmatch(args[0]):
        _bad_arg(argv, f"expected `{verb} SESSION`")


def _tunnel_command(policy: Policy, serial: str, command: str,
                    context: CommandContext | None) -> list[str]:
    """A tunnel shell/exec command: adb's own install and logcat forms, else the shell check."""
    stripped = _LOGCAT_PREFIX.sub("", command, count=1) if command.startswith("export ") else command
    argv = parse_command(stripped)
    profile = policy.profile_for(serial)
    if argv[0] == "logcat" and profile is not Profile.FULL:
        # A tunnel's stream may follow the log (as the logcat stream does), so no -d is needed;
        # the options are the allow-list's. A logcat read, not a shell: no-shell allows it,
        # instrument-only (the app's processes only, which adb's logcat cannot filter) not.
        policy.check_logcat(serial, context)
        _check_denied(argv)
        _logcat([*argv, "-d"], context or CommandContext())
        return argv
    if argv[:2] == ["cmd", "package"] and len(argv) >= 3 and argv[2] in (
            "install", "install-create", "install-write", "install-commit", "install-abandon"):
        policy.check_install(serial)
        _install_command(argv, owner=policy.profile_for(serial) is Profile.FULL)
        return argv
    return policy.check_shell(serial, argv, context)


def _installs(argv: list[str]) -> bool:
    return argv[:2] == ["cmd", "package"] and argv[2] in ("install", "install-commit")


def _check_tunnel(policy: Policy, serial: str, service: str,
                  context: CommandContext | None) -> TunnelOpen:
    profile = policy.check_exposed(serial)
    head, sep, rest = service.partition(":")
    name = head.split(",", 1)[0]
    if name == "shell" and sep:
        options = head.split(",")[1:]
        if any(not _SHELL_OPTION.fullmatch(o) for o in options):
            _refuse(Rule.SERVICE_NOT_ALLOWED, f"unknown shell option in {head!r}")
        if not rest.strip():
            if profile is not Profile.FULL:
                _refuse(Rule.INTERACTIVE_SHELL,
                        f"an interactive shell is not available on profile {profile.value}: "
                        "run one command at a time (adb shell CMD)", profile=profile.value)
            return TunnelOpen(service)
        argv = _tunnel_command(policy, serial, rest, context)
        return TunnelOpen(f"{head}:{shlex.join(argv)}", installs=_installs(argv))
    if name == "exec" and sep and head == "exec":
        argv = _tunnel_command(policy, serial, rest, context)
        return TunnelOpen(f"exec:{shlex.join(argv)}", installs=_installs(argv))
    if service == "sync:":
        policy._not_in(serial, Rule.PUSH_NOT_ALLOWED, "file transfer", Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service, "sync")
    if _FORWARD_TARGET.fullmatch(service):
        policy._not_in(serial, Rule.FORWARD_NOT_ALLOWED, "port forwards", Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service)
    if service in ("jdwp", "track-jdwp") or re.fullmatch(r"jdwp:\d{1,10}", service):
        policy._not_in(serial, Rule.FORWARD_NOT_ALLOWED, "debugger connections",
                       Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service)
    if service == "framebuffer:":
        policy.check_screenshot(serial)
        return TunnelOpen(service)
    if name == "reverse":
        _refuse(Rule.REVERSE_NOT_CARRIED,
                "adb reverse is not carried by a tunnel: the device's connections would reach "
                "the bridge's host, not yours")
    if name in _ADBD_CONTROL:
        if profile is Profile.FULL:
            return TunnelOpen(service)
        _refuse(Rule.ADBD_CONTROL,
                f"{name}: refused on a shared device (profile {profile.value})",
                profile=profile.value)
    _refuse(Rule.SERVICE_NOT_ALLOWED, f"adb service {name[:40]!r} is not carried by a tunnel")


def _check_sync(policy: Policy, serial: str, request: str, path: str) -> None:
    if request == "SEND":
        policy.check_push(serial, path.rpartition(",")[0] if "," in path else path)
    elif request == "RECV":
        policy.check_pull(serial, path)
    elif request in _SYNC_READS:
        profile = policy._not_in(serial, Rule.PULL_NOT_ALLOWED, "file listing",
                                 Profile.INSTRUMENT_ONLY)
        if profile is not Profile.FULL:
            _in_workspace(path, allow_root=True)
    else:
        _refuse(Rule.SERVICE_NOT_ALLOWED, f"sync request {request[:8]!r} is not carried")

