"""``droidwire run TEST.kt``: the sandbox executor from the command line (docs/design.md §9).

Submits the test (``POST /v1/sandbox/execute?wait=false``), follows each run's step log
(``GET /v1/runs/{id}``) and shows its progress on stderr — compiling, fixing (round n),
installing, running, collecting logcat: a live display on a terminal, else one plain line per
step as it happens (``run ID: compiling (round 2)``), so CI logs show where a run is — then
prints a verdict table, or ``{"results": [...]}`` with ``--json``. ``--junit FILE`` writes a JUnit XML report (one suite per device, each test case
with its attempts and its logcat slice). ``--retries N`` runs the failed tests again, alone.
``--shard N`` splits the suite over N devices and follows the one run that merges them.
Ctrl-C cancels the runs (their devices are still cleaned up). Exit codes are the client's
(:class:`~droidwire.client.ExitCode`), by outcome (:func:`outcome_code`): findings never
fail the command unless ``--fail-on`` names their status (exit 1); a PENDING result (no
verdict) exits 4 when no device matched, 5 when its device or bridge was unavailable, 6
otherwise.
"""

from __future__ import annotations

import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
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

__all__ = ["STATUSES", "outcome_code", "render_results", "run", "stage_of", "stages",
           "write_junit"]

STATUSES = ("CONFIRMED", "PARTIAL", "REFUTED", "PENDING")
POLL_S = 0.25  # between two looks at a run's progress (a human is watching)
MAX_FIX_ROUNDS = 3
MAX_TEST_BYTES = 1 << 20
# PENDING reasons that say a device could not be found or reached exit like the same failure
# of any other command (device shell NOPE: 4); every other PENDING exits 6.
PENDING_EXIT = {
    "no_device": ExitCode.NOT_FOUND,
    "adb_unavailable": ExitCode.UNAVAILABLE,
    "bridge_unavailable": ExitCode.UNAVAILABLE,
    "device_paused": ExitCode.UNAVAILABLE,
}

_STAGES = {
    "device.logcat.clear": "clearing logcat",
    "device.install": "installing",
    "device.instrument": "running",
    "device.logcat.dump": "collecting logcat",
    "device.shell": "cleaning up",
    "device.uninstall": "cleaning up",
    "source.lookup": "fixing",
}


def _step_stage(steps: Sequence[dict[str, Any]], n: int) -> str:
    """Where a run is once ``steps[n]`` is its last step (rounds counted from the log)."""
    last = steps[n]
    kind = last.get("kind")
    detail = last.get("detail") or {}
    method = detail.get("method") if kind == "rpc" else None
    compiles = sum(
        1 for s in steps[: n + 1]
        if s.get("kind") == "rpc" and (s.get("detail") or {}).get("method") == "workspace.compile"
    )
    if method == "workspace.compile":
        return "compiling" if compiles <= 1 else f"compiling (round {compiles})"
    if kind == "fix" or method == "source.lookup":
        return f"fixing compile errors (round {max(compiles, 1)}/{MAX_FIX_ROUNDS})"
    if method is not None:
        return _STAGES.get(str(method), str(method))
    if kind == "device_busy" and last.get("status") == "running":
        return "waiting for the device (busy with another run)"
    if kind == "cancel":
        return "cancelling"
    return str(kind)


def _final_stage(run: dict[str, Any]) -> str:
    result = run.get("result") or {}
    verdict = str(run.get("verdict") or result.get("verification_status") or run["status"])
    reason = result.get("reason_code")
    return f"{verdict} ({reason})" if reason else verdict


def stages(run: dict[str, Any]) -> list[str]:
    """Every stage the run went through so far, in order, without repeats; the last is
    where it is now (its verdict once it is over)."""
    out = ["queued"]
    steps = run.get("steps") or []
    for n in range(len(steps)):
        stage = _step_stage(steps, n)
        if stage != out[-1]:
            out.append(stage)
    if run.get("status") in ("finished", "cancelled"):
        out.append(_final_stage(run))
    return out


