"""``droidwire sim-device``: its help says what is and is not simulated; ``--auth`` serves a
secure phone that a host key file trusts, and SIGUSR1 taps "Allow" for a waiting host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from droidwire import app
from tests.adb_support import free_port
from tests.device_bridge.sim.conformance.conftest import CLIENT_TIMEOUT_S, HostKey

pytestmark = pytest.mark.timeout(60)


def test_help_says_what_is_and_is_not_simulated():
    result = CliRunner().invoke(app, ["sim-device", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for said in ("What it simulates", "user-build phone", "forward and reverse",
                 "What it does not", "no USB", "no root", "sideload", "--auth", "--adb-keys",
                 "--auto-allow", "SIGUSR1"):
        assert said in text, said


class _Served:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        droidwire = Path(sys.executable).with_name("droidwire")
        self.proc = subprocess.Popen(
            [str(droidwire), "sim-device", "--port", str(self.port), "--noise", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"})
        self.lines: list[str] = []
        self.wait_for("listening on")

    def wait_for(self, text: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the process prints as events happen: no polling
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"sim-device ended before printing {text!r}: {self.lines}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.communicate(timeout=CLIENT_TIMEOUT_S)
        finally:
            self.proc.kill()
            self.proc.wait()


def test_auth_with_a_key_file_and_sigusr1_to_allow(tmp_path, host_key: HostKey,
                                                    other_host_key: HostKey):
    from adb_shell.adb_device import AdbDeviceTcp

    keys = tmp_path / "adb_keys"
    keys.write_text(host_key.public + "\n")
    served = _Served("--adb-keys", str(keys))
    try:
        assert "secure" in served.lines[0]
        dev = AdbDeviceTcp("127.0.0.1", served.port, default_transport_timeout_s=CLIENT_TIMEOUT_S)
        dev.connect(rsa_keys=[host_key.signer], auth_timeout_s=CLIENT_TIMEOUT_S)
        try:
            assert dev.shell("getprop ro.adb.secure") == "1\n"
        finally:
            dev.close()
        # An unknown key waits at the prompt until the user (SIGUSR1) allows it.
        result: dict[str, object] = {}

        def connect() -> None:
            other = AdbDeviceTcp("127.0.0.1", served.port,
                                 default_transport_timeout_s=CLIENT_TIMEOUT_S)
            try:
                other.connect(rsa_keys=[other_host_key.signer], auth_timeout_s=CLIENT_TIMEOUT_S)
                result["out"] = other.shell("echo allowed")
            except BaseException as exc:
                result["error"] = exc
            finally:
                other.close()

        t = threading.Thread(target=connect)
        t.start()
        line = served.wait_for("authorization requested")
        assert "RSA key fingerprint" in line
        served.proc.send_signal(signal.SIGUSR1)
        served.wait_for("allowed 1 waiting host")
        t.join(CLIENT_TIMEOUT_S * 2)
        assert result == {"out": "allowed\n"}
    finally:
        served.stop()


def test_a_bad_key_file_is_a_usage_error(tmp_path):
    keys = tmp_path / "adb_keys"
    keys.write_text("not-a-key user@host\n")
    result = CliRunner().invoke(app, ["sim-device", "--adb-keys", str(keys), "--port", "0"])
    assert result.exit_code == 2
    assert "not an adb public key" in result.output


def test_an_unknown_pace_is_a_usage_error_naming_the_known_ones():
    result = CliRunner().invoke(app, ["sim-device", "--pace", "snail", "--port", "0"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "unknown pace 'snail'; known: instant, phone" in " ".join(result.output.split())
