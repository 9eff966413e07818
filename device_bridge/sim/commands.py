"""The commands of the simulated device's shell: argv in, Android-shaped text out.

Each command is ``async def name(p: Proc) -> int``. They parse their arguments the way the
real tools do (closely enough for adb, adbutils and droidwire's bridge), print what the real
tools print, and delegate state changes to the device (``device_bridge.sim.device``).
Output formats are Android's (pm, getprop, screencap, logcat, am instrument); the list of
commands is in ``docs/simulated-device.md``.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import AsyncIterator, Callable

from device_bridge.sim.logbuf import (
    BUFFERS,
    DEFAULT_BUFFERS,
    FORMATS,
    PRIORITIES,
    LogEntry,
    binary_entry,
    format_entry,
    parse_time_spec,
)
from device_bridge.sim.shell_io import CommandFn, Proc

__all__ = ["COMMANDS", "lookup"]

COMMANDS: dict[str, CommandFn] = {}


def command(*names: str) -> Callable[[CommandFn], CommandFn]:
    def register(fn: CommandFn) -> CommandFn:
        for name in names:
            COMMANDS[name] = fn
        return fn

    return register


def lookup(name: str) -> CommandFn | None:
    return COMMANDS.get(name)


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# -- basics -----------------------------------------------------------------------------------


@command("echo")
async def echo(p: Proc) -> int:
    args = p.argv[1:]
    newline, escapes = True, False
    while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
        flag = args.pop(0)
        newline = newline and "n" not in flag
        escapes = "e" in flag[1:] or (escapes and "E" not in flag)
    text = " ".join(args)
    if escapes:
        text = text.encode().decode("unicode_escape", errors="replace")
    await p.out(text + ("\n" if newline else ""))
    return 0


@command("getprop")
async def getprop(p: Proc) -> int:
    props: dict[str, str] = p.device.props
    if len(p.argv) == 1:
        await p.out("".join(f"[{k}]: [{v}]\n" for k, v in sorted(props.items())))
    else:
        default = p.argv[2] if len(p.argv) > 2 else ""
        await p.out(props.get(p.argv[1], default) + "\n")
    return 0


@command("id")
async def id_(p: Proc) -> int:
    flags = "".join(a[1:] for a in p.argv[1:] if a.startswith("-"))
    if "u" in flags or "g" in flags:
        await p.out(("shell" if "n" in flags else "2000") + "\n")
        return 0
    await p.out(
        "uid=2000(shell) gid=2000(shell) groups=2000(shell),1004(input),1007(log),"
        "1011(adb),1015(sdcard_rw),1028(sdcard_r),3001(net_bt_admin),3002(net_bt),3003(inet) "
        "context=u:r:shell:s0\n"
    )
    return 0


@command("whoami")
async def whoami(p: Proc) -> int:
    await p.out("shell\n")
    return 0


@command("sleep")
async def sleep(p: Proc) -> int:
    try:
        seconds = float(p.argv[1])
        if seconds < 0 or seconds != seconds:
            raise ValueError
    except (IndexError, ValueError):
        await p.err("sleep: invalid time interval\n")
        return 1
    await asyncio.sleep(seconds)
    return 0


@command("log")
async def log(p: Proc) -> int:
    """Android's ``log [-p PRIORITY] [-t TAG] MESSAGE``: write to the main log buffer."""
    args, prio, tag = p.argv[1:], "I", "log"
    while args and args[0] in ("-p", "-t") and len(args) > 1:
        flag, value = args[0], args[1]
        args = args[2:]
        if flag == "-p":
            prio = value[:1].upper() if value[:1].upper() in PRIORITIES else prio
        else:
            tag = value
    p.device.log(prio, tag, " ".join(args), pid=p.device.shell_pid, tid=p.device.shell_pid)
    return 0


@command("cat")
async def cat(p: Proc) -> int:
    code = 0
    if len(p.argv) == 1:
        while chunk := await p.stdin.read(65536):
            await p.stdout.write(chunk)
        return 0
    for name in p.argv[1:]:
        try:
            await p.stdout.write(p.device.files.read(p.path(name)))
        except OSError as exc:
            await p.err(f"cat: {exc}\n")
            code = 1
    return code