def stage_of(run: dict[str, Any]) -> str:
    """A short text for where a run is, from its status and step log."""
    if run.get("status") in ("finished", "cancelled"):
        return str(run.get("verdict") or run["status"])
    steps = run.get("steps") or []
    return _step_stage(steps, len(steps) - 1) if steps else "queued"


def render_results(console: Console, results: Sequence[dict[str, Any]]) -> None:
    """The verdict table (test, device, verdict, blocking ms, violations, compile rounds),
    then each result's summary line."""
    table = Table(title="droidwire sandbox")
    for column in ("#", "test", "device", "verdict", "blocking", "violations", "compile rounds"):
        table.add_column(column, overflow="fold")
    colours = {"CONFIRMED": "red", "PARTIAL": "yellow", "REFUTED": "green", "PENDING": "blue"}
    for n, r in enumerate(results, 1):
        device = r.get("device") or {}
        status = str(r.get("verification_status", "?"))
        blocking = r.get("blocking_time_ms", -1)
        rounds = r.get("compile_rounds") or []
        fixers = [x.get("fixer") for x in rounds if x.get("fixer")]
        round_text = str(len(rounds)) + (f" ({', '.join(fixers)})" if fixers else "")
        kinds = sorted({v.get("kind", "") for v in r.get("violations", []) if v.get("kind")})
        test_class = str(r.get("test_class") or "-").rsplit(".", 1)[-1]
        table.add_row(
            str(n),
            escape(test_class),
            escape(str(device.get("id") or device.get("serial") or "-")),  # as device list shows it
            f"[{colours.get(status, 'white')}]{status}[/]",
            f"{blocking} ms" if isinstance(blocking, int) and blocking >= 0 else "-",
            ", ".join(kinds) or ("-" if not r.get("strict_mode_violations") else "yes"),
            round_text or "-",
        )
    console.print(table)
    for n, r in enumerate(results, 1):
        reason = r.get("reason_code")
        summary = escape(str(r.get("summary", "")))
        console.print(f"{n}. {summary}" + (f"  [dim]({escape(str(reason))})[/]" if reason else ""),
                      highlight=False)
        if reason == "compile_failed" and r.get("compile_rounds"):
            for e in (r["compile_rounds"][-1].get("errors") or [])[:5]:
                where = f"{e.get('file') or '?'}:{e.get('line') or '?'}"
                message = escape(f"{where} {e.get('message', '')}")
                console.print(f"   [red]e:[/] {message}", highlight=False)


