"""The CLI as a newcomer meets it, against a live stack of real processes (tests/droidwire/stack.py):
in a pipe (no terminal), with ``CI=true``, and in pseudo-terminals narrow and wide.

What holds: machine-readable output is never wrapped or cut off a terminal; tables fit a
terminal and never cut an id; ``run`` shows its progress step by step; exit codes follow the
outcome (docs/cli.md#exit-codes); the pause switch shows everywhere; help reads as prose."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TIME_SCALE
from tests.droidwire.stack import ADMIN, Stack, live_stack, run_cli, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "gradle-workspace/app/src/androidTestExamples/java/com/droidwire/demo/examples"
           / "MainActivityExamplesTest.kt")
NARROW, WIDE = (60, 40), (220, 50)

# Each test runs droidwire processes (a second or more each on a loaded machine), and the
# first one also starts the stack.
pytestmark = [pytest.mark.adb, pytest.mark.timeout(600 * TIME_SCALE)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with live_stack(tmp_path_factory.mktemp("stack")) as live:
        for user in ("bob", "carol"):  # borrowers to lend the phone to
            made = live.cli("token", "create", "--kind", "user", user)
            assert made.code == 0, made.err
        yield live


@pytest.fixture(scope="module")
def confirmed_run(stack: Stack) -> str:
    """One run of the example test, which reads the disk on the main thread: its id."""
    done = stack.cli("run", str(EXAMPLE), "--json", env={**stack.env, "CI": "true"})
    assert done.code == 0, done.err
    [result] = json.loads(done.out)["results"]
    assert result["verification_status"] == "CONFIRMED"
    return str(result["run_id"])


def test_run_in_ci_prints_one_line_per_step_as_it_goes(stack: Stack) -> None:
    done = stack.cli("run", str(EXAMPLE), env={**stack.env, "CI": "true", "COLUMNS": "80"})
    assert done.code == 0, done.err
    lines = [line for line in done.err.splitlines() if line.startswith("run ")]
    run_id = lines[0].split()[1].rstrip(":")
    assert len(run_id) == 32  # whole, to paste into `runs show`
    stages = [line.split(": ", 1)[1] for line in lines]
    assert stages[0].startswith("queued")
    for stage in ("compiling", "installing", "running", "collecting logcat"):
        assert stage in stages, stages
    assert stages[-1] == "CONFIRMED (strict_mode_violation)"
    # The verdict table is not wrapped in a pipe, whatever COLUMNS says.
    summary = [line for line in done.out.splitlines() if line.startswith("1. ")]
    assert summary and "StrictMode violations:" in summary[0] and "(strict_mode_violation)" in summary[0]


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["narrow", "wide"])
def test_run_on_a_terminal_shows_a_live_display_then_the_verdict(
    stack: Stack, size: tuple[int, int]
) -> None:
    done = stack.cli("run", str(EXAMPLE), tty=size)
    assert done.code == 0, done.out
    assert "CONFIRMED" in done.out and "strict_mode_violation" in done.out
    assert "\x1b[?25l" in done.out  # the live display took the terminal (cursor hidden) …
    assert not re.search(r"^run [0-9a-f]{32}: ", done.out, re.MULTILINE)  # … not plain lines


def test_fail_on_confirmed_exits_1(stack: Stack) -> None:
    done = stack.cli("run", str(EXAMPLE), "--fail-on", "CONFIRMED")
    assert done.code == 1, done.err


def test_piped_logcat_is_whole_and_analyses_the_same(stack: Stack, confirmed_run: str) -> None:
    saved = stack.root / "run.log"
    env = {**stack.env, "COLUMNS": "80"}
    done = stack.cli("runs", "show", confirmed_run, "--logcat", env=env)
    assert done.code == 0, done.err
    saved.write_text(done.out)
    assert max(len(line) for line in done.out.splitlines()) > 120  # long lines kept whole
    analysed = stack.cli("logcat", "analyze", str(saved), "--json", env=env)
    assert analysed.code == 0, analysed.err
    kinds = {v["kind"] for v in json.loads(analysed.out)["violations"]}
    assert "DiskRead" in kinds
    human = stack.cli("logcat", "analyze", str(saved), env=env)
    assert "DiskRead" in human.out and "StrictMode violations: none" not in human.out


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["narrow", "wide"])
def test_tables_fit_a_terminal_and_never_cut_an_id(
    stack: Stack, confirmed_run: str, size: tuple[int, int]
) -> None:
    listed = stack.cli("device", "list", tty=size)
    assert listed.code == 0 and stack.device_id in listed.out, listed.out
    runs = stack.cli("runs", "list", tty=size)
    assert runs.code == 0 and confirmed_run in runs.out, runs.out
    grant = stack.cli("grant", "create", stack.serial, "bob", "--for", "1h")
    assert grant.code == 0, grant.err
    grants = stack.cli("grant", "list", tty=size)
    assert grants.code == 0 and grant.out.strip() in grants.out, grants.out
    assert "dev…" not in grants.out and "sin…" not in grants.out


def test_pipe_tables_are_not_wrapped(stack: Stack, confirmed_run: str) -> None:
    env = {**stack.env, "COLUMNS": "40", "CI": "true"}
    runs = stack.cli("runs", "list", "--kind", "sandbox", env=env)
    assert runs.code == 0, runs.err
    row = next(line for line in runs.out.splitlines() if confirmed_run in line)
    assert "StrictMode violations:" in row and "Blocking time" in row  # the summary, whole
    state = stack.cli("device", "state", stack.serial, "--json", env=env)  # an agent trace
    assert state.code == 0, state.err
    trace = json.loads(state.out)["trace_id"]
    agent = json.loads(stack.cli("runs", "list", "--kind", "agent", "--json", env=env).out)
    assert [r["id"] for r in agent["runs"]] == [trace] and agent["runs"][0]["kind"] == "agent"
    sandbox = json.loads(stack.cli("runs", "list", "--kind", "sandbox", "--json", env=env).out)
    assert trace not in {r["id"] for r in sandbox["runs"]}
    assert confirmed_run in {r["id"] for r in sandbox["runs"]}
    assert {r["kind"] for r in sandbox["runs"]} == {"sandbox"}
    every = json.loads(stack.cli("runs", "list", "--json", env=env).out)["runs"]
    assert {r["kind"] for r in every} == {"sandbox", "agent"}


def test_exit_codes_follow_the_outcome(stack: Stack) -> None:
    nope = stack.cli("run", str(EXAMPLE), "--device", "NOPE")
    assert nope.code == 4, (nope.out, nope.err)
    assert "no_device" in nope.out
    assert stack.cli("device", "shell", "NOPE", "--", "true").code == 4
    typo = stack.cli("run", str(EXAMPLE), "--device", "skd>=30")
    assert typo.code == 2 and "skd" in typo.err and "sdk" in typo.err
    past = stack.cli("grant", "create", stack.serial, "bob", "--until", "2020-01-01T00:00Z")
    negative = stack.cli("grant", "create", stack.serial, "bob", "--for", "-5m")
    assert past.code == negative.code == 2
    forever = stack.cli("grant", "create", stack.serial, "carol")
    assert forever.code == 0 and "until revoked" in forever.err
    path = stack.cli("device", "list", "--controller", stack.url + "/foo")
    assert path.code == 2 and "'/foo'" in path.err and "base URL" in path.err


def test_the_pause_file_shows_everywhere(stack: Stack) -> None:
    stack.pause_file.touch()
    try:
        wait_until("the device shows paused", lambda: stack.state() == "paused")
        listed = stack.cli("device", "list")
        assert re.search(rf"{re.escape(stack.device_id)}\s.*paused", listed.out), listed.out
        done = stack.cli("run", str(EXAMPLE), "--json")
        [result] = json.loads(done.out)["results"]
        assert result["reason_code"] == "device_paused" and "paused" in result["summary"]
        assert done.code == 5
        assert "sharing paused: the pause file" in stack.log("bridge")
    finally:
        stack.pause_file.unlink()
    wait_until("the device is served again", lambda: stack.state() == "device")
    assert "sharing resumed" in stack.log("bridge")


def _commands() -> list[list[str]]:
    from droidwire import command_tree

    out: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        out.append(path)
        for name, sub in (subs or {}).items():
            walk(sub, [*path, name])

    walk(command_tree(), [])
    return out


def test_help_reads_as_prose(stack: Stack) -> None:
    """Every command's --help (in-process, wide), and the ones the issue named in a terminal."""
    from typer.testing import CliRunner

    from droidwire import app

    bad_marks = ("<bool>", "<str>", "<list", "``", ":func:", ":class:", "unless )")
    runner = CliRunner()
    for path in _commands():
        done = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, prog_name="droidwire")
        assert done.exit_code == 0, (path, done.output)
        for bad in bad_marks:
            assert bad not in done.output, (path, bad)
    for path in (["bridge"], ["instrumentation", "parse"], ["controller"]):
        shown = run_cli(*path, "--help", env=stack.env, tty=WIDE)
        assert shown.code == 0, shown.out
        for bad in bad_marks:
            assert bad not in shown.out, (path, bad)
    bridge_help = " ".join(run_cli("bridge", "--help", env=stack.env, tty=WIDE).out.split())
    assert "unless the config file has a build section" in bridge_help.replace("│ ", "")


