"""Layer 3 of the shell check: the ``standard`` and ``agent`` allow-lists.

Each allowed program has a validator of its argv with bounded arguments (``STANDARD``);
``agent`` takes the same, except that ``am start -n`` may name any package's activity and
``pm clear`` (a wipe) is refused (``AGENT``). Packages a borrower may act on are the run's
(:attr:`CommandContext.packages`); those that were on the device before droidwire installed
over them are never cleared or uninstalled.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import NoReturn

from device_bridge.policy.context import CommandContext
from device_bridge.policy.paths import DROIDWIRE_DIR, in_workspace
from device_bridge.policy.rules import Rule, refuse

__all__ = [
    "AGENT",
    "COMPONENT",
    "LOGCAT_RPC_BUFFERS",
    "MAX_INPUT_TEXT",
    "MAX_KEYEVENTS",
    "MAX_LOGCAT_LINES",
    "MAX_SWIPE_MS",
    "PACKAGE",
    "STANDARD",
    "bad_arg",
    "not_preexisting",
    "own_package",
    "validate_logcat",
]

MAX_LOGCAT_LINES = 5000
MAX_SWIPE_MS = 10_000
MAX_INPUT_TEXT = 500
MAX_KEYEVENTS = 16

_PROP_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
COMPONENT = re.compile(r"(?P<pkg>[A-Za-z][A-Za-z0-9_.]*)/(?P<cls>\.?[A-Za-z][A-Za-z0-9_.$]*)")
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
LOGCAT_RPC_BUFFERS = _LOGCAT_BUFFERS | {"radio", "kernel", "default", "all"}
_DUMPSYS_SERVICES = frozenset(
    {"window", "activity", "battery", "meminfo", "gfxinfo", "package", "cpuinfo"}
)
# dumpsys arguments that change state rather than read it.
_DUMPSYS_WRITES = frozenset(
    {"set", "reset", "unplug", "--reset", "clear", "enable", "disable", "kill", "put", "delete",
     "start", "stop", "write", "force", "--set", "--clear", "framestats-reset", "trim-memory"}
)  # fmt: skip
_LOGCAT_TIME = re.compile(r"(\d{1,7}|\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}|\d{1,10}\.\d{1,9})")

_Validator = Callable[[list[str], CommandContext], None]


def bad_arg(argv: Sequence[str], why: str) -> NoReturn:
    refuse(Rule.ARGUMENT, f"{shlex.join(argv[:3])}: {why}")



def own_package(pkg: str, ctx: CommandContext) -> None:
    if pkg not in ctx.packages:
        refuse(
            Rule.PACKAGE_SCOPE,
            f"package {pkg!r} is not the app under test, its test package, "
            "or a package installed through droidwire",
            package=pkg,
        )


def _echo(argv: list[str], ctx: CommandContext) -> None:
    return None


def _getprop(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) > 2 or (len(argv) == 2 and not _PROP_KEY.fullmatch(argv[1])):
        bad_arg(argv, "expected `getprop [KEY]`")


def validate_logcat(argv: list[str], ctx: CommandContext) -> None:
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
                bad_arg(argv, f"{arg} needs a value")
            value = args[i + 1]
            i += 1
        if arg in ("-d", "-c", "--clear"):
            exits = True
        elif arg in ("-v", "--format"):
            assert value is not None
            if value not in _LOGCAT_FORMATS:
                bad_arg(argv, f"unknown format {value!r}")
        elif arg in ("-b", "--buffer"):
            assert value is not None
            for buf in value.split(","):
                if buf not in _LOGCAT_BUFFERS:
                    bad_arg(argv, f"buffer {buf!r} is not one of main, system, crash, events")
        elif arg in ("-t", "-T"):
            assert value is not None
            if arg == "-t":
                exits = True
            if _INT.fullmatch(value):
                if int(value) > MAX_LOGCAT_LINES:
                    refuse(
                        Rule.LOGCAT_COUNT, f"logcat {arg} {value}: at most {MAX_LOGCAT_LINES} lines"
                    )
            elif not _LOGCAT_TIME.fullmatch(value):
                bad_arg(argv, f"{arg} takes a line count or a time")
        elif arg == "--pid":
            assert value is not None
            if not _INT.fullmatch(value):
                bad_arg(argv, "--pid takes a process id")
        else:
            bad_arg(argv, f"logcat option {arg!r} is not allowed")
        i += 1
    if not exits:
        refuse(
            Rule.LOGCAT_FOLLOW, "logcat without -d, -c or -t follows forever: use the logcat stream"
        )


def _dumpsys(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) < 2 or argv[1] not in _DUMPSYS_SERVICES:
        bad_arg(argv, f"dumpsys service must be one of {', '.join(sorted(_DUMPSYS_SERVICES))}")
    rest = argv[2:]
    if argv[1] == "battery" and rest:
        bad_arg(argv, "dumpsys battery takes no arguments (they would change state)")
    if len(rest) > 4:
        bad_arg(argv, "too many arguments")
    for arg in rest:
        if arg.lower() in _DUMPSYS_WRITES or not _WORD.fullmatch(arg):
            bad_arg(argv, f"argument {arg!r} is not a read")


def _wm(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) != 2 or argv[1] not in ("size", "density"):
        bad_arg(argv, "only `wm size` and `wm density`, without arguments")


def _point(argv: list[str], xs: str, ys: str, ctx: CommandContext) -> None:
    if not (_NUMBER.fullmatch(xs) and _NUMBER.fullmatch(ys)):
        bad_arg(argv, "coordinates must be non-negative numbers")
    if ctx.screen is None:
        refuse(Rule.SCREEN_UNKNOWN, "the screen size is unknown; input is refused")
    width, height = ctx.screen
    x, y = float(xs), float(ys)
    if not (0 <= x < width and 0 <= y < height):
        refuse(Rule.OUTSIDE_SCREEN, f"point ({xs}, {ys}) is outside the {width}x{height} screen")


def _input(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) < 2:
        bad_arg(argv, "input needs an action")
    action, rest = argv[1], argv[2:]
    if action == "tap":
        if len(rest) != 2:
            bad_arg(argv, "expected `input tap X Y`")
        _point(argv, rest[0], rest[1], ctx)
    elif action == "swipe":
        if len(rest) not in (4, 5):
            bad_arg(argv, "expected `input swipe X1 Y1 X2 Y2 [MS]`")
        _point(argv, rest[0], rest[1], ctx)
        _point(argv, rest[2], rest[3], ctx)
        if len(rest) == 5:
            if not _INT.fullmatch(rest[4]):
                bad_arg(argv, "swipe duration must be whole milliseconds")
            if int(rest[4]) > MAX_SWIPE_MS:
                refuse(Rule.SWIPE_DURATION, f"swipe longer than {MAX_SWIPE_MS} ms")
    elif action == "text":
        if len(rest) != 1:
            bad_arg(argv, "expected `input text TEXT` (one argument)")
        if len(rest[0]) > MAX_INPUT_TEXT:
            refuse(Rule.TEXT_TOO_LONG, f"input text longer than {MAX_INPUT_TEXT} characters")
    elif action == "keyevent":
        keys = [k for k in rest if k != "--longpress"]
        if not keys or len(keys) > MAX_KEYEVENTS or not all(_KEYCODE.fullmatch(k) for k in keys):
            bad_arg(argv, f"expected `input keyevent KEY…` (1 to {MAX_KEYEVENTS} key codes)")
    else:
        bad_arg(argv, "input action must be tap, swipe, text or keyevent")


def _component(
    argv: list[str], value: str, ctx: CommandContext, *, any_package: bool = False
) -> None:
    match = COMPONENT.fullmatch(value)
    if match is None:
        bad_arg(argv, f"{value!r} is not a PACKAGE/CLASS component")
    if not any_package:
        own_package(match["pkg"], ctx)


def _am(argv: list[str], ctx: CommandContext, *, any_activity: bool = False) -> None:
    if len(argv) < 3:
        bad_arg(argv, "expected `am start|force-stop|instrument …`")
    sub, rest = argv[1], argv[2:]
    if sub == "force-stop":
        if len(rest) != 1 or not PACKAGE.fullmatch(rest[0]):
            bad_arg(argv, "expected `am force-stop PACKAGE`")
        own_package(rest[0], ctx)
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
                    _component(argv, value, ctx, any_package=any_activity)
                elif not _WORD.fullmatch(value):
                    bad_arg(argv, f"bad {arg} value")
                i += 2
                continue
            bad_arg(argv, f"am start option {arg!r} is not allowed")
        if component is None:
            bad_arg(argv, "am start needs -n PACKAGE/ACTIVITY of an allowed package")
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
                    bad_arg(argv, f"bad -e {key!r} value")
                i += 3
                continue
            bad_arg(argv, f"am instrument option {arg!r} is not allowed")
        _component(argv, target, ctx)
    else:
        bad_arg(argv, "only am start, force-stop and instrument")


def not_preexisting(pkg: str, ctx: CommandContext) -> None:
    if pkg in ctx.preexisting:
        refuse(
            Rule.PACKAGE_PREEXISTING,
            f"package {pkg!r} was on the device before droidwire installed over it: "
            "its data and its installation are the owner's",
            package=pkg,
        )


def _pm(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) == 3 and argv[1] == "clear":
        own_package(argv[2], ctx)
        not_preexisting(argv[2], ctx)
        return
    if argv[1:3] == ["list", "packages"]:
        # The owner's other apps are not the borrower's business: name one of the run's packages.
        if len(argv) != 4:
            refuse(
                Rule.PACKAGE_SCOPE,
                "pm list packages needs a filter naming one of the run's packages",
            )
        own_package(argv[3], ctx)
        return
    bad_arg(argv, "only `pm clear PACKAGE` and `pm list packages PACKAGE`")


def _screencap(argv: list[str], ctx: CommandContext) -> None:
    if argv[1:] != ["-p"]:
        bad_arg(argv, "only `screencap -p` (to stdout)")


def _uiautomator(argv: list[str], ctx: CommandContext) -> None:
    args = [a for a in argv[2:] if a != "--compressed"]
    if len(argv) < 2 or argv[1] != "dump" or len(args) != 1:
        bad_arg(argv, "expected `uiautomator dump [--compressed] /dev/tty|DROIDWIRE_PATH`")
    if args[0] not in ("/dev/tty", "/dev/stdout"):
        in_workspace(args[0], allow_root=False)


def _ls(argv: list[str], ctx: CommandContext) -> None:
    paths = [a for a in argv[1:] if not a.startswith("-")]
    for flag in (a for a in argv[1:] if a.startswith("-")):
        if not re.fullmatch(r"-[laRhtsd1]{1,6}", flag):
            bad_arg(argv, f"ls option {flag!r} is not allowed")
    if not paths:
        refuse(Rule.PATH_OUTSIDE_WORKSPACE, f"ls needs a path inside {DROIDWIRE_DIR}/")
    for path in paths:
        in_workspace(path, allow_root=True)


def _rm(argv: list[str], ctx: CommandContext) -> None:
    paths = [a for a in argv[1:] if not a.startswith("-")]
    for flag in (a for a in argv[1:] if a.startswith("-")):
        if not re.fullmatch(r"-[rRf]{1,3}", flag):
            bad_arg(argv, f"rm option {flag!r} is not allowed")
    if not paths:
        bad_arg(argv, "rm needs a path")
    for path in paths:
        in_workspace(path, allow_root=False)


def _agent_am(argv: list[str], ctx: CommandContext) -> None:
    """``agent``: ``am start -n`` of any package's activity (launcher apps, settings)."""
    _am(argv, ctx, any_activity=len(argv) > 1 and argv[1] == "start")


def _agent_pm(argv: list[str], ctx: CommandContext) -> None:
    if len(argv) >= 2 and argv[1] == "clear":
        refuse(Rule.WIPE_NOT_ALLOWED, "profile agent never clears an app's data")
    _pm(argv, ctx)


STANDARD: dict[str, _Validator] = {
    "echo": _echo,
    "getprop": _getprop,
    "logcat": validate_logcat,
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


AGENT: dict[str, _Validator] = {**STANDARD, "am": _agent_am, "pm": _agent_pm}

