"""The bridge's systemd unit and udev rule."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from device_bridge.connection import BudgetExhausted, LinkError, LinkRefused
from tests.conftest import require_or_skip
from tests.deploy.support import DEPLOY, REPO, cli_context

UNIT = DEPLOY / "systemd" / "droidwire-bridge.service"
RULES = DEPLOY / "udev" / "51-droidwire-android.rules"


@pytest.fixture(scope="module")
def unit() -> configparser.ConfigParser:
    # strict: a key given twice in one section is an error (systemd would take both or the
    # last; either way a reader of the file would be misled).
    parser = configparser.ConfigParser(strict=True, interpolation=None, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(UNIT.read_text(encoding="utf-8"), source=str(UNIT))
    return parser


def test_sections(unit: configparser.ConfigParser) -> None:
    assert unit.sections() == ["Unit", "Service", "Install"]
    assert "network-online.target" in unit["Unit"]["After"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_execstart_runs_the_console_script(unit: configparser.ConfigParser) -> None:
    argv = shlex.split(unit["Service"]["ExecStart"])
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert argv[0].startswith("/") and argv[0].rsplit("/", 1)[1] in scripts
    ctx = cli_context(argv[1:])
    assert ctx.info_name == "bridge"
    # The config lives where the install notes put it, and no secret is on the command line.
    assert str(ctx.params["config"]) == "/etc/droidwire/bridge.toml"
    assert ctx.params["token"] is None
    assert "/etc/droidwire/bridge.toml" in (DEPLOY / "raspberry-pi.md").read_text(encoding="utf-8")


def test_restart_stops_on_the_terminal_exit_code(unit: configparser.ConfigParser) -> None:
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    prevented = {int(code) for code in service["RestartPreventExitStatus"].split()}
    # Refused by the controller (401/403, replaced, incompatible): retrying cannot help.
    assert LinkRefused.exit_code in prevented
    # The controller unreachable for the budget, or a crash: worth another try later.
    assert BudgetExhausted.exit_code not in prevented
    assert LinkError.exit_code not in prevented
    assert int(service["RestartSec"]) >= 5
    assert int(unit["Unit"]["StartLimitBurst"]) >= 1


def test_hardening(unit: configparser.ConfigParser) -> None:
    service = unit["Service"]
    assert service["User"] not in ("", "root", "0")
    assert service["Group"] not in ("", "root", "0")
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "DevicePolicy": "closed",
    }
    for key, value in expected.items():
        assert service.get(key) == value, key
    # USB phones: device nodes of the usb_device class only, and not PrivateDevices (that
    # would hide /dev/bus/usb).
    assert "PrivateDevices" not in service
    assert service["DeviceAllow"].split()[0] == "char-usb_device"
    families = set(service["RestrictAddressFamilies"].split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    # The only writable place is the state directory, which is also HOME (adb keys).
    assert service["StateDirectory"] == "droidwire"
    assert "HOME=/var/lib/droidwire" in service["Environment"].split()
    assert service["WorkingDirectory"] == "/var/lib/droidwire"
    assert service["EnvironmentFile"].startswith("-/etc/droidwire/")


@pytest.fixture
def installable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's console script (verify wants it)."""
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is missing (make test installs it)")
    script = Path(sys.executable).with_name("droidwire")
    text = UNIT.read_text(encoding="utf-8").replace("/opt/droidwire/venv/bin/droidwire", str(script))
    path = tmp_path / UNIT.name
    path.write_text(text, encoding="utf-8")
    return path


def test_systemd_accepts_every_key(installable_unit: Path) -> None:
    # verify exits 0 even for unknown keys: it only warns, so any output is a failure.
    done = subprocess.run(
        ["systemd-analyze", "verify", str(installable_unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stderr


def test_systemd_rates_the_exposure_low(installable_unit: Path) -> None:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(installable_unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    if found is None:
        pytest.skip(f"this systemd-analyze cannot rate a unit offline: {done.stderr.strip()}")
    # 0 (locked down) … 10 (exposed); "OK" is below 5. The USB access costs a little.
    assert float(found.group(1)) <= 3.0, done.stdout


def test_udev_rule_gives_phones_to_the_service_group(unit: configparser.ConfigParser) -> None:
    groups = unit["Service"]["SupplementaryGroups"].split()
    rules = [
        line for line in RULES.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules
    for rule in rules:
        group = re.search(r'GROUP="([^"]+)"', rule)
        assert group and group.group(1) in groups
        assert 'SUBSYSTEM=="usb"' in rule
        assert re.search(r'MODE="06[0-6]0"', rule), "never world-writable"
        # The adb interface: class ff, subclass 42, protocol 01.
        assert "ff4201" in rule