def _per_device(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A sharded run's merged result as one result per device (its shard), others as they
    are."""
    out: list[dict[str, Any]] = []
    for r in results:
        if not r.get("shards"):
            out.append(r)
            continue
        for shard in r["shards"]:
            device = shard.get("device") or {}
            out.append({**shard, "tests": [t for t in r.get("tests") or []
                                           if t.get("device") == device.get("id")]})
    return out


def write_junit(path: Path, results: Sequence[dict[str, Any]]) -> None:
    """A JUnit XML report: a suite per result (device; a sharded run's, one per shard), its
    tests, and the verdict."""
    root = ET.Element("testsuites", name="droidwire")
    for r in _per_device(results):
        device = (r.get("device") or {}).get("id") or "no-device"
        tests = r.get("tests") or []
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"droidwire.{device}",
            tests=str(len(tests)),
            failures=str(sum(1 for t in tests if t.get("status") == "failed")),
            errors=str(sum(1 for t in tests if t.get("status") == "error")),
            skipped=str(sum(1 for t in tests if t.get("status") in ("ignored", "assumption_failure"))),
        )
        props = ET.SubElement(suite, "properties")
        for key in ("verification_status", "reason_code", "blocking_time_ms", "summary", "run_id"):
            ET.SubElement(props, "property", name=key, value=str(r.get(key, "")))
        for t in tests:
            case = ET.SubElement(
                suite, "testcase", classname=str(t.get("class", "")), name=str(t.get("name", ""))
            )
            status = t.get("status")
            if status in ("failed", "error"):
                element = ET.SubElement(case, "failure" if status == "failed" else "error")
                element.text = str(t.get("stack") or "")
            elif status in ("ignored", "assumption_failure"):
                ET.SubElement(case, "skipped")
            if int(t.get("attempts") or 1) > 1 or t.get("flaky"):
                case_props = ET.SubElement(case, "properties")
                ET.SubElement(case_props, "property", name="attempts", value=str(t.get("attempts")))
                ET.SubElement(case_props, "property", name="flaky", value=str(bool(t.get("flaky"))).lower())
            if t.get("logcat"):
                ET.SubElement(case, "system-out").text = _xml_text(str(t["logcat"]))
        ET.SubElement(suite, "system-out").text = str(r.get("summary", ""))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


_XML_ILLEGAL = dict.fromkeys(
    [c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)] + [0xFFFE, 0xFFFF], "\ufffd"
)


def _xml_text(text: str) -> str:
    """Text XML 1.0 can hold: a device's log may carry control characters."""
    return text.translate(_XML_ILLEGAL)


def _parse_fail_on(values: Sequence[str]) -> set[str]:
    wanted: set[str] = set()
    for value in values:
        for part in value.split(","):
            status = part.strip().upper()
            if not status:
                continue
            if status not in STATUSES:
                raise typer.BadParameter(
                    f"{part!r} is not one of {', '.join(STATUSES)}", param_hint="--fail-on"
                )
            wanted.add(status)
    return wanted


def _read_test(test: str) -> str:
    try:
        data = sys.stdin.buffer.read(MAX_TEST_BYTES + 1) if test == "-" else Path(test).read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {test}: {exc.strerror or exc}") from None
    if len(data) > MAX_TEST_BYTES:
        raise typer.BadParameter(f"{test} is larger than {MAX_TEST_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{test} is not UTF-8 text") from None
    if not text.strip():
        raise typer.BadParameter(f"{test} is empty")
    return text


def follow(
    client: Client,
    run_ids: Sequence[str],
    *,
    deadline_s: float,
    on_update: Callable[[dict[str, dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Poll the runs until each has finished; their results, in order."""
    runs: dict[str, dict[str, Any]] = {}
    end = time.monotonic() + deadline_s
    while True:
        for run_id in run_ids:
            if runs.get(run_id, {}).get("status") not in ("finished", "cancelled"):
                runs[run_id] = client.get(f"/v1/runs/{run_id}")
        if on_update is not None:
            on_update(runs)
        if all(runs[r].get("status") in ("finished", "cancelled") for r in run_ids):
            break
        if time.monotonic() > end:
            raise ApiError(0, "timeout", f"the runs did not finish within {deadline_s:g} s")
        time.sleep(POLL_S)
    results = []
    for run_id in run_ids:
        result = runs[run_id].get("result")
        if result is None:  # cancelled before it finished
            result = {"run_id": run_id, "verification_status": "PENDING",
                      "reason_code": "cancelled", "summary": "Inconclusive: the run was cancelled"}
        results.append(result)
    return results


class _Progress:
    """Each run's stages on stderr as they happen: a live display on a terminal, else one
    plain line per new stage (``run ID: compiling (round 2)``), flushed at once."""

    def __init__(self, err: Console, run_ids: Sequence[str]) -> None:
        self.err = err
        self.run_ids = list(run_ids)
        self.seen: dict[str, int] = {}
        self.live: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        if err.is_terminal:
            self.live = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                console=err, transient=True,
            )

    def __enter__(self) -> _Progress:
        if self.live is not None:
            self.live.start()
            for run_id in self.run_ids:
                self.tasks[run_id] = self.live.add_task(f"run {run_id[:8]}: queued", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def update(self, runs: dict[str, dict[str, Any]]) -> None:
        for run_id in self.run_ids:
            r = runs.get(run_id)
            if not r:
                continue
            done = stages(r)
            if self.live is not None:
                where = escape(str(r.get("device") or "no device"))
                self.live.update(self.tasks[run_id],
                                 description=f"[bold]{where}[/]  {escape(done[-1])}")
                continue
            first = self.seen.get(run_id, 0)
            for stage in done[first:]:
                device = f" on {r['device']}" if stage == "queued" and r.get("device") else ""
                print(f"run {run_id}: {stage}{device}", file=sys.stderr, flush=True)
            self.seen[run_id] = len(done)


def _follow_live(
    client: Client, run_ids: Sequence[str], deadline: float, err: Console
) -> list[dict[str, Any]]:
    """Follow the runs, showing their progress on stderr."""
    with _Progress(err, run_ids) as progress:
        return follow(client, run_ids, deadline_s=deadline, on_update=progress.update)


def outcome_code(results: Sequence[dict[str, Any]], fail_on: set[str]) -> int:
    """The exit code of a finished ``run``: 1 when a result's status is in ``fail_on``; else
    for the first PENDING result, 4 (no device matched), 5 (its device or bridge was
    unavailable) or 6 (any other PENDING); else 0."""
    statuses = [str(r.get("verification_status")) for r in results]
    if fail_on and any(s in fail_on for s in statuses):
        return int(ExitCode.ERROR)
    for r in results:
        if r.get("verification_status") == "PENDING":
            return int(PENDING_EXIT.get(str(r.get("reason_code")), ExitCode.PENDING))
    return int(ExitCode.OK)


def run(
    test: Annotated[str, typer.Argument(help="The Kotlin instrumented test file ('-': stdin).")],
    device: Annotated[
        list[str] | None,
        typer.Option("--device", "-d", help="Device selector: an id, 'all', a count, or e.g. "
                     "'sdk>=30'. Repeatable. Default: one device."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Project a build bridge serves (project_dir).")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=1, max=3600, help="Deadline of a run, seconds.")
    ] = None,
    retries: Annotated[
        int | None, typer.Option("--retries", min=0, max=3, help="Run the failed tests again "
                                 "(alone, -e class Cls#method) up to N times.")
    ] = None,
    shard: Annotated[
        int | None, typer.Option("--shard", min=1, max=32, help="Split the suite's test "
                                 "classes over N matching devices; one merged result.")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write a JUnit XML report to FILE.")
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option("--fail-on", help="Exit 1 when a result has this status "
                     "(CONFIRMED, PARTIAL, REFUTED, PENDING; repeatable or comma-separated)."),
    ] = None,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Compile, fix, run and judge a generated test on devices (the sandbox executor)."""
    failing = _parse_fail_on(fail_on or [])
    code = _read_test(test)
    body: dict[str, Any] = {"test_code": code}
    if device:
        body["device"] = list(device)
    if project:
        body["project_dir"] = project
    if timeout:
        body["timeout_s"] = timeout
    if retries is not None:
        body["retries"] = retries
    if shard is not None:
        body["shard"] = shard
    err = Console(stderr=True)
    with cli_errors(), Client(controller, token, timeout=60.0) as client:
        accepted = client.request("POST", "/v1/sandbox/execute", json_body=body,
                                  params={"wait": "false"})
        run_ids = list(accepted["run_ids"])
        # The ids at once: a client that loses its controller can still find its runs.
        err.print(f"accepted: {' '.join(run_ids)}", highlight=False)
        deadline = (timeout or 600.0) + 120.0
        try:
            results = _follow_live(client, run_ids, deadline, err)
        except KeyboardInterrupt:
            # Ctrl-C: the runs would go on without anyone waiting for them.
            for run_id in run_ids:
                try:
                    client.post(f"/v1/runs/{run_id}/cancel")
                except ApiError:
                    pass  # already over
            err.print(f"cancelled {len(run_ids)} run(s): {', '.join(run_ids)}")
            raise typer.Exit(130) from None
    if junit is not None:
        try:
            write_junit(junit, results)
        except OSError as exc:
            typer.echo(f"error: cannot write {junit}: {exc.strerror or exc}", err=True)
            raise typer.Exit(int(ExitCode.ERROR)) from None
    if json_out:
        print_json({"results": results})
    else:
        render_results(make_console(), results)
    exit_code = outcome_code(results, failing)
    if exit_code:
        raise typer.Exit(exit_code)
