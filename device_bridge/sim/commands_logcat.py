"""The simulated device's ``logcat``, read from its :mod:`~device_bridge.sim.logbuf`: Android's
options (``-d``, ``-c``, ``-b``, ``-v``, ``-B``, ``-s``, ``-t``/``-T``, ``-m``, ``-e``, ``-g``,
``--pid``) and filter specs, its output formats, and following the buffer live.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from device_bridge.sim.logbuf import (
    BUFFERS,
    DEFAULT_BUFFERS,
    FORMATS,
    LogEntry,
    binary_entry,
    format_entry,
    parse_time_spec,
)
from device_bridge.sim.shell_io import CommandFn, Proc, parse_int

__all__ = ["register"]


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
            n = parse_int(v)
            if n is not None and n > 0:
                tail = n
            elif (ts := parse_time_spec(v, now=device.now())) is not None:
                since = ts
            else:
                return await usage(f"invalid count or time {v!r}")
        elif key in ("-m", "--max-count"):
            v = value()
            n = parse_int(v or "")
            if n is None or n <= 0:
                return await usage("-m needs a positive count")
            max_count = n
        elif key == "--pid":
            v = value()
            n = parse_int(v or "")
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


def register(command: Callable[..., Callable[[CommandFn], CommandFn]]) -> None:
    """Enter these commands into the shell's table (:func:`.commands.command`)."""
    command("logcat")(logcat)
