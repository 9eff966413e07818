"""What the listing and revoking commands print, in one shape for every noun.

A listing is a table whose first column is the id the other commands take (``revoke ID``):
never shortened, so it can be copied. A revocation prints one line, or ``{"id", "revoked"}``
with ``--json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import typer
from rich.console import Console
from rich.table import Table

from controller.cli.client import print_json

__all__ = ["print_id_table", "print_revoked"]


def print_id_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A table of ``id`` then ``headers``; each row starts with its id."""
    table = Table()
    table.add_column("id", no_wrap=True, min_width=32)  # what `revoke` takes: never shortened
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def print_revoked(noun: str, item_id: str, json_out: bool) -> None:
    """Say that ``noun`` ``item_id`` is revoked."""
    if json_out:
        print_json({"id": item_id, "revoked": True})
    else:
        typer.echo(f"revoked {noun} {item_id}")
