"""Input for the offline commands (``logcat analyze``, ``instrumentation parse``,
``fixer errors``): read FILE or ``-`` (stdin), bounded.

Contract (docs/design.md §9): exit 2 for unreadable input — a file that cannot be opened or read, or
one larger than the command's limit. What the bytes contain is the command's business.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

__all__ = ["EXIT_UNREADABLE", "read_source"]

EXIT_UNREADABLE = 2


def read_source(source: str, *, max_bytes: int) -> bytes:
    """The bytes of FILE, or of stdin for ``-``; exit 2 when unreadable or over ``max_bytes``."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(max_bytes + 1)
        else:
            with Path(source).open("rb") as fh:
                data = fh.read(max_bytes + 1)
    except OSError as exc:
        typer.echo(f"error: cannot read {source}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_UNREADABLE) from exc
    if len(data) > max_bytes:
        typer.echo(f"error: {source} is larger than {max_bytes} bytes", err=True)
        raise typer.Exit(EXIT_UNREADABLE)
    return data
