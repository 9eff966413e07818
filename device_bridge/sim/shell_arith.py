"""Arithmetic expansion of the simulated shell, ``$((…))``, evaluated as mksh does: integers,
variables (unset ones are 0), ``+ - * / %``, comparisons, ``&& || !``, bit operators and
parentheses, with 64-bit wrap-around and C division. Bounded in length and nesting."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["MAX_ARITH", "MAX_ARITH_DEPTH", "ArithError", "arith"]


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
