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
"""

from __future__ import annotations

import asyncio
import fnmatch
import posixpath
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

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
_KEYWORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done",
             "case", "esac", "function", "select", "{", "}", "[[", "]]"}
_BIN_DIRS = {"/system/bin", "/system/xbin", "/vendor/bin", "/bin", "/sbin", "/usr/bin"}


class ShellSyntaxError(ValueError):
    """Source text the simulated shell cannot (or will not) run."""


class ArithError(ValueError):
    """An arithmetic expansion that cannot be evaluated (mksh's wording in the message)."""


_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+)|([A-Za-z_][A-Za-z0-9_]*)|"
                          r"(<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%()<>!~&|^]))")
_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="),
           ("<<", ">>"), ("+", "-"), ("*", "/", "%")]
MAX_ARITH = 1024  # characters in one $((…))
MAX_ARITH_DEPTH = 64  # nested parentheses / unary operators


def _div(a: int, b: int) -> int:
    """C division: truncate toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


_OPS: dict[str, Callable[[int, int], int]] = {
    "||": lambda a, b: int(bool(a or b)), "&&": lambda a, b: int(bool(a and b)),
    "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b,
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b), ">": lambda a, b: int(a > b),
    "<=": lambda a, b: int(a <= b), ">=": lambda a, b: int(a >= b),
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": _div, "%": lambda a, b: a - b * _div(a, b),
}


def _apply(op: str, a: int, b: int) -> int:
    return _OPS[op](a, b)


def arith(expr: str, lookup: Callable[[str], str]) -> int:
    """Evaluate a shell arithmetic expression with 64-bit wrap-around, as mksh does."""
    if len(expr) > MAX_ARITH:
        raise ArithError("expression too long")
    tokens: list[tuple[str, str]] = []
    pos = 0
    # $NAME and ${NAME} inside $((…)) are plain parameter expansions.
    text = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9?$#])\}?",
                  lambda m: lookup(m.group(1)).strip() or "0", expr).rstrip()
    while pos < len(text):
        m = _ARITH_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ArithError(f"{expr.strip()}: unexpected '{text[pos:].strip()[:1]}'")
        num, name, op = m.groups()
        tokens.append(("n", num) if num else ("v", name) if name else ("o", op))
        pos = m.end()
    i = 0
    depth = 0

    def wrap(v: int) -> int:
        v &= (1 << 64) - 1
        return v - (1 << 64) if v >= 1 << 63 else v

    def value_of(name: str) -> int:
        raw = lookup(name).strip()
        if not raw:
            return 0
        try:
            return int(raw, 0)
        except ValueError:
            raise ArithError(f"{raw}: bad number") from None

    def primary() -> int:
        nonlocal i, depth
        if i >= len(tokens):
            raise ArithError(f"{expr.strip()}: unexpected end of expression")
        kind, tok = tokens[i]
        i += 1
        if kind == "n":
            return int(tok, 0)
        if kind == "v":
            return value_of(tok)
        if tok == "(":
            depth += 1
            if depth > MAX_ARITH_DEPTH:
                raise ArithError(f"{expr.strip()[:40]}: expression nested too deeply")
            v = binary(0)
            depth -= 1
            if i >= len(tokens) or tokens[i] != ("o", ")"):
                raise ArithError(f"{expr.strip()}: missing ')'")
            i += 1
            return v
        if tok in "-+!~":
            depth += 1
            if depth > MAX_ARITH_DEPTH:
                raise ArithError(f"{expr.strip()[:40]}: expression nested too deeply")
            v = primary()
            depth -= 1
            return {"-": -v, "+": v, "!": int(not v), "~": ~v}[tok]
        raise ArithError(f"{expr.strip()}: unexpected '{tok}'")

    def binary(level: int) -> int:
        nonlocal i
        if level == len(_BINARY):
            return primary()
        left = binary(level + 1)
        while i < len(tokens) and tokens[i][0] == "o" and tokens[i][1] in _BINARY[level]:
            op = tokens[i][1]
            i += 1
            right = binary(level + 1)
            if op in ("/", "%") and right == 0:
                raise ArithError("division by zero")
            if op in ("<<", ">>") and not 0 <= right < 64:
                raise ArithError("bad shift")
            left = wrap(_apply(op, left, right))
        return left

    if not tokens:
        return 0
    result = binary(0)
    if i != len(tokens):
        raise ArithError(f"{expr.strip()}: unexpected '{tokens[i][1]}'")
    return wrap(result)


# -- I/O endpoints ----------------------------------------------------------------------------


class Sink(Protocol):
    async def write(self, data: bytes) -> None: ...


class Source(Protocol):
    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all available when -1); ``b""`` at end of input."""
        ...


