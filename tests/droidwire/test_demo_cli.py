"""``droidwire demo --json`` as a new user runs it: a process of its own that starts a
controller, a bridge, a private adb server and a simulated device, and leaves none behind."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from device_bridge.build import kotlinc_ready
from tests.conftest import IN_CI, TIME_SCALE

pytestmark = pytest.mark.adb

DISK_READ_SUMMARY = "StrictMode violations: DiskRead | Blocking time: "


def test_demo_json_exits_0_with_the_three_verdicts() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANDROID_ADB_SERVER_PORT", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-c", "from droidwire import main; main()", "demo", "--json"],
        env=env, capture_output=True, text=True, timeout=180 * TIME_SCALE,
        stdin=subprocess.DEVNULL, check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["verification_status"] for r in results] == ["CONFIRMED", "CONFIRMED", "REFUTED"]
    disk = results[0]
    assert disk["blocking_time_ms"] >= 300 and disk["has_violations"]
    assert disk["summary"] == f"{DISK_READ_SUMMARY}{disk['blocking_time_ms']}ms"
    # The real compiler judges the demo's tests wherever `make setup` fetched it (always in CI).
    kotlinc = kotlinc_ready() is None
    assert kotlinc or not IN_CI, kotlinc_ready()
    assert disk["toolchain"] == ("kotlinc" if kotlinc else "simulated")
    fixed = results[1]
    assert [r["fixer"] for r in fixed["compile_rounds"]] == [None, "rules"]
    if kotlinc:  # the fix round was driven by kotlinc's own diagnostic
        first = fixed["compile_rounds"][0]
        assert first["check"]["compiler"] == "kotlinc 2.0.21"
        assert {e["message"] for e in first["errors"]} == {"Unresolved reference 'Log'."}
    assert results[2]["reason_code"] == "no_evidence"
    # Its private adb server is gone: nothing listens on that port any more.
    match = re.search(r"adb server on port (\d+)", done.stderr)
    assert match is not None, done.stderr
    with pytest.raises(ConnectionRefusedError), socket.create_connection(
        ("127.0.0.1", int(match[1])), timeout=5
    ):
        pass
