"""How ``--help`` and usage errors read.

* An option's value shows as a plain word (``TEXT``, ``INTEGER``, ``PATH``), and an on/off
  flag shows none: recent typer versions print Python type tags (``<bool>``, ``<str>``,
  ``<list[str]>``), which mean nothing to someone reading ``droidwire bridge --help``.
* A usage error (a bad flag or value) off a terminal is one line, ``error: usage: … (see
  droidwire run --help)``, like every other error of the CLI, rather than a framed panel
  wrapped at 80 columns; on a terminal typer's panel stays.

:func:`install` applies both once, for every command, at the CLI's composition root.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
from typing import Any

__all__ = ["install", "plain_type", "plain_usage_error"]

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


def plain_usage_error(error: Any) -> None:
    """Print a click usage error as one line on stderr."""
    ctx = getattr(error, "ctx", None)
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    message = " ".join(str(error.format_message()).split())
    print(f"error: usage: {message}{where}", file=sys.stderr)


def _patch_errors(rich_utils: Any) -> None:
    original_error = getattr(rich_utils, "rich_format_error", None)
    if original_error is None or getattr(original_error, "_droidwire", False):
        return

    def rich_format_error(self: Any, _original: Any = original_error) -> None:
        if self.__class__.__name__ == "NoArgsIsHelpError" or sys.stderr.isatty():
            _original(self)
            return
        plain_usage_error(self)

    rich_format_error._droidwire = True  # type: ignore[attr-defined]
    rich_utils.rich_format_error = rich_format_error


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Applies :func:`_patch_errors` when typer first imports its rich renderer (for help or
    an error): importing it up front would load rich's Markdown and Pygments into every
    command, the bridge's long-lived process included."""

    NAME = "typer.rich_utils"

    def __init__(self) -> None:
        self._loader: Any = None

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)  # once; the real finders do the finding
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _patch_errors(module)


def install() -> None:
    """Patch typer's help rendering and usage errors (no-ops where typer differs)."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover
        return
    if _PatchOnImport.NAME in sys.modules:
        _patch_errors(sys.modules[_PatchOnImport.NAME])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
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
