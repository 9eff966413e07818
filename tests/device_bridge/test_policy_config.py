"""The host owner's TOML config (device_bridge.config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_bridge.config import ConfigError, HostConfig, load_host_config
from device_bridge.policy import Policy, Profile
from protocol.errors import RpcError

EXAMPLE = """
[adb]
server_port = 15037
connect = ["192.168.1.20:5555"]

[policy]
profile = "no-shell"
expose = ["R58M123ABC", "192.168.1.20:5555"]
hide = ["192.168.1.20:5555"]
pause_file = "PAUSE"

[policy.devices]
"R58M123ABC" = "full"
"""


def test_example_config(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(EXAMPLE.replace("PAUSE", str(tmp_path / "paused")))
    cfg = load_host_config(path)
    assert cfg.adb.server_port == 15037
    assert cfg.adb.connect == ("192.168.1.20:5555",)
    assert cfg.policy.profile is Profile.NO_SHELL
    policy = Policy(cfg.policy)
    assert policy.check_shell("R58M123ABC", "id") == ["id"]
    assert not policy.is_exposed("192.168.1.20:5555")
    (tmp_path / "paused").touch()
    with pytest.raises(RpcError):
        policy.check_shell("R58M123ABC", "id")


def test_no_file_means_defaults() -> None:
    assert load_host_config(None) == HostConfig()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[adb]\nport = 1\n", "adb"),
        ("[adb]\nserver_port = 70000\n", "server_port"),
        ("[adb]\nconnect = ['nocolon']\n", "connect"),
        ("[policy]\nprofile = 'root'\n", "profile"),
        ("[polcy]\nprofile = 'full'\n", "unknown table"),
        ("adb = 3\n", "tables"),
        ("[policy\n", "TOML"),
    ],
)
def test_bad_configs_name_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as info:
        load_host_config(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_host_config(tmp_path / "nope.toml")