@command("grep")
async def grep(p: Proc) -> int:
    args = p.argv[1:]
    invert = ignore = count = quiet = fixed = numbered = False
    while args and args[0].startswith("-") and len(args[0]) > 1:
        for flag in args.pop(0)[1:]:
            if flag == "v":
                invert = True
            elif flag == "i":
                ignore = True
            elif flag == "c":
                count = True
            elif flag == "q":
                quiet = True
            elif flag == "F":
                fixed = True
            elif flag == "n":
                numbered = True
            elif flag != "E":
                await p.err(f"grep: unknown option -- {flag}\n")
                return 2
    if not args:
        await p.err("grep: no pattern\n")
        return 2
    pattern = re.escape(args[0]) if fixed else args[0]
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore else 0)
    except re.error as exc:
        await p.err(f"grep: bad regex: {exc}\n")
        return 2
    data = bytearray()
    if len(args) > 1:
        for name in args[1:]:
            try:
                data += p.device.files.read(p.path(name))
            except OSError as exc:
                await p.err(f"grep: {exc}\n")
    else:
        while chunk := await p.stdin.read(65536):
            data += chunk
    lines = data.decode(errors="replace").splitlines()
    hits = [f"{i}:{ln}" if numbered else ln for i, ln in enumerate(lines, 1)
            if bool(rx.search(ln)) != invert]
    if count:
        await p.out(f"{len(hits)}\n")
    elif not quiet:
        await p.out("".join(h + "\n" for h in hits))
    return 0 if hits else 1


# -- files ------------------------------------------------------------------------------------


def _flags(args: list[str], allowed: str) -> tuple[set[str], list[str], str | None]:
    flags: set[str] = set()
    rest: list[str] = []
    for a in args:
        if a.startswith("-") and len(a) > 1 and not rest:
            for f in a[1:]:
                if f not in allowed:
                    return flags, rest, f
                flags.add(f)
        else:
            rest.append(a)
    return flags, rest, None


def _ls_line(name: str, mode: int, size: int, mtime: int) -> str:
    kind = "d" if mode & 0o40000 else "-"
    perms = "".join(
        ch if mode & bit else "-"
        for ch, bit in zip("rwxrwxrwx", (0o400, 0o200, 0o100, 0o40, 0o20, 0o10, 4, 2, 1), strict=True)
    )
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(mtime))
    return f"{kind}{perms} 1 shell shell {size:>8} {when} {name}\n"


@command("ls")
async def ls(p: Proc) -> int:
    flags, paths, bad = _flags(p.argv[1:], "la1dRh")
    if bad:
        await p.err(f"ls: Unknown option '{bad}'\n")
        return 1
    code = 0
    files = p.device.files
    for i, raw in enumerate(paths or [p.cwd]):
        path = p.path(raw)
        st = files.stat(path)
        if st is None:
            await p.err(f"ls: {raw}: No such file or directory\n")
            code = 1
            continue
        if not files.is_dir(path) or "d" in flags:
            await p.out(_ls_line(raw, st.mode, st.size, st.mtime) if "l" in flags else raw + "\n")
            continue
        try:
            entries = files.listdir(path)
        except OSError as exc:
            await p.err(f"ls: {exc}\n")
            code = 1
            continue
        if len(paths) > 1:
            await p.out(("\n" if i else "") + f"{raw}:\n")
        if "a" in flags:
            parent = files.stat(posixpath.dirname(path.rstrip("/")) or "/") or st
            entries = [(".", st), ("..", parent), *entries]
        else:
            entries = [(n, e) for n, e in entries if not n.startswith(".")]
        if "l" in flags:
            await p.out(f"total {len(entries)}\n")
        for name, est in entries:
            await p.out(_ls_line(name, est.mode, est.size, est.mtime) if "l" in flags else name + "\n")
    return code


@command("rm")
async def rm(p: Proc) -> int:
    flags, paths, bad = _flags(p.argv[1:], "frRv")
    if bad:
        await p.err(f"rm: Unknown option '{bad}'\n")
        return 1
    if not paths and "f" not in flags:
        await p.err("rm: Need 1 argument\n")
        return 1
    code = 0
    for raw in paths:
        try:
            p.device.files.remove(p.path(raw), recursive=bool(flags & {"r", "R"}))
        except FileNotFoundError as exc:
            if "f" not in flags:
                await p.err(f"rm: {exc}\n")
                code = 1
        except OSError as exc:
            await p.err(f"rm: {exc}\n")
            code = 1
    return code


@command("mkdir")
async def mkdir(p: Proc) -> int:
    flags, paths, bad = _flags(p.argv[1:], "p")
    if bad or not paths:
        await p.err("mkdir: Need 1 argument\n" if not bad else f"mkdir: Unknown option '{bad}'\n")
        return 1
    code = 0
    for raw in paths:
        try:
            p.device.files.mkdir(p.path(raw), parents="p" in flags)
        except OSError as exc:
            await p.err(f"mkdir: {exc}\n")
            code = 1
    return code


