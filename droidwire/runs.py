"""``droidwire runs list|show|cancel``: the run history (docs/design.md §9, ``/v1/runs``).

* ``runs list [--kind sandbox|agent] [--status S] [--limit N]`` — the caller's runs, newest
  first (an admin sees everyone's): sandbox runs and agent traces, or one ``--kind`` of them;
  a table, or ``{"runs": [...]}`` with ``--json``;
* ``runs show ID [--junit FILE] [--logcat]`` — one run: its verdict, per-test results (with
  attempts and the test's logcat slice under ``--logcat``) and step log; ``--json`` prints the
  run as ``GET /v1/runs/{id}`` answers; ``--junit`` writes the run's JUnit XML report;
* ``runs cancel ID [--no-wait]`` — cancel a queued or running run and wait until it is over
  (its device cleaned up); ``--json`` prints the run's final state.

Exit codes are the client's (:class:`~droidwire.client.ExitCode`): 4 for a run that does
not exist (or is not the caller's), 1 for a run already over when cancelled (409).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from droidwire.client import (
    ApiError,
    Client,
    ControllerOption,
    ExitCode,
    JsonOption,
    TokenOption,
    cli_errors,
    print_json,
)
from droidwire.output import console as make_console
from droidwire.output import id_table, rule
from droidwire.run import POLL_S, render_results, write_junit

__all__ = ["app"]

app = typer.Typer(help="The run history: list, show, cancel.", no_args_is_help=True)

RUN_STATUSES = ("queued", "running", "finished", "cancelled")
RUN_KINDS = ("sandbox", "agent")
FINAL = ("finished", "cancelled")
CANCEL_WAIT_S = 120.0
_COLOURS = {"CONFIRMED": "red", "PARTIAL": "yellow", "REFUTED": "green", "PENDING": "blue"}


def _verdict(run: dict[str, Any]) -> str:
    verdict = run.get("verdict")
    if not verdict:
        return str(run.get("status") or "?")
    return f"[{_COLOURS.get(str(verdict), 'white')}]{escape(str(verdict))}[/]"


@app.command("list")
def list_runs(
    status: Annotated[
        str | None, typer.Option("--status", help=f"Only runs in this status ({', '.join(RUN_STATUSES)}).")
    ] = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="Only sandbox runs or only agent traces (sandbox, agent).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200, help="At most N runs.")] = 50,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """List runs, newest first."""
    if status is not None and status not in RUN_STATUSES:
        raise typer.BadParameter(f"one of {', '.join(RUN_STATUSES)}", param_hint="--status")
    if kind is not None and kind not in RUN_KINDS:
        raise typer.BadParameter(f"one of {', '.join(RUN_KINDS)}", param_hint="--kind")
    params: dict[str, Any] = {"limit": limit}
    if kind is not None:
        params["kind"] = kind
    if status is not None:
        params["status"] = status
    with cli_errors(), Client(controller, token) as client:
        runs = client.get("/v1/runs", **params)["runs"]
    if json_out:
        print_json({"runs": runs})
        return
    # The id whole, to be copied into `runs show`; the rest folds to fit a terminal.
    table = id_table(("kind", "status", "verdict", "device", "created", "summary"),
                     (str(r.get("id")) for r in runs), title="runs")
    for r in runs:
        table.add_row(
            escape(str(r.get("id"))),
            escape(str(r.get("kind") or "sandbox")),
            escape(str(r.get("status"))),
            _verdict(r) if r.get("verdict") else "-",
            escape(str(r.get("device") or "-")),
            escape(str(r.get("created_at") or "")[:19].replace("T", " ")),
            escape(str(r.get("summary") or "")),
        )
    make_console().print(table)


def _show_tests(console: Console, tests: list[dict[str, Any]], *, logcat: bool) -> None:
    table = Table(title="tests")
    for column in ("class", "test", "status", "attempts"):
        table.add_column(column, overflow="fold")
    for t in tests:
        status = str(t.get("status"))
        if t.get("flaky"):
            status += " (flaky)"
        table.add_row(
            escape(str(t.get("class", "")).rsplit(".", 1)[-1]),
            escape(str(t.get("name", ""))),
            escape(status),
            str(t.get("attempts", 1)),
        )
    console.print(table)
    if logcat:
        for t in tests:
            if t.get("logcat"):
                rule(console, f"{t.get('class', '')}#{t.get('name', '')}")
                console.print(escape(str(t["logcat"])), highlight=False)


@app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write the run's JUnit XML report to FILE.")
    ] = None,
    logcat: Annotated[bool, typer.Option("--logcat", help="Print each test's logcat slice.")] = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show one run: verdict, per-test results and its step log."""
    with cli_errors(), Client(controller, token) as client:
        run = client.get(f"/v1/runs/{run_id}")
    result = run.get("result")
    if junit is not None:
        try:
            write_junit(junit, [result or _unfinished(run)])
        except OSError as exc:
            typer.echo(f"error: cannot write {junit}: {exc.strerror or exc}", err=True)
            raise typer.Exit(int(ExitCode.ERROR)) from None
    if json_out:
        print_json(run)
        return
    console = make_console()
    console.print(
        f"run [bold]{escape(str(run.get('id')))}[/]  {escape(str(run.get('status')))}  "
        f"{_verdict(run) if run.get('verdict') else ''}  device {escape(str(run.get('device') or '-'))}",
        highlight=False,
    )
    if result:
        render_results(console, [result])
        if result.get("tests"):
            _show_tests(console, result["tests"], logcat=logcat)
    steps = Table(title="steps")
    for column in ("#", "kind", "status", "what"):
        steps.add_column(column, overflow="fold")
    for s in run.get("steps") or []:
        detail = s.get("detail") or {}
        what = detail.get("method") or detail.get("detail") or detail.get("note") or ""
        steps.add_row(str(s.get("seq")), escape(str(s.get("kind"))), escape(str(s.get("status"))),
                      escape(str(what)))
    console.print(steps)


def _unfinished(run: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": run.get("id"), "verification_status": "PENDING",
            "reason_code": str(run.get("status")), "summary": f"the run is {run.get('status')}",
            "device": {"id": run.get("device")} if run.get("device") else None}


@app.command("cancel")
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until the run is over.")
    ] = True,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Cancel a queued or running run (its device is still cleaned up)."""
    with cli_errors(), Client(controller, token) as client:
        answer = client.post(f"/v1/runs/{run_id}/cancel")
        run: dict[str, Any] = {"id": run_id, "status": answer.get("status", "cancelling")}
        if wait:
            # Progress on stderr: a spinner on a terminal, else one line, so a CI log shows
            # what the command waits for.
            err = make_console(stderr=True)
            waiting = f"run {run_id}: cancelling, waiting for its device to be cleaned up"
            status = err.status(waiting) if err.is_terminal else contextlib.nullcontext()
            if not err.is_terminal:
                print(waiting, file=sys.stderr, flush=True)
            with status:
                end = time.monotonic() + CANCEL_WAIT_S
                while True:
                    run = client.get(f"/v1/runs/{run_id}")
                    if run.get("status") in FINAL:
                        break
                    if time.monotonic() > end:
                        raise ApiError(0, "timeout",
                                       f"run {run_id} did not end within {CANCEL_WAIT_S:g} s")
                    time.sleep(POLL_S)
    if json_out:
        print_json({"id": run.get("id"), "status": run.get("status"), "verdict": run.get("verdict"),
                    "result": run.get("result")})
    else:
        typer.echo(f"run {run_id}: {run.get('status')}")
