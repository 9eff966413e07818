"""``droidwire logcat analyze FILE|- [--package PKG] [--json]``: offline analysis of a log.

Contract (docs/design.md §9): exit 0 whenever the input could be read, whatever was found; 2 for a
usage error or unreadable input. ``--json`` prints the §9 shape; without it a rich report with
the violations highlighted.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from controller.analysis import AnalysisResult, Thresholds, analyze
from controller.analysis.lines import decode
from droidwire.offline import read_source
from droidwire.output import console

__all__ = ["app", "read_input"]

MAX_INPUT_BYTES = 256 * 1024 * 1024
MAX_ROWS = 50               # rows per table in the human report; --json has everything

app = typer.Typer(help="Logcat analysis, offline.", no_args_is_help=True, add_completion=False)

STATUS_STYLE = {"CONFIRMED": "bold red", "PARTIAL": "bold yellow", "REFUTED": "bold green",
                "PENDING": "bold blue"}
LEVEL_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


@app.callback()
def _logcat() -> None:
    """Logcat analysis, offline."""


def read_input(source: str) -> str:
    """Read FILE or ``-`` (stdin) as text; exit 2 when it cannot be read."""
    return decode(read_source(source, max_bytes=MAX_INPUT_BYTES))


def _t(value: object, style: str = "") -> Text:
    return Text("" if value is None else str(value), style=style)


def render(result: AnalysisResult, console: Console) -> None:
    status = result.verification_status
    head = Text()
    head.append(status, style=STATUS_STYLE.get(status, "bold"))
    head.append(f"  ({result.reason_code})  ")
    head.append(result.summary)
    console.print(head)
    scope = f"package {result.package} (pids {', '.join(map(str, result.app_pids)) or 'unknown'})" \
        if result.package else "all processes"
    console.print(_t(f"{result.lines} lines, {result.entries} entries, "
                     f"{result.damaged_lines} damaged · evidence from {scope}", "dim"))
    if result.violations:
        table = Table(title="StrictMode violations", title_justify="left")
        for col in ("line", "kind", "ms", "pid/tid", "app frame", "test"):
            table.add_column(col)
        for v in result.violations[:MAX_ROWS]:
            pidtid = f"{v.pid if v.pid is not None else '?'}/{v.tid if v.tid is not None else '?'}"
            table.add_row(_t(v.line_no), _t(v.kind, "bold red"), _t(v.duration_ms), _t(pidtid),
                          _t(v.app_frame or "—"), _t(v.test or ""))
        console.print(table)
        if len(result.violations) > MAX_ROWS:
            console.print(_t(f"… and {len(result.violations) - MAX_ROWS} more (see --json)",
                             "dim"))
    if result.timings:
        console.print(_t(f"Blocking time: {result.blocking_time_ms} ms (largest of "
                         f"{len(result.timings)} DroidUnblocker reading(s))", "bold"))
    if result.anrs:
        table = Table(title="ANRs", title_justify="left")
        for col in ("line", "package", "component", "pid", "reason"):
            table.add_column(col)
        for a in result.anrs[:MAX_ROWS]:
            table.add_row(_t(a.line_no), _t(a.package, "bold red"), _t(a.component), _t(a.pid),
                          _t((a.reason or "")[:160]))
        console.print(table)
    if result.crashes:
        table = Table(title="Crashes", title_justify="left")
        for col in ("line", "process", "pid", "thread", "exception", "app frame"):
            table.add_column(col)
        for c in result.crashes[:MAX_ROWS]:
            exc = c.exception + (f": {c.message}" if c.message else "")
            table.add_row(_t(c.line_no), _t(c.process), _t(c.pid), _t(c.thread),
                          _t(exc[:200], "bold red"), _t(c.app_frame or "—"))
        console.print(table)
    if result.displayed:
        table = Table(title="Activity launches", title_justify="left")
        table.add_column("component")
        table.add_column("ms", justify="right")
        for d in result.displayed[:MAX_ROWS]:
            table.add_row(_t(d.component), _t(d.ms))
        console.print(table)
    if result.tests:
        table = Table(title="Tests (TestRunner)", title_justify="left")
        for col in ("test", "status", "blocking ms", "violations"):
            table.add_column(col)
        for t in result.tests[:MAX_ROWS]:
            table.add_row(_t(t.id), _t(t.status), _t(t.blocking_time_ms),
                          _t(", ".join(t.violations), "red"))
        console.print(table)
    for issue in result.issues:
        line = Text()
        line.append(f"[{issue.level}] ", style=LEVEL_STYLE.get(issue.level, ""))
        line.append(issue.title)
        line.append(f" — {issue.suggestion}", style="dim")
        console.print(line)


@app.command("analyze")
def analyze_cmd(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="log file, or - for stdin")],
    package: Annotated[str | None, typer.Option("--package", "-p",
                                                help="count only this app's processes")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the JSON shape")] = False,
    blocking_ms: Annotated[int, typer.Option(
        "--blocking-ms", min=0, help="blocking above this confirms")] = Thresholds().blocking_ms,
    noise_floor_ms: Annotated[int, typer.Option(
        "--noise-floor-ms", min=0, help="blocking at or below this is no blocking",
    )] = Thresholds().noise_floor_ms,
) -> None:
    """Analyse a log: StrictMode violations, timing, ANRs, crashes, launches, and a verdict."""
    text = read_input(source)
    result = analyze(text, package=package or None,
                     thresholds=Thresholds(blocking_ms, noise_floor_ms))
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    render(result, console())
