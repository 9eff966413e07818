"""The fleet's client commands over REST (docs/cli.md, "Running a lab"): device labels and
pools, per-user quotas, and listing and forgetting bridges — each ``droidwire`` a process of its
own against a live stack (controller, simulated phone, bridge; tests/droidwire/stack.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import TIME_SCALE
from tests.droidwire.stack import Stack, live_stack

pytestmark = [pytest.mark.adb, pytest.mark.timeout(600 * TIME_SCALE)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with live_stack(tmp_path_factory.mktemp("fleet")) as live:
        made = live.cli("token", "create", "--kind", "user", "dave")
        assert made.code == 0, made.err
        (live.root / "dave.token").write_text(made.out.strip())
        yield live


def _as_dave(stack: Stack) -> dict[str, str]:
    return {**stack.env, "DROIDWIRE_TOKEN": (stack.root / "dave.token").read_text()}


def test_an_admin_labels_a_device_and_a_selector_sees_it(stack: Stack) -> None:
    done = stack.cli("device", "label", stack.serial, "lab-a", "usb", "--pool", "ci", "--json")
    assert done.code == 0, done.err
    device = json.loads(done.out)
    assert {"lab-a", "usb"} <= set(device["labels"]) and device["pool"] == "ci"
    shown = stack.cli("device", "label", stack.serial, "lab-b")
    assert shown.code == 0, shown.err
    assert "lab-b" in shown.out and "lab-a" not in shown.out  # replaced, pool cleared
    listed = {d["id"]: d for d in json.loads(stack.cli("device", "list", "--json").out)}
    assert "lab-b" in listed[stack.device_id]["labels"]
    assert listed[stack.device_id]["pool"] is None


def test_labels_are_for_admins(stack: Stack) -> None:
    done = stack.cli("device", "label", stack.serial, "mine", env=_as_dave(stack))
    assert done.code in (3, 4), done.err  # forbidden, or not a device dave may see
    assert done.err.startswith("error: ")


def test_quotas_show_and_change_one_field_at_a_time(stack: Stack) -> None:
    shown = stack.cli("user", "limits", "dave", "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out) == {"user": "dave", "max_running": None, "max_queued": None}
    assert stack.cli("user", "limits", "dave", "--max-running", "2").code == 0
    done = stack.cli("user", "limits", "dave", "--max-queued", "5", "--json")
    assert done.code == 0, done.err
    # Setting one quota keeps the other (the API replaces both; the CLI sends both).
    assert json.loads(done.out) == {"user": "dave", "max_running": 2, "max_queued": 5}
    cleared = stack.cli("user", "limits", "dave", "--max-running", "none")
    assert cleared.code == 0, cleared.err
    assert "max-running: none" in cleared.out and "max-queued: 5" in cleared.out
    # A user reads their own quotas, and may not change them.
    own = stack.cli("user", "limits", "dave", "--json", env=_as_dave(stack))
    assert own.code == 0 and json.loads(own.out)["max_queued"] == 5
    refused = stack.cli("user", "limits", "dave", "--max-queued", "50", env=_as_dave(stack))
    assert refused.code == 3, refused.err


@pytest.mark.parametrize("value", ["0", "-1", "two"], ids=["zero", "negative", "word"])
def test_a_bad_quota_is_a_usage_error(stack: Stack, value: str) -> None:
    done = stack.cli("user", "limits", "dave", "--max-running", value)
    assert done.code == 2, done.err
    assert "--max-running" in done.err


def test_bridge_list_and_forget(stack: Stack) -> None:
    listed = stack.cli("bridge", "list", "--json")
    assert listed.code == 0, listed.err
    states = {b["name"]: b["state"] for b in json.loads(listed.out)}
    assert states["my-desk"] == "connected"
    # A connected bridge is not forgotten.
    busy = stack.cli("bridge", "forget", "my-desk")
    assert busy.code == 1 and "error: " in busy.err
    # One that never came back (a token made for it, never used) is, with its token.
    assert stack.cli("token", "create", "--kind", "bridge", "old-pi").code == 0
    done = stack.cli("bridge", "forget", "old-pi", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"forgotten": "old-pi", "kind": "bridge"}
    names = {b["name"] for b in json.loads(stack.cli("bridge", "list", "--json").out)}
    assert "old-pi" not in names and "my-desk" in names
    tokens = json.loads(stack.cli("token", "list", "--json").out)
    assert all(not (t["name"] == "old-pi" and not t["revoked"]) for t in tokens)
    gone = stack.cli("bridge", "forget", "old-pi")
    assert gone.code == 4, gone.err