# -- logcat -----------------------------------------------------------------------------------


def _parse_filters(specs: list[str]) -> tuple[dict[str, int], int | None] | None:
    tags: dict[str, int] = {}
    default: int | None = None
    for spec in specs:
        tag, _, prio = spec.partition(":")
        level = "VDIWEFS".find((prio or "V")[:1].upper())
        if level < 0 or not tag:
            return None
        if tag == "*":
            default = level
        else:
            tags[tag] = level
    return tags, default


_LOGCAT_USAGE = "Usage: logcat [options] [filterspecs]\n"


@command("logcat")
async def logcat(p: Proc) -> int:
    args = p.argv[1:]
    fmt, dump, clear = "threadtime", False, False
    buffers: list[str] = []
    tail: int | None = None
    since: float | None = None
    pid: int | None = None
    silent = False
    binary = False
    max_count: int | None = None
    regex: re.Pattern[str] | None = None
    specs: list[str] = []
    device = p.device
    i = 0

    async def usage(msg: str) -> int:
        await p.err(f"logcat: {msg}\n{_LOGCAT_USAGE}")
        return 1

    def value() -> str | None:
        nonlocal i
        a = args[i]
        if a.startswith("--") and "=" in a:
            return a.split("=", 1)[1]
        if not a.startswith("--") and len(a) > 2:
            return a[2:]
        i += 1
        return args[i] if i < len(args) else None

    while i < len(args):
        a = args[i]
        key = a.split("=", 1)[0] if a.startswith("--") else a[:2]
        if a in ("-c", "--clear"):
            clear = True
        elif a in ("-d", "--dump"):
            dump = True
        elif a in ("-B", "--binary"):
            binary = True
        elif a == "-s":
            silent = True
        elif key in ("-v", "--format"):
            v = value()
            if v is None:
                return await usage("option requires an argument -- v")
            if v in FORMATS:
                fmt = v
            elif v not in ("color", "descriptive", "epoch", "monotonic", "printable", "uid",
                           "usec", "UTC", "year", "zone", "long"):
                return await usage(f"Invalid parameter \"{v}\" to -v")
        elif key in ("-b", "--buffer"):
            v = value()
            if v is None:
                return await usage("option requires an argument -- b")
            for name in v.split(","):
                if name == "all":
                    buffers.extend(BUFFERS)
                elif name == "default":
                    buffers.extend(DEFAULT_BUFFERS)
                elif name in BUFFERS:
                    buffers.append(name)
                else:
                    return await usage(f"unknown buffer {name}")
        elif key in ("-t", "-T"):
            v = value()
            if v is None:
                return await usage(f"option requires an argument -- {key[1]}")
            dump = dump or key == "-t"
            n = _int(v)
            if n is not None and n > 0:
                tail = n
            elif (ts := parse_time_spec(v, now=device.now())) is not None:
                since = ts
            else:
                return await usage(f"invalid count or time {v!r}")
        elif key in ("-m", "--max-count"):
            v = value()
            n = _int(v or "")
            if n is None or n <= 0:
                return await usage("-m needs a positive count")
            max_count = n
        elif key == "--pid":
            v = value()
            n = _int(v or "")
            if n is None:
                return await usage("--pid needs a number")
            pid = n
        elif key in ("-e", "--regex"):
            v = value()
            try:
                regex = re.compile(v or "")
            except re.error:
                return await usage(f"bad regex {v!r}")
        elif a in ("-g", "--buffer-size"):
            for name in buffers or DEFAULT_BUFFERS:
                cap = device.logbuf.capacity // 1024
                used = device.logbuf.size(name) // 1024
                await p.out(
                    f"{name}: ring buffer is {cap} KiB ({used} KiB consumed), "
                    "max entry is 5120 B, max payload is 4068 B\n"
                )
            return 0
        elif a.startswith("-"):
            return await usage(f"unrecognized option '{a}'")
        else:
            specs.append(a)
        i += 1

    chosen = list(dict.fromkeys(buffers)) or list(DEFAULT_BUFFERS)
    if clear:
        device.logbuf.clear(chosen)
        return 0
    env_tags = p.env.get("ANDROID_LOG_TAGS", "").strip().strip("'\"")
    parsed = _parse_filters(specs or env_tags.split())
    if parsed is None:
        return await usage("Invalid filter expression")
    tag_levels, default_level = parsed
    if default_level is None:
        default_level = 6 if silent else 0

    def wanted(e: LogEntry) -> bool:
        if pid is not None and e.pid != pid:
            return False
        if "VDIWEF".index(e.priority) < tag_levels.get(e.tag, default_level):
            return False
        return regex is None or bool(regex.search(e.message))

    seen: set[str] = set()
    printed = 0

    def render(entries: list[LogEntry]) -> bytes:
        nonlocal printed
        out: list[str] = []
        raw = bytearray()
        for e in entries:
            if max_count is not None and printed >= max_count:
                break
            printed += 1
            if binary:  # logger_entry v4 records, no dividers (what `logcat -B` writes)
                raw += binary_entry(e, uid=device.uid_of(e.pid))
                continue
            if e.buffer not in seen:
                seen.add(e.buffer)
                out.append(f"--------- beginning of {e.buffer}\n")
            out.append(format_entry(e, fmt))
        return bytes(raw) if binary else "".join(out).encode()

    logbuf = device.logbuf
    cursor = logbuf.last_seq
    first = [e for e in logbuf.entries(chosen) if wanted(e)]
    if since is not None:
        first = [e for e in first if e.ts >= since]
    if tail is not None:
        first = first[-tail:]
    text = render(first)
    if text:
        await p.stdout.write(text)
    if dump or (max_count is not None and printed >= max_count):
        return 0
    reader = logbuf.add_reader(cursor)
    try:
        while max_count is None or printed < max_count:
            await logbuf.wait_after(cursor)
            fresh = logbuf.entries(chosen, after=cursor)
            cursor = logbuf.last_seq
            text = render([e for e in fresh if wanted(e)])
            if text:
                await p.stdout.write(text)
            logbuf.move_reader(reader, cursor)
    finally:
        logbuf.remove_reader(reader)
    return 0