class NullSink:
    async def write(self, data: bytes) -> None:
        return None


class BufferSink:
    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data += data


class BytesSource:
    def __init__(self, data: bytes = b"") -> None:
        self._data = memoryview(data)

    async def read(self, n: int = -1) -> bytes:
        if n < 0 or n >= len(self._data):
            out, self._data = bytes(self._data), memoryview(b"")
            return out
        out, self._data = bytes(self._data[:n]), self._data[n:]
        return out


class Pipe:
    """A bounded in-memory pipe between two commands of a pipeline."""

    def __init__(self, limit: int = 64 * 1024) -> None:
        self._buf = bytearray()
        self._limit = limit
        self._cond = asyncio.Condition()
        self._write_closed = False
        self._read_closed = False

    async def write(self, data: bytes) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: len(self._buf) < self._limit or self._read_closed)
            if self._read_closed:
                raise BrokenPipeError("pipe reader has gone")
            self._buf += data
            self._cond.notify_all()

    async def read(self, n: int = -1) -> bytes:
        async with self._cond:
            await self._cond.wait_for(lambda: bool(self._buf) or self._write_closed)
            take = len(self._buf) if n < 0 else min(n, len(self._buf))
            out = bytes(self._buf[:take])
            del self._buf[:take]
            self._cond.notify_all()
            return out

    async def close_write(self) -> None:
        async with self._cond:
            self._write_closed = True
            self._cond.notify_all()

    async def close_read(self) -> None:
        async with self._cond:
            self._read_closed = True
            self._buf.clear()
            self._cond.notify_all()


@dataclass
class Proc:
    """What a command sees: its argv, environment, standard streams and the device."""

    argv: list[str]
    env: dict[str, str]
    stdin: Source
    stdout: Sink
    stderr: Sink
    device: Any
    cwd: str = "/"

    async def out(self, text: str) -> None:
        await self.stdout.write(text.encode())

    async def err(self, text: str) -> None:
        await self.stderr.write(text.encode())

    def path(self, p: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, p))


CommandFn = Callable[[Proc], Awaitable[int]]


# -- tokens and syntax tree -------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    kind: str  # "lit", "var" or "arith" (the text between $(( and ))
    value: str
    quoted: bool


@dataclass
class _Word:
    parts: list[_Part] = field(default_factory=list)


@dataclass(frozen=True)
class _Op:
    op: str
    fd: int | None = None


@dataclass
class Redirect:
    fd: int
    op: str  # "<", ">", ">>", ">&", "<&"
    target: _Word


@dataclass
class SimpleCommand:
    assigns: list[tuple[str, _Word]] = field(default_factory=list)
    words: list[_Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)


@dataclass
class Pipeline:
    commands: list[SimpleCommand]
    negate: bool = False


@dataclass
class AndOr:
    first: Pipeline
    rest: list[tuple[str, Pipeline]] = field(default_factory=list)


