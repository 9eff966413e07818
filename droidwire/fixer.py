"""``droidwire fixer errors FILE|- [--json]``: offline parse of Gradle / compiler output.

Contract (docs/design.md §9): exit 0 whenever the input could be read, whatever it contains;
2 for a usage error or unreadable input. ``--json`` prints the §9 shape.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from droidwire.offline import read_source
from fixer.errors import CompileReport, parse_errors

__all__ = ["app"]

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a build log larger than this is not a build log

app = typer.Typer(
    help="Compiler output and generated-test repair, offline.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _fixer() -> None:
    """Compiler output and generated-test repair, offline."""


def _read(source: str) -> str:
    return read_source(source, max_bytes=MAX_INPUT_BYTES).decode("utf-8", errors="replace")


def _human(report: CompileReport) -> str:
    lines = [
        str(e) + (f"  [{e.kind}" + (f": {e.symbol}" if e.symbol else "") + "]")
        for e in report.errors
    ]
    n_err, n_warn = len(report.compile_errors), len(report.warnings)
    status = "BUILD FAILED" if report.build_failed else "no build failure"
    lines.append(f"{status} · failure: {report.failure} · {n_err} error(s), {n_warn} warning(s)")
    if report.failed_tasks:
        lines.append("failed task(s): " + ", ".join(report.failed_tasks))
    if report.what_went_wrong:
        lines.append("what went wrong: " + " / ".join(report.what_went_wrong))
    return "\n".join(lines)


@app.command("errors")
def errors(
    file: Annotated[
        str, typer.Argument(metavar="FILE|-", help="Build output file, or - for stdin.")
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="Machine-readable JSON output.")
    ] = False,
) -> None:
    """Parse Gradle / kotlinc / javac output into structured compile errors."""
    report = parse_errors(_read(file))
    if json_output:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        typer.echo(_human(report))