# -- package manager --------------------------------------------------------------------------


async def _pm(p: Proc, args: list[str]) -> int:
    device = p.device
    if not args:
        await p.err("usage: pm [list|path|install|uninstall|clear] ...\n")
        return 1
    sub, rest = args[0], args[1:]
    if sub == "list" and rest[:1] == ["packages"]:
        flags = [a for a in rest[1:] if a.startswith("-")]
        filters = [a for a in rest[1:] if not a.startswith("-")]
        lines = []
        for name, path, third in device.package_listing():
            if ("-3" in flags and not third) or ("-s" in flags and third):
                continue
            if filters and filters[0] not in name:
                continue
            lines.append(f"package:{path}={name}\n" if "-f" in flags else f"package:{name}\n")
        await p.out("".join(lines))
        return 0
    if sub == "list" and rest[:1] == ["instrumentation"]:
        out = [
            f"instrumentation:{name}/{inst.pkg.runner} (target={inst.pkg.target_package})\n"
            for name, inst in sorted(device.packages.items())
            if inst.pkg.kind == "test"
        ]
        await p.out("".join(out))
        return 0
    if sub == "resolve-activity":
        # ``cmd package resolve-activity --brief [-c CATEGORY] PKG``: the launcher activity.
        name = rest[-1] if rest else ""
        inst = device.packages.get(name)
        if inst is None or inst.pkg.kind != "app":
            await p.out("No activity found\n")
            return 0
        await p.out(
            "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=false\n"
            f"{name}/.MainActivity\n"
        )
        return 0
    if sub == "path":
        name = rest[-1] if rest else ""
        for pkg, path, _third in device.package_listing():
            if pkg == name:
                await p.out(f"package:{path}\n")
                return 0
        return 1
    if sub in ("install-create", "install-write", "install-commit", "install-abandon"):
        return await system.pm_session(p, sub, rest)
    if sub == "install":
        opts: set[str] = set()
        size: int | None = None
        apk: str | None = None
        j = 0
        while j < len(rest):
            a = rest[j]
            if a in ("-S", "-i", "--user", "--install-reason", "-p"):
                if j + 1 >= len(rest):
                    await p.err(f"Error: option {a} needs a value\n")
                    return 1
                if a == "-S":
                    size = _int(rest[j + 1])
                    if size is None or size < 0:
                        await p.err(f"Error: bad size {rest[j + 1]}\n")
                        return 1
                j += 2
                continue
            if a.startswith("-"):
                opts.add(a)
            else:
                apk = a
            j += 1
        if size is not None:
            if size > device.files.quota:
                await p.out("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n")
                return 1
            data = bytearray()
            while len(data) < size:
                chunk = await p.stdin.read(min(65536, size - len(data)))
                if not chunk:
                    break
                data += chunk
            if len(data) < size:
                await p.out("Failure [INSTALL_FAILED_INVALID_APK: short read of streamed APK]\n")
                return 1
            source = "stdin"
        elif apk is None:
            await p.err("Error: APK content must be streamed\n")
            return 1
        else:
            try:
                data = bytearray(device.files.read(p.path(apk)))
            except OSError:
                await p.err(
                    f"Error: Unable to open file: {apk}\n"
                    "Consider using a file under /data/local/tmp/\n"
                )
                return 1
            source = p.path(apk)
        result = device.install(
            bytes(data), source=source, replace="-r" in opts, allow_downgrade="-d" in opts
        )
        await p.out(result + "\n")
        return 0 if result == "Success" else 1
    if sub == "uninstall":
        names = [a for a in rest if not a.startswith("-")]
        if not names:
            await p.err("Error: package name not specified\n")
            return 1
        ok = device.uninstall(names[-1])
        await p.out("Success\n" if ok else "Failure [DELETE_FAILED_INTERNAL_ERROR]\n")
        return 0 if ok else 1
    if sub == "clear":
        names = [a for a in rest if not a.startswith("-")]
        ok = bool(names) and device.clear_data(names[-1])
        await p.out("Success\n" if ok else "Failed\n")
        return 0 if ok else 1
    await p.err(f"Unknown command: {sub}\n")
    return 1


