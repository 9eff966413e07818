"""Small pieces of the CLI's output and wording, without a stack."""

from __future__ import annotations

import pytest

from controller.executor.executor import compile_failed_detail
from controller.executor.selection import parse_selector
from droidwire.help import plain_type
from droidwire.output import NO_WRAP_WIDTH, console
from droidwire.run import outcome_code, stages
from protocol.errors import RpcError


def test_help_type_tags_become_words() -> None:
    assert plain_type("<str>") == "TEXT"
    assert plain_type("<list[str]>") == "TEXT"
    assert plain_type("<int>") == "INTEGER"
    assert plain_type("<float range>") == "FLOAT RANGE"
    assert plain_type("<path>") == "PATH"
    assert plain_type("<bool>") is None
    assert plain_type("FILE|-") == "FILE|-"  # an explicit metavar stays


def test_a_console_off_a_terminal_never_wraps(capsys: pytest.CaptureFixture[str]) -> None:
    out = console()
    assert not out.is_terminal and out.width == NO_WRAP_WIDTH
    line = "x" * 500 + " [not markup]"
    out.print(line, markup=False)
    assert capsys.readouterr().out == line + "\n"


def test_compile_failed_wording() -> None:
    assert compile_failed_detail(0, "no_fix") == \
        "the test does not compile and no fix was tried (no fix found)"
    assert compile_failed_detail(1, "unchanged_errors") == \
        "still failing after 1 fix round (a fix left the same errors)"
    assert compile_failed_detail(3, "max_rounds") == "still failing after 3 fix rounds"


def test_a_misspelt_property_is_a_bad_request_not_a_device_id() -> None:
    with pytest.raises(RpcError) as info:
        parse_selector("skd>=30")
    assert info.value.code.value == "bad_request" and "sdk" in info.value.message
    parse_selector("my-desk~127.0.0.1:5555")  # ids hold no comparison
    parse_selector("sdk>=30")


def test_stages_list_each_step_once_with_rounds() -> None:
    def rpc(method: str) -> dict[str, object]:
        return {"kind": "rpc", "detail": {"method": method}}

    run = {"status": "finished", "verdict": "CONFIRMED",
           "result": {"reason_code": "strict_mode_violation"},
           "steps": [rpc("workspace.compile"), {"kind": "fix", "detail": {}},
                     rpc("workspace.compile"), rpc("device.install"), rpc("device.install"),
                     rpc("device.instrument")]}
    assert stages(run) == ["queued", "compiling", "fixing compile errors (round 1/3)",
                           "compiling (round 2)", "installing", "running",
                           "CONFIRMED (strict_mode_violation)"]


@pytest.mark.parametrize(
    ("statuses", "fail_on", "code"),
    [
        ([("CONFIRMED", "strict_mode_violation")], set(), 0),
        ([("CONFIRMED", "strict_mode_violation")], {"CONFIRMED"}, 1),
        ([("PENDING", "no_device")], set(), 4),
        ([("PENDING", "device_paused")], set(), 5),
        ([("PENDING", "bridge_unavailable")], set(), 5),
        ([("PENDING", "compile_failed")], set(), 6),
        ([("PENDING", "timeout")], {"PENDING"}, 1),
        ([("REFUTED", "no_evidence"), ("PENDING", "no_device")], set(), 4),
    ],
)
def test_run_exit_codes_by_outcome(
    statuses: list[tuple[str, str]], fail_on: set[str], code: int
) -> None:
    results = [{"verification_status": s, "reason_code": r} for s, r in statuses]
    assert outcome_code(results, fail_on) == code


def test_a_usage_error_off_a_terminal_is_one_line(tmp_path: object) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "from droidwire import main; main()", "run", "no-such.kt"],
        capture_output=True, text=True, timeout=120, check=False,
        env={"COLUMNS": "40", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: usage: Invalid value: cannot read no-such.kt: No such file or directory "
        "(see droidwire run --help)"
    ]


def test_no_help_text_holds_what_rich_would_take_as_markup() -> None:
    """``[build]`` or ``[default: …]`` in a help text vanish from ``--help`` (rich markup)."""
    import re

    from droidwire import command_tree

    def walk(command: object, path: list[str]) -> list[tuple[list[str], object]]:
        out = [(path, command)]
        for name, sub in (getattr(command, "commands", None) or {}).items():
            out += walk(sub, [*path, name])
        return out

    found = []
    for path, command in walk(command_tree(), []):
        texts = [getattr(command, "help", None) or ""]
        texts += [getattr(p, "help", None) or "" for p in getattr(command, "params", [])]
        found += [(path, t) for t in texts if re.search(r"(?<!\\)\[[a-zA-Z#/@]", t)]
    assert not found
