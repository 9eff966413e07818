"""``droidwire instrumentation parse FILE|- [--json]``: offline parse of ``am instrument -r``.

Contract (docs/design.md §9): exit 0 whenever the input could be read; 2 for a usage error or
unreadable input.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from controller.analysis import InstrumentationResult, parse_instrumentation
from droidwire.logcat import read_input
from droidwire.output import console

__all__ = ["app"]

app = typer.Typer(help="Instrumentation output, offline.", no_args_is_help=True,
                  add_completion=False)

_STYLE = {"passed": "green", "failed": "bold red", "error": "bold red", "ignored": "dim",
          "assumption_failure": "yellow"}
_RUN_STYLE = {"ok": "bold green", "crashed": "bold red", "failed": "bold red",
              "incomplete": "bold yellow"}


@app.callback()
def _instrumentation() -> None:
    """Instrumentation output, offline."""


def render(result: InstrumentationResult, console: Console) -> None:
    data = result.to_json()
    if result.tests:
        table = Table(title="Tests", title_justify="left")
        for col in ("class", "test", "status", "first stack line"):
            table.add_column(col)
        for t in result.tests:
            first = (t.stack or "").strip().splitlines()[:1]
            table.add_row(Text(t.class_name), Text(t.name),
                          Text(t.status, style=_STYLE.get(t.status, "")),
                          Text(first[0][:160] if first else ""))
        console.print(table)
    head = Text()
    head.append(f"run {result.run_status}", style=_RUN_STYLE.get(result.run_status, "bold"))
    head.append(f"  total {data['total']} · passed {data['passed']} · failed {data['failed']} · "
                f"errors {data['errors']} · ignored {data['ignored']}")
    if result.expected is not None:
        head.append(f" · announced {result.expected}")
    console.print(head)
    if result.message:
        console.print(Text(result.message, style="dim"))


@app.command("parse")
def parse_cmd(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="output file, or - for stdin")],
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON shape")] = False,
) -> None:
    """Parse the output of am instrument -r into per-test results."""
    result = parse_instrumentation(read_input(source))
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    render(result, console())
