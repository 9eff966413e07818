"""A small POSIX-style shell for the simulated device: what adb and adbutils actually send.

Commands arrive as shell source text (docs/simulated-device.md): ``shlex.quote``-d
argv from adbutils, single-quoted words from the adb CLI, ``export ANDROID_LOG_TAGS="''";
exec logcat '-d'`` from ``adb logcat``, ``</dev/null`` from ``adb install``, and the
``; echo X4EXIT:$?`` suffix of adbutils' ``shell2()``. Supported:

* words with single quotes, double quotes (``$`` expansion inside), backslash escapes,
  ``#`` comments, unquoted globs matched against the device's files;
* ``$?``, ``$$``, ``$NAME`` / ``${NAME}``; ``NAME=value`` prefixes and ``export``;
* arithmetic expansion ``$((…))``: integers, variables (unset ones are 0), ``+ - * / %``,
  comparisons, ``&& || !``, bit operators and parentheses (:func:`arith`);
* lists with ``;``, newlines, ``&&``, ``||``; pipelines with ``|`` (streaming) and ``!``;
* redirections ``<``, ``>``, ``>>``, ``2>&1``, ``>&2`` to ``/dev/null`` or device files;
* builtins ``exit [N]``, ``exec CMD``, ``export``, ``unset``, ``cd``, ``true``, ``false``, ``:``.

Anything beyond that (``$(…)``, backticks, ``&`` background jobs, subshells, ``if``/``for``…)
is refused with a syntax error naming it, exit status 1 — never silently misread. An unknown
command answers as Android's mksh does: ``/system/bin/sh: NAME: inaccessible or not found``,
status 127.

This module runs parsed scripts (:class:`Shell`); the grammar is
:mod:`~device_bridge.sim.shell_parse`, arithmetic :mod:`~device_bridge.sim.shell_arith`, and
what a command runs with (its streams, :class:`Proc`) :mod:`~device_bridge.sim.shell_io`.
Their public names are importable from here too.
"""

from __future__ import annotations

import asyncio
import fnmatch
import posixpath
from collections.abc import Callable
from typing import Any

from device_bridge.sim.shell_arith import ArithError, arith
from device_bridge.sim.shell_io import (
    BufferSink,
    BytesSource,
    CommandFn,
    NullSink,
    Pipe,
    Proc,
    Sink,
    Source,
)
from device_bridge.sim.shell_parse import (
    AndOr,
    Pipeline,
    Redirect,
    ShellSyntaxError,
    SimpleCommand,
    Word,
    parse,
)

__all__ = [
    "ArithError",
    "BufferSink",
    "BytesSource",
    "CommandFn",
    "NullSink",
    "Pipe",
    "Proc",
    "Shell",
    "ShellSyntaxError",
    "Sink",
    "Source",
    "arith",
    "parse",
]

