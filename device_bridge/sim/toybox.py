"""toybox text tools a script on a phone expects: printf, uname, pwd, stat, md5sum/sha*sum,
cut, head, tail, wc, sort, sed (basics). Registered into :data:`commands.COMMANDS`.

Each takes files or standard input as toybox does, prints toybox's messages, and keeps what it
reads bounded (a file is read whole, but files are bounded by the device's storage quota and
standard input by :data:`MAX_INPUT`).
"""

from __future__ import annotations

import hashlib
import re
import stat as stat_mod
import time
from collections.abc import Callable

from device_bridge.sim.files import FileStat
from device_bridge.sim.shell_io import Proc

__all__ = ["MAX_INPUT", "register"]

MAX_INPUT = 64 * 1024 * 1024  # bytes a filter reads from standard input
MAX_FIELD = 4096  # printf field width / precision


async def _read_stdin(p: Proc) -> bytes:
    data = bytearray()
    while chunk := await p.stdin.read(65536):
        data += chunk
        if len(data) > MAX_INPUT:
            raise OSError("standard input too large for the simulated device")
    return bytes(data)


async def _inputs(p: Proc, names: list[str], tool: str) -> tuple[list[tuple[str, bytes]], int]:
    """(name, bytes) of each file operand (``-`` or none: standard input); status 1 if any
    could not be read (already reported)."""
    out: list[tuple[str, bytes]] = []
    code = 0
    for name in names or ["-"]:
        if name == "-":
            out.append(("-", await _read_stdin(p)))
            continue
        try:
            out.append((name, p.device.files.read(p.path(name))))
        except OSError as exc:
            await p.err(f"{tool}: {exc}\n")
            code = 1
    return out, code


def _lines(data: bytes) -> list[str]:
    return data.decode(errors="replace").splitlines()


# -- printf -----------------------------------------------------------------------------------

_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?([diouxXeEfgGcsb%])")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "e": "\x1b", '"': '"', "'": "'"}