@command("pm")
async def pm(p: Proc) -> int:
    return await _pm(p, p.argv[1:])


# -- activity manager -------------------------------------------------------------------------


_AM_VALUE_OPTS = {"-a", "-c", "-d", "-t", "-f", "--user", "-e", "--es", "--ei", "--ez", "-P",
                  "--start-profiler", "--sampling", "-R", "--activity-brought-to-front"}


async def _am_start(p: Proc, args: list[str]) -> int:
    component: str | None = None
    wait = "-W" in args
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-n" and j + 1 < len(args):
            component = args[j + 1]
            j += 2
        elif a in ("--es", "--ei", "--ez"):
            j += 3
        elif a in _AM_VALUE_OPTS:
            j += 2
        elif a.startswith("-"):
            j += 1
        else:
            component = component or a
            j += 1
    if not component or "/" not in component:
        await p.err("Error: Activity not started, unable to resolve Intent\n")
        return 1
    pkg, _, activity = component.partition("/")
    shown = f"{pkg}/{activity}"
    await p.out(f"Starting: Intent {{ cmp={shown} }}\n")
    ok, total_ms = p.device.start_activity(pkg, activity)
    if not ok:
        full = activity if not activity.startswith(".") else pkg + activity
        await p.err(f"Error type 3\nError: Activity class {{{pkg}/{full}}} does not exist.\n")
        return 1
    if wait:
        await p.out(
            f"Status: ok\nLaunchState: COLD\nActivity: {shown}\nTotalTime: {total_ms}\n"
            f"WaitTime: {total_ms + 4}\nComplete\n"
        )
    return 0


async def _am_instrument(p: Proc, args: list[str]) -> int:
    raw = wait = False
    extras: dict[str, str] = {}
    component: str | None = None
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-r":
            raw = True
        elif a == "-w":
            wait = True
        elif a == "-e":
            if j + 2 >= len(args):
                await p.err("Error: -e needs a key and a value\n")
                return 1
            extras[args[j + 1]] = args[j + 2]
            j += 2
        elif a in ("--user", "-p", "--abi"):
            j += 1
        elif a.startswith("-"):
            pass
        else:
            component = a
        j += 1
    if component is None or "/" not in component:
        await p.err("Error: Bad component name: " + (component or "") + "\n")
        return 1
    lines = p.device.instrument(component, class_filter=extras.get("class"))
    if not wait:
        task = asyncio.create_task(_drain(lines))
        p.device.keep_task(task)
        return 0
    in_stream = False  # inside a multi-line "stream=" value
    code = 0
    async for fd, line in lines:
        if fd == 2:
            await p.err(line)
            code = 1
            continue
        if raw:
            await p.out(line)
            continue
        # Without -r, am prints only the "stream" texts of the status and result bundles.
        if line.startswith(("INSTRUMENTATION_STATUS: stream=", "INSTRUMENTATION_RESULT: stream=")):
            in_stream = True
            await p.out(line.split("=", 1)[1])
        elif line.startswith("INSTRUMENTATION_"):
            in_stream = False
            if line.startswith("INSTRUMENTATION_RESULT: shortMsg="):
                await p.out(line.replace("INSTRUMENTATION_RESULT: shortMsg=", "Error in ", 1))
        elif in_stream:
            await p.out(line)
    return code


