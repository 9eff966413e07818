"""The bridge's connection config: [controller] and [link] tables, flags/env as overrides."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from device_bridge.bridge import ssl_context
from device_bridge.config import ConfigError, HostConfig, load_host_config
from droidwire.bridge import _split
from protocol.settings import DEFAULTS

EXAMPLE = """
[controller]
url = ["wss://a.example", "wss://b.example:8443"]
token_file = "TOKEN"

[adb]
server_port = 15037
connect = ["192.168.1.20:5555"]

[link]
concurrency = 4
reconnect_budget_s = 600
ping_interval_s = 0

[build]
toolchain = "simulated"
"""


def test_example_and_overrides(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    path = tmp_path / "bridge.toml"
    path.write_text(EXAMPLE.replace("TOKEN", str(token)))
    cfg = load_host_config(path)
    assert cfg.controller.urls == ("wss://a.example", "wss://b.example:8443")
    assert cfg.controller.resolve_token() == "s3cret"
    settings = cfg.link.settings()
    assert settings.handler_concurrency == 4
    assert settings.reconnect_budget_s == 600
    assert settings.ping_interval_s is None  # 0 turns the keepalive off
    assert settings.ping_timeout_s == DEFAULTS.ping_timeout_s
    assert cfg.build == {"toolchain": "simulated"} and cfg.base == tmp_path
    # flags and environment win over the file; None means "not given"
    over = load_host_config(
        path,
        {
            "controller.url": ["https://c.example"],
            "controller.token": "flag-token",
            "link.concurrency": 2,
            "adb.connect": None,
        },
    )
    assert over.controller.urls == ("https://c.example",)
    assert over.controller.resolve_token() == "flag-token"
    assert over.link.settings().handler_concurrency == 2
    assert over.adb.connect == ("192.168.1.20:5555",)


def test_defaults_need_a_token() -> None:
    cfg = load_host_config(None)
    assert cfg == HostConfig()
    assert cfg.link.settings() == DEFAULTS
    with pytest.raises(ConfigError, match="no bridge token"):
        cfg.controller.resolve_token()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"controller.url": ["ws://10.0.0.5:8000"]}, "plain ws://"),
        ({"controller.url": ["wss://c.example/?token=x"]}, "Authorization"),
        ({"controller.url": ["ftp://c.example"]}, "wss://"),
        ({"link.concurrency": 0}, "concurrency"),
        ({"link.backoff_factor": 0.5}, "backoff_factor"),
        ({"link.nonsense": 1}, "unknown"),
        ({"controller.verify": "maybe"}, "verify"),
    ],
)
def test_bad_values_name_the_key(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_host_config(None, overrides)


def test_plain_ws_to_loopback_or_when_allowed() -> None:
    assert load_host_config(None, {"controller.url": ["ws://127.0.0.1:8000"]})
    assert load_host_config(None, {"controller.url": ["ws://localhost:8000"]})
    cfg = load_host_config(
        None, {"controller.url": ["ws://10.0.0.5:8000"], "controller.allow_plain": True}
    )
    assert cfg.controller.allow_plain


def test_tls_context(tmp_path: Path) -> None:
    assert ssl_context(load_host_config(None, {"controller.url": ["ws://127.0.0.1:1"]})) is None
    verified = ssl_context(load_host_config(None, {"controller.url": ["wss://c.example"]}))
    assert verified is not None and verified.verify_mode is ssl.CERT_REQUIRED
    off = load_host_config(
        None, {"controller.url": ["wss://c.example"], "controller.verify": False}
    )
    context = ssl_context(off)
    assert context is not None and context.verify_mode is ssl.CERT_NONE
    missing = load_host_config(
        None, {"controller.url": ["wss://c.example"], "controller.ca": str(tmp_path / "no.pem")}
    )
    with pytest.raises(ConfigError, match=r"controller\.ca"):
        ssl_context(missing)


def test_repeated_flags_and_env_lists() -> None:
    assert _split(["wss://a", "wss://b,wss://c"]) == ["wss://a", "wss://b", "wss://c"]
    assert _split(None) is None


def test_device_profiles_from_flags_merge_with_the_file(tmp_path: Path) -> None:
    from droidwire.bridge import _pairs

    path = tmp_path / "bridge.toml"
    path.write_text('[policy.devices]\n"R58M" = "full"\n')
    flags = _pairs(["10.0.0.7:5555=instrument-only"])
    assert flags == {"10.0.0.7:5555": "instrument-only"}
    cfg = load_host_config(path, {"policy.devices": flags, "policy.hide": ["emulator-5554"]})
    assert {k: v.value for k, v in cfg.policy.devices.items()} == {
        "R58M": "full",
        "10.0.0.7:5555": "instrument-only",
    }
    assert cfg.policy.hide == frozenset({"emulator-5554"})
    with pytest.raises(ConfigError, match="profile"):
        load_host_config(None, {"policy.devices": {"x": "root"}})
