"""The simulated shell's grammar: source text to a syntax tree of and-or lists, pipelines and
simple commands (words, ``NAME=value`` assignments, redirections). Anything it does not support
(``$(…)``, backticks, ``&``, subshells, ``if``/``for``…) raises :class:`ShellSyntaxError`
naming it; nothing is silently misread. :mod:`device_bridge.sim.shell` runs the tree."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "AndOr",
    "Pipeline",
    "Redirect",
    "ShellSyntaxError",
    "SimpleCommand",
    "Word",
    "parse",
]

_KEYWORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done",
             "case", "esac", "function", "select", "{", "}", "[[", "]]"}


class ShellSyntaxError(ValueError):
    """Source text the simulated shell cannot (or will not) run."""


@dataclass(frozen=True)
class _Part:
    kind: str  # "lit", "var" or "arith" (the text between $(( and ))
    value: str
    quoted: bool


@dataclass
class Word:
    parts: list[_Part] = field(default_factory=list)


@dataclass(frozen=True)
class _Op:
    op: str
    fd: int | None = None


@dataclass
class Redirect:
    fd: int
    op: str  # "<", ">", ">>", ">&", "<&"
    target: Word


@dataclass
class SimpleCommand:
    assigns: list[tuple[str, Word]] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)


@dataclass
class Pipeline:
    commands: list[SimpleCommand]
    negate: bool = False


@dataclass
class AndOr:
    first: Pipeline
    rest: list[tuple[str, Pipeline]] = field(default_factory=list)


def _tokenize(src: str) -> list[Word | _Op]:
    tokens: list[Word | _Op] = []
    word: Word | None = None
    lit: list[str] = []  # pending unquoted literal text of the current word
    i, n = 0, len(src)

    def flush_lit(quoted: bool = False) -> None:
        nonlocal word
        if lit:
            word = word or Word()
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
            word = word or Word()
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
        word = word or Word()
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
            word = word or Word()
            word.parts.append(_Part("lit", src[i + 1 : end], True))
            i = end + 1
        elif c == '"':
            flush_lit()
            word = word or Word()
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
            word = word or Word()
            if not word.parts:
                word.parts.append(_Part("lit", "", True))
        elif c == "\\":
            if i + 1 < n and src[i + 1] != "\n":
                flush_lit()
                word = word or Word()
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


def _static(word: Word) -> str | None:
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
                    if i + 1 >= len(tokens) or not isinstance(tokens[i + 1], Word):
                        raise ShellSyntaxError(f"syntax error: '{tok.op}' needs a target")
                    target = tokens[i + 1]
                    assert isinstance(target, Word)
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
                value = Word([_Part("lit", rest, False), *tok.parts[1:]])
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
        if isinstance(tok, Word) and _static(tok) == "!" and not tok.parts[0].quoted:
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