def _unescape(text: str) -> tuple[str, bool]:
    """Backslash escapes of printf's format (and %b); True when ``\\c`` stops the output."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "c":
                return "".join(out), True
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            m = re.match(r"0?([0-7]{1,3})", text[i + 1 :])
            if m:
                out.append(chr(int(m.group(1), 8)))
                i += 1 + m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out), False


def _number(arg: str) -> int:
    if arg[:1] in ("'", '"') and len(arg) > 1:
        return ord(arg[1])
    return int(arg, 0) if arg else 0


async def printf(p: Proc) -> int:
    if len(p.argv) < 2:
        await p.err("printf: Needs 1 argument\n")
        return 1
    fmt, args = p.argv[1], p.argv[2:]
    out: list[str] = []
    code = 0
    while True:
        used = 0
        pos = 0
        stop = False
        for m in _SPEC.finditer(fmt):
            text, stop = _unescape(fmt[pos : m.start()])
            out.append(text)
            pos = m.end()
            if stop:
                break
            flags, width, prec, conv = m.groups()
            if conv == "%":
                out.append("%")
                continue

            def take(args: list[str] = args) -> str:
                nonlocal used
                used += 1
                return args[used - 1] if used <= len(args) else ""

            try:
                if width == "*":
                    width = str(_number(take() or "0"))
                if prec == "*":
                    prec = str(_number(take() or "0"))
            except ValueError:
                width = prec = "0"
            if abs(int(width or 0)) > MAX_FIELD or int(prec or 0) > MAX_FIELD:
                await p.err(f"printf: field width or precision over {MAX_FIELD}\n")
                return 1
            arg = take()
            spec = "%" + flags + (width or "") + (f".{prec}" if prec is not None else "")
            try:
                if conv in "diouxX":
                    value = _number(arg)
                    out.append((spec + ("d" if conv in "iu" else conv)) % value)
                elif conv in "eEfgG":
                    out.append((spec + conv) % float(arg or 0))
                elif conv == "c":
                    out.append((spec + "s") % arg[:1])
                elif conv == "b":
                    text, stop = _unescape(arg)
                    out.append((spec + "s") % text)
                else:
                    out.append((spec + "s") % arg)
            except ValueError:
                await p.err(f"printf: invalid number '{arg}'\n")
                out.append((spec + "d") % 0 if conv in "diouxX" else "0")
                code = 1
            if stop:
                break
        if not stop:
            text, stop = _unescape(fmt[pos:])
            out.append(text)
        # The format is reused while arguments are left (and it consumed some).
        if stop or used == 0 or used >= len(args):
            break
        args = args[used:]
    await p.out("".join(out))
    return code


# -- identity -------------------------------------------------------------------------------

_MACHINE = {"arm64-v8a": "aarch64", "armeabi-v7a": "armv8l", "x86_64": "x86_64", "x86": "i686"}
_KERNEL = {34: "6.1.25-android14-11-g0c1e2f3", 33: "5.15.78-android13-8-g4b9f3a1",
           31: "5.10.66-android12-9-g1a2b3c4", 30: "5.4.61-android11-0-g5d6e7f8",
           29: "4.14.150-g1f2e3d4", 28: "4.9.112-g9a8b7c6"}


def kernel_release(sdk: int) -> str:
    best = max((k for k in _KERNEL if k <= sdk), default=28)
    return _KERNEL[best]


def kernel_version_line(p: Proc) -> str:
    return "#1 SMP PREEMPT Thu Jan 11 00:00:00 UTC 2024"


async def uname(p: Proc) -> int:
    prof = p.device.profile
    fields = {
        "s": "Linux", "n": "localhost", "r": kernel_release(prof.sdk),
        "v": kernel_version_line(p), "m": _MACHINE.get(prof.abi, prof.abi), "o": "Toybox",
    }
    flags = "".join(a[1:] for a in p.argv[1:] if a.startswith("-"))
    if any(a for a in p.argv[1:] if not a.startswith("-")):
        await p.err("uname: Unknown option\n")
        return 1
    if "a" in flags:
        flags = "snrvmo"
    chosen = [fields[f] for f in "snrvmo" if f in flags] or [fields["s"]]
    await p.out(" ".join(chosen) + "\n")
    return 0


async def pwd(p: Proc) -> int:
    await p.out(p.cwd + "\n")
    return 0


# -- stat and checksums -----------------------------------------------------------------------


def _when(t: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S.000000000 +0000", time.gmtime(t))


def _stat_format(fmt: str, name: str, st: FileStat, kind: str) -> str:
    """toybox ``stat -c FORMAT`` for one file."""
    perms = stat_mod.S_IMODE(st.mode)
    values = {
        "s": str(st.size), "n": name, "N": f"'{name}'", "a": f"{perms:o}",
        "A": stat_mod.filemode(st.mode), "f": f"{st.mode:x}", "F": kind, "u": "2000",
        "g": "2000", "U": "shell", "G": "shell", "i": "1", "h": "1",
        "b": str((st.size + 511) // 512), "B": "512", "o": "4096", "X": str(st.mtime),
        "Y": str(st.mtime), "Z": str(st.mtime), "x": _when(st.mtime), "y": _when(st.mtime),
        "z": _when(st.mtime), "%": "%",
    }
    return re.sub(r"%(.)", lambda m: values.get(m.group(1), m.group(0)), fmt)


async def stat(p: Proc) -> int:
    args = p.argv[1:]
    fmt: str | None = None
    names: list[str] = []
    j = 0
    while j < len(args):
        a = args[j]
        if a in ("-c", "--format") and j + 1 < len(args):
            fmt, j = args[j + 1], j + 2
            continue
        if a.startswith("-c") and len(a) > 2:
            fmt = a[2:]
        elif a in ("-L", "-t"):
            pass
        elif a.startswith("-"):
            await p.err(f"stat: Unknown option '{a}'\n")
            return 1
        else:
            names.append(a)
        j += 1
    if not names:
        await p.err("stat: Needs 1 argument\n")
        return 1
    code = 0
    for name in names:
        try:
            st = p.device.files.stat(p.path(name))
        except OSError:
            st = None
        if st is None:
            await p.err(f"stat: '{name}': No such file or directory\n")
            code = 1
            continue
        perms = stat_mod.S_IMODE(st.mode)
        kind = "directory" if stat_mod.S_ISDIR(st.mode) else (
            "regular empty file" if st.size == 0 else "regular file")
        if fmt is not None:
            out = _stat_format(fmt, name, st, kind)
            await p.out(out + "\n")
            continue
        await p.out(
            f"  File: {name}\n"
            f"  Size: {st.size}\t Blocks: {(st.size + 511) // 512}\t IO Blocks: 4096\t{kind}\n"
            f"Device: fd00h/64768d\t Inode: 1\t Links: 1\t Device type: 0,0\n"
            f"Access: ({perms:04o}/{stat_mod.filemode(st.mode)})\tUid: ( 2000/   shell)\t"
            f"Gid: ( 2000/   shell)\n"
            f"Access: {_when(st.mtime)}\nModify: {_when(st.mtime)}\nChange: {_when(st.mtime)}\n"
        )
    return code


def _hasher(name: str) -> Callable[[Proc], object]:
    async def run(p: Proc) -> int:
        names = [a for a in p.argv[1:] if not a.startswith("-") or a == "-"]
        inputs, code = await _inputs(p, names, name)
        for fname, data in inputs:
            digest = hashlib.new(name.removesuffix("sum"), data, usedforsecurity=False)
            await p.out(f"{digest.hexdigest()}  {fname}\n")
        return code

    return run


# -- line filters -----------------------------------------------------------------------------


def _ranges(spec: str) -> list[tuple[int, int]] | None:
    out: list[tuple[int, int]] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d*)(-?)(\d*)", part)
        if not m or not (m.group(1) or m.group(3)):
            return None
        lo = int(m.group(1)) if m.group(1) else 1
        hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else 1 << 30)
        if lo < 1 or hi < lo:
            return None
        out.append((lo, hi))
    return out


async def cut(p: Proc) -> int:
    args = p.argv[1:]
    delim, fields, chars = "\t", None, None
    names: list[str] = []
    j = 0
    while j < len(args):
        a = args[j]
        for flag in ("-d", "-f", "-c", "-b"):
            if a.startswith(flag):
                value = a[2:] if len(a) > 2 else (args[j + 1] if j + 1 < len(args) else None)
                if len(a) == 2:
                    j += 1
                if value is None:
                    await p.err(f"cut: option {flag} needs a value\n")
                    return 1
                if flag == "-d":
                    delim = value[:1] or "\t"
                elif flag == "-f":
                    fields = _ranges(value)
                else:
                    chars = _ranges(value)
                break
        else:
            names.append(a)
        j += 1
    spans = fields if fields is not None else chars
    if spans is None:
        await p.err("cut: Needs -fcb\n")
        return 1
    inputs, code = await _inputs(p, names, "cut")
    out: list[str] = []
    for _, data in inputs:
        for line in _lines(data):
            if fields is not None:
                parts = line.split(delim)
                if len(parts) == 1:
                    out.append(line + "\n")
                    continue
                keep = [x for i, x in enumerate(parts, 1) if any(lo <= i <= hi for lo, hi in spans)]
                out.append(delim.join(keep) + "\n")
            else:
                out.append("".join(ch for i, ch in enumerate(line, 1)
                                   if any(lo <= i <= hi for lo, hi in spans)) + "\n")
    await p.out("".join(out))
    return code


def _count_opt(args: list[str]) -> tuple[str | None, list[str], str | None]:
    """``-n N``, ``-nN``, ``-N`` (and ``-c N``): (count text, other args, unit 'n'/'c')."""
    count: str | None = None
    unit = "n"
    rest: list[str] = []
    j = 0
    while j < len(args):
        a = args[j]
        if a in ("-n", "-c") and j + 1 < len(args):
            count, unit = args[j + 1], a[1]
            j += 2
            continue
        if re.fullmatch(r"-[nc][+-]?\d+", a):
            count, unit = a[2:], a[1]
        elif re.fullmatch(r"-\d+", a):
            count = a[1:]
        else:
            rest.append(a)
        j += 1
    return count, rest, unit


async def head(p: Proc) -> int:
    count, names, unit = _count_opt(p.argv[1:])
    try:
        n = int(count) if count is not None else 10
    except ValueError:
        await p.err(f"head: invalid number '{count}'\n")
        return 1
    inputs, code = await _inputs(p, names, "head")
    for _, data in inputs:
        if unit == "c":
            await p.stdout.write(data[:n])  # a negative count: all but the last -n
        else:
            await p.stdout.write(b"".join(data.splitlines(keepends=True)[:n]))
    return code


async def tail(p: Proc) -> int:
    args = [a for a in p.argv[1:] if a != "-f"]
    count, names, unit = _count_opt(args)
    count = count or "10"
    from_start = count.startswith("+")
    try:
        n = int(count.lstrip("+-"))
    except ValueError:
        await p.err(f"tail: invalid number '{count}'\n")
        return 1
    inputs, code = await _inputs(p, names, "tail")
    for _, data in inputs:
        items: list[bytes] | bytes = data if unit == "c" else data.splitlines(keepends=True)
        if from_start:
            chosen = items[max(n - 1, 0):]
        else:
            chosen = items[len(items) - n:] if n else items[:0]
        await p.stdout.write(chosen if isinstance(chosen, bytes) else b"".join(chosen))
    return code


async def wc(p: Proc) -> int:
    flags = "".join(a[1:] for a in p.argv[1:] if a.startswith("-") and a != "-")
    names = [a for a in p.argv[1:] if not a.startswith("-") or a == "-"]
    inputs, code = await _inputs(p, names, "wc")
    chosen = [f for f in "lwc" if f in flags.replace("m", "c")] or ["l", "w", "c"]
    for name, data in inputs:
        counts = {"l": data.count(b"\n"), "w": len(data.split()), "c": len(data)}
        cols = [str(counts[f]) for f in chosen]
        if len(chosen) > 1:
            cols = [c.rjust(7) for c in cols]
        suffix = f" {name}" if names and name != "-" else ""
        await p.out(" ".join(cols) + suffix + "\n")
    return code


async def sort(p: Proc) -> int:
    flags = "".join(a[1:] for a in p.argv[1:] if a.startswith("-") and a != "-")
    names = [a for a in p.argv[1:] if not a.startswith("-") or a == "-"]
    inputs, code = await _inputs(p, names, "sort")
    lines = [line for _, data in inputs for line in _lines(data)]

    def numeric(line: str) -> tuple[float, str]:
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", line)
        return (float(m.group(1)) if m else 0.0, line)

    if "n" in flags:
        lines.sort(key=numeric, reverse="r" in flags)
    else:
        lines.sort(key=str.lower if "f" in flags else None, reverse="r" in flags)
    if "u" in flags:
        lines = list(dict.fromkeys(lines))
    await p.out("".join(line + "\n" for line in lines))
    return code


# -- sed (basics) -----------------------------------------------------------------------------


class _SedError(ValueError):
    pass


def _sed_regex(text: str, extended: bool, flags: int = 0) -> re.Pattern[str]:
    if not extended:  # BRE: \( \) \{ \} \+ \? \| are the operators; bare ones are literal
        out: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in "(){}+?|":
                out.append(text[i + 1])
                i += 2
                continue
            out.append("\\" + c if c in "(){}+?|" else c)
            i += 1
        text = "".join(out)
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise _SedError(f"bad regex '{text}': {exc}") from None


def _split_delim(text: str, delim: str, count: int) -> tuple[list[str], str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text) and len(parts) < count:
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i + 1] if text[i + 1] == delim else c + text[i + 1])
            i += 2
            continue
        if c == delim:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if len(parts) < count:
        raise _SedError("unterminated command")
    return parts, text[i:]


def _parse_sed(script: str, extended: bool) -> list[tuple[object, str, object]]:
    """Commands ``[addr]s/re/rep/flags``, ``[addr]d``, ``[addr]p``; addresses N, $, /re/."""
    cmds: list[tuple[object, str, object]] = []
    for raw in re.split(r"[;\n]", script):
        text = raw.strip()
        if not text:
            continue
        addr: object = None
        if text[0].isdigit():
            m = re.match(r"\d+", text)
            assert m
            addr, text = int(m.group()), text[m.end():]
        elif text[0] == "$":
            addr, text = "$", text[1:]
        elif text[0] == "/":
            parts, text = _split_delim(text[1:], "/", 1)
            addr = _sed_regex(parts[0], extended)
        text = text.strip()
        if not text:
            raise _SedError("missing command")
        if text[0] == "s" and len(text) > 1:
            (pattern, repl), flags_text = _split_delim(text[2:], text[1], 2)
            flags = flags_text.strip()
            rx = _sed_regex(pattern, extended, re.IGNORECASE if "I" in flags or "i" in flags else 0)
            repl_py = re.sub(r"\\(\d)", r"\\g<\1>", repl.replace("\\n", "\n")).replace("&", r"\g<0>")
            cmds.append((addr, "s", (rx, repl_py, "g" in flags, "p" in flags)))
        elif text in ("d", "p"):
            cmds.append((addr, text, None))
        else:
            raise _SedError(f"unsupported command '{text[:20]}' (the simulated sed knows s, d, p)")
    return cmds


async def sed(p: Proc) -> int:
    args = p.argv[1:]
    quiet = extended = False
    scripts: list[str] = []
    names: list[str] = []
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-e" and j + 1 < len(args):
            scripts.append(args[j + 1])
            j += 2
            continue
        if a.startswith("-") and len(a) > 1 and a != "-":
            for f in a[1:]:
                if f == "n":
                    quiet = True
                elif f in "Er":
                    extended = True
                else:
                    await p.err(f"sed: option -{f} is not supported by the simulated device\n")
                    return 1
        else:
            names.append(a)
        j += 1
    if not scripts:
        if not names:
            await p.err("sed: Needs 1 argument\n")
            return 1
        scripts.append(names.pop(0))
    try:
        cmds = [c for s in scripts for c in _parse_sed(s, extended)]
    except _SedError as exc:
        await p.err(f"sed: {exc}\n")
        return 1
    inputs, code = await _inputs(p, names, "sed")
    lines = [line for _, data in inputs for line in _lines(data)]
    out: list[str] = []
    for n, line in enumerate(lines, 1):
        deleted = False
        for addr, op, arg in cmds:
            if addr is not None and not (
                (isinstance(addr, int) and addr == n) or (addr == "$" and n == len(lines))
                or (isinstance(addr, re.Pattern) and addr.search(line))
            ):
                continue
            if op == "d":
                deleted = True
                break
            if op == "p":
                out.append(line + "\n")
            elif op == "s":
                assert isinstance(arg, tuple)
                rx: re.Pattern[str] = arg[0]
                repl: str = arg[1]
                try:
                    new, hits = rx.subn(repl, line, count=0 if arg[2] else 1)
                except (re.error, IndexError) as exc:
                    await p.err(f"sed: bad replacement: {exc}\n")
                    return 1
                line = new
                if hits and arg[3]:
                    out.append(line + "\n")
        if not deleted and not quiet:
            out.append(line + "\n")
    await p.out("".join(out))
    return code


def register(command: Callable[..., Callable[..., object]]) -> None:
    command("printf")(printf)
    command("uname")(uname)
    command("pwd")(pwd)
    command("stat")(stat)
    for name in ("md5sum", "sha1sum", "sha256sum", "sha512sum"):
        command(name)(_hasher(name))
    command("cut")(cut)
    command("head")(head)
    command("tail")(tail)
    command("wc")(wc)
    command("sort")(sort)
    command("sed")(sed)
