"""The commands of the simulated device's shell: argv in, Android-shaped text out.

Each command is ``async def name(p: Proc) -> int``. They parse their arguments the way the
real tools do (closely enough for adb, adbutils and droidwire's bridge), print what the real
tools print, and delegate state changes to the device (``device_bridge.sim.device``).
Output formats are Android's (pm, getprop, screencap, logcat, am instrument); the list of
commands is in ``docs/simulated-device.md``.

This module holds the table (:data:`COMMANDS`, :func:`command`, :func:`lookup`) and the
basic tools (echo, getprop, id, cat, grep, ls, rm, mkdir, df, ps, date, nc…); the other
families live in modules of their own, each entered into the table here: logcat
(:mod:`~device_bridge.sim.commands_logcat`), pm/am/cmd/wm/dumpsys
(:mod:`~device_bridge.sim.commands_framework`), input and the screen
(:mod:`~device_bridge.sim.commands_screen`), toybox's text tools
(:mod:`~device_bridge.sim.toybox`) and the system ones (:mod:`~device_bridge.sim.system`).
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import Callable

from device_bridge.sim import commands_framework, commands_logcat, commands_screen, system, toybox
from device_bridge.sim.logbuf import PRIORITIES
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


commands_logcat.register(command)
commands_framework.register(command)
commands_screen.register(command)
toybox.register(command)
system.register(command)
