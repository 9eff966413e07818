"""What the commands print, in one shape for every noun (docs/cli.md#output).

* :func:`console` — the rich console every command prints through. On a terminal it uses the
  terminal's width (tables fold their cells to fit). Anywhere else — a pipe, a file, CI — it
  never wraps or cuts a line: log lines and summaries reach the file whole, whatever
  ``COLUMNS`` says, and a script can read them back.
* :func:`id_table` — a table whose first column is the id the other commands take
  (``revoke ID``, ``runs show ID``): never shortened or folded, so it can be copied.
* :func:`print_revoked` — one line, or ``{"id", "revoked"}`` with ``--json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from droidwire.client import print_json

__all__ = ["NO_WRAP_WIDTH", "console", "id_table", "print_id_table", "print_revoked", "rule"]

# The width of a console that is not a terminal: wide enough that nothing wraps, and a table
# takes only the width its cells need (rich tables do not expand unless told to).
NO_WRAP_WIDTH = 1_000_000


def console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): the terminal's width, or no wrapping at all."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=NO_WRAP_WIDTH, soft_wrap=True, highlight=False)


def rule(out: Console, title: str) -> None:
    """A heading line: a full-width rule on a terminal, ``--- title ---`` elsewhere."""
    if out.is_terminal:
        out.rule(title)
    else:
        out.print(f"--- {title} ---", markup=False, highlight=False)


def id_table(
    headers: Sequence[str],
    ids: Iterable[str],
    *,
    title: str | None = None,
    id_header: str = "id",
) -> Table:
    """A table whose first column holds ``ids``: as wide as the longest, never folded or cut.

    The other columns fold their text (header included) to fit a narrow terminal."""
    width = max([len(i) for i in ids] + [len(id_header)])
    table = Table(title=title)
    table.add_column(id_header, no_wrap=True, min_width=width, overflow="ignore")
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def print_id_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A table of ``id`` then ``headers``; each row starts with its id."""
    rows = [list(r) for r in rows]
    table = id_table(headers, (r[0] for r in rows))
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))  # names are data, not markup
    console().print(table)


def print_revoked(noun: str, item_id: str, json_out: bool) -> None:
    """Say that ``noun`` ``item_id`` is revoked."""
    if json_out:
        print_json({"id": item_id, "revoked": True})
    else:
        typer.echo(f"revoked {noun} {item_id}")
