"""How ``--help`` shows an option's value: a plain word (``TEXT``, ``INTEGER``, ``PATH``), and
nothing at all for an on/off flag.

Recent typer versions print Python type tags (``<bool>``, ``<str>``, ``<list[str]>``) in the
rich help; they mean nothing to someone reading ``droidwire bridge --help``. :func:`install`
rewrites them once, for every command, at the CLI's composition root.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["install", "plain_type"]

_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "datetime": "DATE"}
_TAG = re.compile(r"^<(.*)>(\.\.\.)?$")


def plain_type(tag: str | None) -> str | None:
    """``<str>`` → ``TEXT``, ``<list[int]>`` → ``INTEGER``, ``<bool>`` → None; else as is."""
    if tag is None:
        return None
    match = _TAG.match(tag)
    if not match:
        return tag  # an explicit metavar
    label = match.group(1)
    inner = re.fullmatch(r"list\[(.*)\]", label)
    if inner:
        label = inner.group(1)
    if label == "bool":
        return None
    words = [_WORDS.get(part, part.upper()) for part in label.split(" ")]
    return " ".join(words)


def install() -> None:
    """Patch typer's help rendering (a no-op on typer versions without type tags)."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover
        return
    for cls in (getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)):
        original = getattr(cls, "display_type_rich", None)
        if cls is None or original is None or getattr(original, "_droidwire", False):
            continue

        def display_type_rich(self: Any, ctx: Any, _original: Any = original) -> str | None:
            if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
                return None
            return plain_type(_original(self, ctx))

        display_type_rich._droidwire = True  # type: ignore[attr-defined]
        cls.display_type_rich = display_type_rich