async def _drain(lines: AsyncIterator[tuple[int, str]]) -> None:
    async for _ in lines:
        pass


async def _am(p: Proc, args: list[str]) -> int:
    if not args:
        await p.err("usage: am [start|force-stop|instrument] ...\n")
        return 1
    sub, rest = args[0], args[1:]
    if sub in ("start", "start-activity"):
        return await _am_start(p, rest)
    if sub in ("force-stop", "kill"):
        names = [a for a in rest if not a.startswith("-")]
        if not names:
            await p.err(f"Error: {sub} needs a package name\n")
            return 1
        p.device.force_stop(names[-1])
        return 0
    if sub == "instrument":
        return await _am_instrument(p, rest)
    await p.err(f"Error: Unknown command: {sub}\n")
    return 1


@command("am")
async def am(p: Proc) -> int:
    return await _am(p, p.argv[1:])


@command("cmd")
async def cmd(p: Proc) -> int:
    if len(p.argv) < 2:
        await p.err("cmd: No service specified; use -l to list all services\n")
        return 20
    service, rest = p.argv[1], p.argv[2:]
    if service == "package":
        return await _pm(p, rest)
    if service == "activity":
        return await _am(p, rest)
    if service == "window":
        return await _wm(p, rest)
    if service == "settings":
        return await system.settings_cmd(p, rest)
    if service == "-l":
        await p.out("Currently running services:\n  activity\n  package\n  window\n")
        return 0
    await p.err(f"cmd: Can't find service: {service}\n")
    return 20


@command("df")
async def df(p: Proc) -> int:
    """toybox ``df [-k] [PATH]``: /data is the simulated phone's file store, sized by its quota
    (what it really accepts), so a health reading sees free space shrink as files arrive."""
    files = p.device.files
    total_k = files.quota // 1024
    used_k = (files.used + 1023) // 1024
    free_k = max(total_k - used_k, 0)
    pct = (used_k * 100 + total_k - 1) // total_k if total_k else 0
    await p.out(
        "Filesystem     1K-blocks    Used Available Use% Mounted on\n"
        f"/dev/block/dm-5 {total_k:>9} {used_k:>7} {free_k:>9} {pct:>3}% /data\n"
    )
    return 0


# -- window manager, dumpsys, input, screencap --------------------------------------------


async def _wm(p: Proc, args: list[str]) -> int:
    prof = p.device.profile
    if args == ["size"]:
        await p.out(f"Physical size: {prof.width}x{prof.height}\n")
        return 0
    if args == ["density"]:
        await p.out(f"Physical density: {prof.density}\n")
        return 0
    if args[:1] in (["size"], ["density"]):
        await p.err("Error: changing the display is not supported by the simulated device\n")
        return 1
    await p.err(f"Error: unknown command '{' '.join(args)}'\n")
    return 1


@command("wm")
async def wm(p: Proc) -> int:
    return await _wm(p, p.argv[1:])


@command("dumpsys")
async def dumpsys(p: Proc) -> int:
    args = p.argv[1:]
    if not args:
        await p.err("dumpsys: a service name is required by the simulated device\n")
        return 1
    text = p.device.dumpsys(args[0], args[1:])
    if text is None:
        await p.out(f"Can't find service: {args[0]}\n")
        return 0
    await p.out(text)
    return 0


_KEYCODES = {
    "HOME": 3, "BACK": 4, "CALL": 5, "DPAD_UP": 19, "DPAD_DOWN": 20, "DPAD_LEFT": 21,
    "DPAD_RIGHT": 22, "DPAD_CENTER": 23, "VOLUME_UP": 24, "VOLUME_DOWN": 25, "POWER": 26,
    "CAMERA": 27, "TAB": 61, "SPACE": 62, "ENTER": 66, "DEL": 67, "MENU": 82, "SEARCH": 84,
    "MEDIA_PLAY_PAUSE": 85, "PAGE_UP": 92, "PAGE_DOWN": 93, "ESCAPE": 111,
    "FORWARD_DEL": 112, "MOVE_HOME": 122, "MOVE_END": 123, "APP_SWITCH": 187, "WAKEUP": 224,
    "SLEEP": 223,
}
_INPUT_SOURCES = {"touchscreen", "touchpad", "keyboard", "mouse", "dpad", "gamepad", "stylus",
                  "trackball", "joystick", "touchnavigation", "rotaryencoder"}