def _tokenize(src: str) -> list[_Word | _Op]:
    tokens: list[_Word | _Op] = []
    word: _Word | None = None
    lit: list[str] = []  # pending unquoted literal text of the current word
    i, n = 0, len(src)

    def flush_lit(quoted: bool = False) -> None:
        nonlocal word
        if lit:
            word = word or _Word()
            word.parts.append(_Part("lit", "".join(lit), quoted))
            lit.clear()

    def end_word() -> None:
        nonlocal word
        flush_lit()
        if word is not None:
            tokens.append(word)
            word = None

    def read_var(j: int, quoted: bool) -> int:
        """Parse a ``$…`` at src[j] (the ``$``); append to the word; return the next index."""
        nonlocal word
        k = j + 1
        if src.startswith("((", k):
            depth, e = 0, k + 2
            while e < n:
                if src[e] == "(":
                    depth += 1
                elif src[e] == ")":
                    if depth == 0:
                        break
                    depth -= 1
                e += 1
            if not src.startswith("))", e):
                raise ShellSyntaxError("unterminated arithmetic expansion $((")
            flush_lit(quoted)
            word = word or _Word()
            word.parts.append(_Part("arith", src[k + 2 : e], quoted))
            return e + 2
        if k < n and src[k] == "(":
            raise ShellSyntaxError("command substitution $(...) is not supported")
        if k < n and src[k] == "{":
            end = src.find("}", k)
            if end < 0:
                raise ShellSyntaxError("bad substitution: missing '}'")
            name = src[k + 1 : end]
            if not (name.isidentifier() or name in ("?", "$", "#") or name.isdigit()):
                raise ShellSyntaxError(f"bad substitution: ${{{name}}}")
            k = end + 1
        elif k < n and src[k] in "?$#0123456789":
            name = src[k]
            k += 1
        elif k < n and (src[k].isalpha() or src[k] == "_"):
            e = k
            while e < n and (src[e].isalnum() or src[e] == "_"):
                e += 1
            name, k = src[k:e], e
        else:
            lit.append("$")
            return k
        flush_lit(quoted)
        word = word or _Word()
        word.parts.append(_Part("var", name, quoted))
        return k

    while i < n:
        c = src[i]
        if c in " \t":
            end_word()
            i += 1
        elif c == "\n":
            end_word()
            tokens.append(_Op("\n"))
            i += 1
        elif c == "#" and word is None and not lit:
            nl = src.find("\n", i)
            i = n if nl < 0 else nl
        elif c == "'":
            end = src.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated quoted string")
            flush_lit()
            word = word or _Word()
            word.parts.append(_Part("lit", src[i + 1 : end], True))
            i = end + 1
        elif c == '"':
            flush_lit()
            word = word or _Word()
            i += 1
            while True:
                if i >= n:
                    raise ShellSyntaxError("unterminated quoted string")
                d = src[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and src[i + 1] in '"\\$`\n':
                    if src[i + 1] != "\n":
                        lit.append(src[i + 1])
                    i += 2
                elif d == "$":
                    i = read_var(i, True)
                elif d == "`":
                    raise ShellSyntaxError("command substitution `...` is not supported")
                else:
                    lit.append(d)
                    i += 1
            flush_lit(True)
            word = word or _Word()
            if not word.parts:
                word.parts.append(_Part("lit", "", True))
        elif c == "\\":
            if i + 1 < n and src[i + 1] != "\n":
                flush_lit()
                word = word or _Word()
                word.parts.append(_Part("lit", src[i + 1], True))
            i += 2
        elif c == "$":
            i = read_var(i, False)
        elif c == "`":
            raise ShellSyntaxError("command substitution `...` is not supported")
        elif c in ";&|<>()":
            fd = None
            pending = "".join(lit)
            if c in "<>" and word is None and pending.isdigit():
                fd = int(pending)
                lit.clear()
            end_word()
            two = src[i : i + 2]
            if two in ("&&", "||", ">>", ";;"):
                op, i = two, i + 2
            elif two in (">&", "<&"):
                op, i = two, i + 2
            else:
                op, i = c, i + 1
            if op in ("(", ")", ";;"):
                raise ShellSyntaxError(f"'{op}' is not supported")
            if op == "&":
                raise ShellSyntaxError("background jobs ('&') are not supported")
            tokens.append(_Op(op, fd))
        else:
            lit.append(c)
            i += 1
    end_word()
    return tokens


def _static(word: _Word) -> str | None:
    """The word's text when it has no expansions."""
    if any(p.kind != "lit" for p in word.parts):
        return None
    return "".join(p.value for p in word.parts)


def parse(src: str) -> list[AndOr]:
    """Parse shell source into and-or lists; raise :class:`ShellSyntaxError`."""
    tokens = _tokenize(src)
    lists: list[AndOr] = []
    i = 0

    def parse_command() -> SimpleCommand:
        nonlocal i
        cmd = SimpleCommand()
        while i < len(tokens):
            tok = tokens[i]
            if isinstance(tok, _Op):
                if tok.op in ("<", ">", ">>", ">&", "<&"):
                    if i + 1 >= len(tokens) or not isinstance(tokens[i + 1], _Word):
                        raise ShellSyntaxError(f"syntax error: '{tok.op}' needs a target")
                    target = tokens[i + 1]
                    assert isinstance(target, _Word)
                    default_fd = 0 if tok.op in ("<", "<&") else 1
                    cmd.redirects.append(
                        Redirect(tok.fd if tok.fd is not None else default_fd, tok.op, target)
                    )
                    i += 2
                    continue
                break
            text = _static(tok)
            first = tok.parts[0] if tok.parts else None
            if (
                not cmd.words
                and first is not None
                and first.kind == "lit"
                and not first.quoted
                and "=" in first.value
                and first.value.split("=", 1)[0].isidentifier()
            ):
                name, rest = first.value.split("=", 1)
                value = _Word([_Part("lit", rest, False), *tok.parts[1:]])
                cmd.assigns.append((name, value))
            else:
                if not cmd.words and text in _KEYWORDS and not tok.parts[0].quoted:
                    raise ShellSyntaxError(f"'{text}' is not supported by the simulated shell")
                cmd.words.append(tok)
            i += 1
        if not cmd.words and not cmd.assigns and not cmd.redirects:
            found = tokens[i].op if i < len(tokens) and isinstance(tokens[i], _Op) else "newline"  # type: ignore[union-attr]
            raise ShellSyntaxError(f"syntax error: '{found}' unexpected")
        return cmd

    def parse_pipeline() -> Pipeline:
        nonlocal i
        negate = False
        tok = tokens[i] if i < len(tokens) else None
        if isinstance(tok, _Word) and _static(tok) == "!" and not tok.parts[0].quoted:
            negate = True
            i += 1
        commands = [parse_command()]
        while i < len(tokens) and isinstance(tokens[i], _Op) and tokens[i].op == "|":  # type: ignore[union-attr]
            i += 1
            commands.append(parse_command())
        return Pipeline(commands, negate)

    while i < len(tokens):
        tok = tokens[i]
        if isinstance(tok, _Op) and tok.op == "\n":
            i += 1
            continue
        andor = AndOr(parse_pipeline())
        while i < len(tokens) and isinstance(tokens[i], _Op) and tokens[i].op in ("&&", "||"):  # type: ignore[union-attr]
            op = tokens[i].op  # type: ignore[union-attr]
            i += 1
            while i < len(tokens) and isinstance(tokens[i], _Op) and tokens[i].op == "\n":  # type: ignore[union-attr]
                i += 1  # a newline may follow && and ||
            if i >= len(tokens):
                raise ShellSyntaxError(f"syntax error: unexpected end of input after '{op}'")
            andor.rest.append((op, parse_pipeline()))
        lists.append(andor)
        if i < len(tokens):
            tok = tokens[i]
            if isinstance(tok, _Op) and tok.op in (";", "\n"):
                i += 1
            else:
                shown = tok.op if isinstance(tok, _Op) else "word"
                raise ShellSyntaxError(f"syntax error: '{shown}' unexpected")
    return lists


# -- execution --------------------------------------------------------------------------------


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

    def _expand(self, word: _Word) -> list[str]:
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