SH = "/system/bin/sh"
_BIN_DIRS = {"/system/bin", "/system/xbin", "/vendor/bin", "/bin", "/sbin", "/usr/bin"}


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class Shell:
    """Runs parsed scripts against a device; ``lookup(name)`` finds a command or ``None``.

    The device must offer ``read_file(path) -> bytes | None``, ``write_file(path, data,
    append=False)`` (raising ``OSError`` with a message when refused) and ``glob(pattern)``.
    """

    def __init__(
        self,
        device: Any,
        lookup: Callable[[str], CommandFn | None],
        *,
        env: dict[str, str] | None = None,
        pid: int = 1,
    ) -> None:
        self.device = device
        self.lookup = lookup
        self.env: dict[str, str] = dict(env or {})
        self.status = 0
        self.pid = pid
        self.cwd = "/"
        self.exited = False  # `exit` or `exec` ended the shell (interactive sessions stop)

    async def run(self, src: str, *, stdin: Source, stdout: Sink, stderr: Sink) -> int:
        """Run ``src``; return the exit status (0–255)."""
        try:
            script = parse(src)
        except ShellSyntaxError as exc:
            await stderr.write(f"{SH}: {exc}\n".encode())
            return 1
        try:
            for andor in script:
                await self._andor(andor, stdin, stdout, stderr)
        except ArithError as exc:  # in a redirection's target, say
            await stderr.write(f"{SH}: {exc}\n".encode())
            self.status = 1
        except _Exit as exc:
            self.status = exc.code
            self.exited = True
        return self.status & 0xFF

    async def _andor(self, andor: AndOr, stdin: Source, stdout: Sink, stderr: Sink) -> None:
        self.status = await self._pipeline(andor.first, stdin, stdout, stderr)
        for op, pipe in andor.rest:
            if (op == "&&") == (self.status == 0):
                self.status = await self._pipeline(pipe, stdin, stdout, stderr)

    async def _pipeline(self, pl: Pipeline, stdin: Source, stdout: Sink, stderr: Sink) -> int:
        if len(pl.commands) == 1:
            code = await self._command(pl.commands[0], stdin, stdout, stderr, last=True)
        else:
            pipes = [Pipe() for _ in pl.commands[1:]]

            async def one(k: int, cmd: SimpleCommand) -> int:
                src = stdin if k == 0 else pipes[k - 1]
                dst = stdout if k == len(pl.commands) - 1 else pipes[k]
                try:
                    return await self._command(cmd, src, dst, stderr, last=False)
                except BrokenPipeError:
                    return 141
                finally:
                    if k < len(pipes):
                        await pipes[k].close_write()
                    if k > 0:
                        await pipes[k - 1].close_read()

            codes = await asyncio.gather(*(one(k, c) for k, c in enumerate(pl.commands)))
            code = codes[-1]
        return (0 if code else 1) if pl.negate else code

    def _expand(self, word: Word) -> list[str]:
        text: list[str] = []
        globbable = False
        for p in word.parts:
            if p.kind == "lit":
                text.append(p.value)
                globbable |= not p.quoted and any(ch in p.value for ch in "*?[")
            elif p.kind == "arith":
                text.append(str(arith(p.value, self._arith_var)))
            elif p.value == "?":
                text.append(str(self.status))
            elif p.value == "$":
                text.append(str(self.pid))
            elif p.value == "#" or p.value.isdigit():
                text.append("0" if p.value == "#" else ("sh" if p.value == "0" else ""))
            else:
                text.append(self.env.get(p.value, ""))
        value = "".join(text)
        if globbable:
            pattern = posixpath.join(self.cwd, value)
            matches = sorted(self.device.glob(pattern))
            if matches:
                if not value.startswith("/"):
                    return [posixpath.relpath(m, self.cwd) for m in matches]
                return matches
        if not value and all(p.kind != "lit" and not p.quoted for p in word.parts):
            return []  # an unquoted empty expansion vanishes
        return [value]

    def _arith_var(self, name: str) -> str:
        if name.isdigit() or name in ("?", "$"):
            return str(self.status if name == "?" else self.pid if name == "$" else 0)
        return self.env.get(name, "")

    async def _command(
        self, cmd: SimpleCommand, stdin: Source, stdout: Sink, stderr: Sink, *, last: bool
    ) -> int:
        try:
            argv = [a for w in cmd.words for a in self._expand(w)]
            assigns = {name: "".join(self._expand(w)) for name, w in cmd.assigns}
        except ArithError as exc:
            await stderr.write(f"{SH}: {exc}\n".encode())
            return 1
        files: list[tuple[str, BufferSink, bool]] = []
        try:
            for r in cmd.redirects:
                stdin, stdout, stderr = await self._redirect(r, stdin, stdout, stderr, files)
        except OSError as exc:
            await stderr.write(f"{SH}: {exc}\n".encode())
            return 1
        try:
            return await self._simple(argv, assigns, stdin, stdout, stderr)
        finally:
            for path, sink, append in files:
                try:
                    self.device.write_file(path, bytes(sink.data), append=append)
                except OSError as exc:
                    await stderr.write(f"{SH}: {exc}\n".encode())

    async def _redirect(
        self,
        r: Redirect,
        stdin: Source,
        stdout: Sink,
        stderr: Sink,
        files: list[tuple[str, BufferSink, bool]],
    ) -> tuple[Source, Sink, Sink]:
        target = "".join(self._expand(r.target))
        if r.op in (">&", "<&"):
            if target not in ("1", "2") or r.op == "<&":
                raise OSError(f"{target}: unsupported file descriptor duplication")
            src = stdout if target == "1" else stderr
            if r.fd == 1:
                return stdin, src, stderr
            if r.fd == 2:
                return stdin, stdout, src
            raise OSError(f"{r.fd}: bad file descriptor")
        path = posixpath.normpath(posixpath.join(self.cwd, target))
        if r.op == "<":
            if path == "/dev/null":
                return BytesSource(b""), stdout, stderr
            data = self.device.read_file(path)
            if data is None:
                raise OSError(f"can't open {target}: No such file or directory")
            return BytesSource(data), stdout, stderr
        sink: Sink
        if path == "/dev/null":
            sink = NullSink()
        else:
            self.device.write_file(path, b"", append=True)  # refuses forbidden paths now
            buf = BufferSink()
            files.append((path, buf, r.op == ">>"))
            sink = buf
        if r.fd == 1:
            return stdin, sink, stderr
        if r.fd == 2:
            return stdin, stdout, sink
        raise OSError(f"{r.fd}: bad file descriptor")

    async def _simple(
        self, argv: list[str], assigns: dict[str, str], stdin: Source, stdout: Sink, stderr: Sink
    ) -> int:
        if not argv:
            self.env.update(assigns)
            return 0
        name = argv[0]
        if name == "exit":
            try:
                code = int(argv[1]) if len(argv) > 1 else self.status
            except ValueError:
                await stderr.write(f"{SH}: exit: {argv[1]}: bad number\n".encode())
                code = 1
            raise _Exit(code & 0xFF)
        if name == "exec":
            if len(argv) == 1:
                return 0
            code = await self._simple(argv[1:], assigns, stdin, stdout, stderr)
            raise _Exit(code)
        if name == "export":
            self.env.update(assigns)
            for a in argv[1:]:
                key, eq, value = a.partition("=")
                if not key.isidentifier():
                    await stderr.write(f"{SH}: export: {a}: is not an identifier\n".encode())
                    return 1
                if eq:
                    self.env[key] = value
            return 0
        if name == "unset":
            for a in argv[1:]:
                self.env.pop(a, None)
            return 0
        if name == "cd":
            target = posixpath.normpath(posixpath.join(self.cwd, argv[1] if len(argv) > 1 else "/"))
            if not self.device.is_dir(target):
                await stderr.write(f"{SH}: cd: {argv[1]}: No such file or directory\n".encode())
                return 2
            self.cwd = target
            return 0
        if name in ("true", ":"):
            return 0
        if name == "false":
            return 1
        base = name
        if "/" in name:
            directory, base = posixpath.split(name)
            if directory not in _BIN_DIRS:
                base = ""
        fn = self.lookup(base) if base else None
        if fn is None:
            await stderr.write(f"{SH}: {name}: inaccessible or not found\n".encode())
            return 127
        env = {**self.env, **assigns}
        proc = Proc(argv, env, stdin, stdout, stderr, self.device, self.cwd)
        code = await fn(proc)
        return code & 0xFF


def match_paths(paths: list[str], pattern: str) -> list[str]:
    """Paths among ``paths`` matching a shell glob ``pattern`` (no ``/`` crossing)."""
    depth = pattern.count("/")
    return [p for p in paths if p.count("/") == depth and fnmatch.fnmatchcase(p, pattern)]