@command("input")
async def input_(p: Proc) -> int:
    args = p.argv[1:]
    if args and args[0] in _INPUT_SOURCES:
        args = args[1:]
    if not args:
        await p.err("Usage: input [<source>] <command> [<arg>...]\n")
        return 1
    sub, rest = args[0], args[1:]
    device = p.device
    prof = device.profile

    async def bad(msg: str) -> int:
        await p.err(f"Error: {msg}\n")
        return 1

    def point(xs: str, ys: str) -> tuple[float, float] | None:
        try:
            x, y = float(xs), float(ys)
        except ValueError:
            return None
        if not (0 <= x < prof.width and 0 <= y < prof.height):
            return None
        return x, y

    if sub == "tap":
        if len(rest) != 2:
            return await bad("Invalid arguments for command: tap")
        pt = point(*rest)
        if pt is None:
            return await bad(f"coordinates ({rest[0]}, {rest[1]}) are not on the "
                             f"{prof.width}x{prof.height} screen")
        device.input_event("tap", {"x": pt[0], "y": pt[1]})
        return 0
    if sub in ("swipe", "draganddrop"):
        if len(rest) not in (4, 5):
            return await bad(f"Invalid arguments for command: {sub}")
        a, b = point(rest[0], rest[1]), point(rest[2], rest[3])
        if a is None or b is None:
            return await bad(f"swipe ends must be on the {prof.width}x{prof.height} screen")
        duration = _int(rest[4]) if len(rest) == 5 else 300
        if duration is None or duration < 0:
            return await bad(f"bad duration {rest[4]}")
        device.input_event(sub, {"x1": a[0], "y1": a[1], "x2": b[0], "y2": b[1], "ms": duration})
        return 0
    if sub == "text":
        if len(rest) != 1:
            return await bad("Invalid arguments for command: text")
        device.input_event("text", {"text": rest[0].replace("%s", " ")})
        return 0
    if sub in ("keyevent", "press"):
        keys = [a for a in rest if a not in ("--longpress", "--doubletap")] or (
            ["DPAD_CENTER"] if sub == "press" else []
        )
        if not keys:
            return await bad("Invalid arguments for command: keyevent")
        codes = []
        for k in keys:
            name = k.removeprefix("KEYCODE_")
            code = _int(k) if k.isdigit() else _KEYCODES.get(name)
            if code is None or not 0 <= code <= 300:
                return await bad(f"unknown keycode {k}")
            codes.append(code)
        for code in codes:
            device.input_event("keyevent", {"code": code})
        return 0
    await p.err(f"Error: Unknown command: {sub}\n")
    return 1


@command("screencap")
async def screencap(p: Proc) -> int:
    args = p.argv[1:]
    png = False
    target: str | None = None
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-p":
            png = True
        elif a in ("-d", "-a"):
            j += 1
        elif a.startswith("-"):
            await p.err(f"screencap: unknown option {a}\n")
            return 1
        else:
            target = a
        j += 1
    if target is not None and target.endswith(".png"):
        png = True
    # Encoding takes ~0.1 s: off the loop, so other streams and devices keep moving.
    data = await asyncio.to_thread(p.device.screenshot_of(p.device.screen(), png=png))
    if target is None:
        await p.stdout.write(data)
        return 0
    try:
        p.device.files.write(p.path(target), data)
    except OSError as exc:
        await p.err(f"Error opening file: {exc}\n")
        return 1
    return 0


@command("screenrecord")
async def screenrecord(p: Proc) -> int:
    """``screenrecord --output-format=h264 [--size WxH] [--bit-rate N] [--time-limit S] -``:
    the screen as raw H.264 on stdout (device_bridge/sim/video.py). Only stdout output, as
    the simulated phone has no muxer; a file target is refused."""
    from device_bridge.sim import screen as sim_screen
    from device_bridge.sim import video

    prof = p.device.profile
    size = (prof.width * 360 // max(prof.width, prof.height) * 2,
            prof.height * 360 // max(prof.width, prof.height) * 2)
    bit_rate, limit, fmt, target = 2_000_000, 180.0, "mp4", None
    for a in p.argv[1:]:
        key, _, value = a.partition("=")
        try:
            if key == "--output-format":
                fmt = value
            elif key == "--size":
                w, _, h = value.partition("x")
                size = (int(w), int(h))
            elif key == "--bit-rate":
                bit_rate = int(value)
            elif key == "--time-limit":
                limit = min(float(value), 180.0)
            elif key in ("--bugreport", "--verbose"):
                pass
            elif a.startswith("-") and a != "-":
                await p.err(f"Unknown option {a}\n")
                return 2
            else:
                target = a
        except ValueError:
            await p.err(f"Bad value in {a}\n")
            return 2
    if fmt != "h264" or target != "-":
        await p.err("the simulated screenrecord writes --output-format=h264 to stdout (-) only\n")
        return 1
    if not (16 <= size[0] <= 4096 and 16 <= size[1] <= 4096) or not video.available():
        await p.err("Unable to get output buffers (err=-38)\n")
        return 1
    encoder = video.H264Encoder(size[0], size[1], bit_rate=bit_rate)
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    interval = 1.0 / video.FPS
    try:
        while loop.time() < end:
            started = loop.time()
            image = sim_screen.picture(p.device.screen())
            data = await asyncio.to_thread(encoder.encode, image)
            if data:
                await p.stdout.write(data)
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))
    except (ConnectionError, OSError, EOFError):
        return 0  # the host stopped reading
    return 0


