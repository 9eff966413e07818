"""``source.lookup`` on the bridge: method bodies looked up where the project lives.

The only part of ``fixer`` the bridge may import (docs/design.md §2) is its source index, pure
parsing of the sources with the tree-sitter parsers of the ``sources`` extra; a bridge
installed without it answers with a typed error that says what to install. Only the bodies
asked for travel, each bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode, RpcError
from protocol.methods import MethodRecord

__all__ = ["MAX_LOOKUP_RESULTS", "MAX_SOURCE_TEXT", "lookup_methods", "open_index"]

MAX_LOOKUP_RESULTS = 20
MAX_SOURCE_TEXT = 8192


def open_index(root: Path) -> Any:
    """A ``fixer`` SourceCodeIndex of ``root`` (refreshed on every query), or ``unavailable``."""
    # The only fixer import the bridge allows (docs/design.md §2): pure parsing of the sources,
    # with the tree-sitter parsers of the `sources` extra.
    try:
        from fixer.source_index import SourceCodeIndex
    except ImportError as exc:
        raise RpcError(
            ErrorCode.UNAVAILABLE,
            "this bridge has no source index: pip install 'droidwire[sources]' on it",
            {"reason": "no_source_index"},
        ) from exc

    try:
        return SourceCodeIndex(root, auto_refresh=True)
    except OSError as exc:
        raise RpcError(ErrorCode.UNAVAILABLE, f"cannot index the project's sources: {exc}") from exc


def lookup_methods(index: Any, names: list[str]) -> list[MethodRecord]:
    """The methods called ``names`` in ``index``, as the wire's records (bounded)."""
    out: list[MethodRecord] = []
    for name in names:
        for record in index.lookup(name)[:MAX_LOOKUP_RESULTS]:
            out.append(
                MethodRecord(
                    name=record.name,
                    owner=record.qualified_owner,
                    file=record.file,
                    line=record.start_line,
                    signature=record.signature,
                    text=record.body[:MAX_SOURCE_TEXT],
                )
            )
    return out