def test_logcat_follow_ends_non_zero_when_access_ends(stack: Stack) -> None:
    """A borrower's ``logcat -f`` whose loan is revoked: exit 3, not 0."""
    user = stack.cli("token", "create", "--kind", "user", "dave")
    assert user.code == 0, user.err
    grant = stack.cli("grant", "create", stack.serial, "dave")
    assert grant.code == 0, grant.err
    import subprocess

    from tests.droidwire.stack import DROIDWIRE

    env = {**stack.env, "DROIDWIRE_TOKEN": user.out.strip()}
    follow = subprocess.Popen([DROIDWIRE, "device", "logcat", stack.serial, "-f", "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        first = follow.stdout.readline()  # the stream is open: a first chunk came
        assert first.startswith("{"), first
        revoked = stack.cli("grant", "revoke", grant.out.strip())
        assert revoked.code == 0, revoked.err
        _, err = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 3, err
    assert "access to this device ended" in err
    assert ADMIN not in err


# -- start-up errors: one line, what is wrong and how to fix it, no retry loop ------------------


def _one_line_error(done_err: str) -> str:
    lines = [line for line in done_err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, done_err
    assert "Traceback" not in done_err, done_err
    return errors[0]


def test_a_bridge_given_a_path_stops_at_once_and_names_the_url(stack: Stack) -> None:
    done = stack.cli("bridge", "--controller", stack.url + "/foo", "--token-file", "bridge.token",
                     "--adb-port", str(stack.adb_port), "--no-start-adb")
    assert done.code == 2
    line = _one_line_error(done.err)
    assert "no droidwire bridge endpoint" in line and "--controller" in line
    assert "token" not in line.split("--controller")[0]


def test_a_bridge_given_a_wrong_port_fails_fast(stack: Stack) -> None:
    from tests.adb_support import free_port

    port = free_port()
    done = stack.cli("bridge", "--controller", f"http://127.0.0.1:{port}", "--token-file",
                     "bridge.token", "--adb-port", str(stack.adb_port), "--no-start-adb",
                     "--start-budget", "1")
    assert done.code == 3
    line = _one_line_error(done.err)
    assert f"127.0.0.1:{port}" in line and "--controller" in line and "--start-budget" in line
    assert " lost " not in done.err  # it never connected: nothing was lost


def test_a_bridge_without_a_token_names_the_flag(stack: Stack) -> None:
    done = stack.cli("bridge", "--controller", stack.url, "--adb-port", str(stack.adb_port),
                     "--no-start-adb")
    assert done.code == 1
    assert "--token-file" in _one_line_error(done.err)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--db", "postgresql://nobody@127.0.0.1:1/x"], "--db"),
        (["--db", "mysql://u@h/db"], "unsupported database URL"),
        (["--redis", "http://x"], "redis://"),
        (["--redis", "redis://127.0.0.1:1/0"], "--redis"),
    ],
)
def test_controller_start_up_errors_are_one_line(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    from tests.droidwire.stack import base_env

    env = {**base_env(tmp_path), "DROIDWIRE_BOOTSTRAP_TOKEN": ADMIN}
    done = run_cli("controller", "--port", "0", *args, env=env, timeout=60)
    assert done.code == 2
    assert needle in _one_line_error(done.err)


def test_a_first_start_without_an_admin_is_refused_and_says_how(tmp_path: Path) -> None:
    from tests.droidwire.stack import base_env

    env = base_env(tmp_path)
    done = run_cli("controller", "--port", "0", env=env, timeout=60)
    assert done.code == 2
    line = _one_line_error(done.err)
    assert "no admin" in line and "DROIDWIRE_BOOTSTRAP_TOKEN" in line