@command("uiautomator")
async def uiautomator(p: Proc) -> int:
    """``uiautomator dump [--compressed] [FILE]``: the window hierarchy as XML."""
    args = [a for a in p.argv[1:] if a not in ("--compressed", "--windows")]
    if not args or args[0] != "dump" or len(args) > 2:
        await p.err("Usage: uiautomator dump [--compressed] [file]\n")
        return 1
    target = args[1] if len(args) == 2 else "/sdcard/window_dump.xml"
    xml = p.device.ui_xml()
    if target in ("/dev/tty", "/dev/stdout"):
        await p.out(xml)
    else:
        try:
            p.device.files.write(p.path(target), xml.encode())
        except OSError as exc:
            await p.err(f"ERROR: could not write {target}: {exc}\n")
            return 1
    # (sic: the real tool's spelling)
    await p.out(f"UI hierchary dumped to: {target}\n")
    return 0


# -- processes and time -----------------------------------------------------------------------


@command("pidof")
async def pidof(p: Proc) -> int:
    pids = [str(p.device.pid_of(name)) for name in p.argv[1:] if p.device.pid_of(name)]
    if pids:
        await p.out(" ".join(pids) + "\n")
    return 0 if pids else 1


@command("ps")
async def ps(p: Proc) -> int:
    """toybox ``ps`` (``-A`` and column options are accepted; the columns are fixed)."""
    names = [a for a in p.argv[1:] if not a.startswith("-")]
    rows = ["USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME"]
    for user, pid, name in p.device.process_table():
        if names and name not in names:
            continue
        rows.append(f"{user:<12} {pid:>5} {1 if pid < 600 else 600:>5} 14682648 102400 "
                    f"do_epoll_wait       0 S {name}")
    await p.out("\n".join(rows) + "\n")
    return 0 if len(rows) > 1 or not names else 1


@command("date")
async def date(p: Proc) -> int:
    now = time.gmtime(p.device.now())
    fmt = next((a[1:] for a in p.argv[1:] if a.startswith("+")), "%a %b %d %H:%M:%S UTC %Y")
    await p.out(time.strftime(fmt.replace("%N", "000000000"), now) + "\n")
    return 0


# -- network ----------------------------------------------------------------------------------


@command("nc", "netcat")
async def nc(p: Proc) -> int:
    """toybox ``nc HOST PORT``: connect on the phone's own loopback (device_bridge.sim.net).

    Standard input goes to the socket (its end does not close the connection, as with
    toybox), what comes back goes to standard output until the peer closes. Only the phone's
    own addresses are reachable: the simulated phone has no other network.
    """
    args = [a for a in p.argv[1:]]
    rest: list[str] = []
    j = 0
    while j < len(args):
        if args[j] in ("-q", "-w", "-W", "-s") and j + 1 < len(args):
            j += 2
            continue
        if args[j].startswith("-"):
            await p.err(f"nc: option {args[j]} is not supported by the simulated device\n")
            return 1
        rest.append(args[j])
        j += 1
    if len(rest) != 2:
        await p.err("usage: nc HOST PORT\n")
        return 1
    host, port = rest
    sock = p.device.net.connect(f"tcp:{host}:{port}")
    if sock is None:
        await p.err("nc: connect: Connection refused\n")
        return 1

    async def upstream() -> None:
        while chunk := await p.stdin.read(65536):
            try:
                await sock.write(chunk)
            except (ConnectionError, BrokenPipeError):
                return

    feeder = asyncio.ensure_future(upstream())
    try:
        while data := await sock.read():
            await p.stdout.write(data)
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await sock.close()
    return 0


from device_bridge.sim import system, toybox  # noqa: E402 (registers printf, settings…)

toybox.register(command)
system.register(command)
