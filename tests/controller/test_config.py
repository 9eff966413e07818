from __future__ import annotations

from pathlib import Path

import pytest
import typer

from controller.config import (
    DEFAULT_AGENT_FRAME_BYTES,
    DEFAULT_AGENT_FRAME_TRACES,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ConfigError,
    ControllerConfig,
    default_db_url,
)
from protocol.settings import DEFAULTS


def test_defaults() -> None:
    config = ControllerConfig()
    assert (config.host, config.port, config.redis_url, config.bootstrap_token) == (
        DEFAULT_HOST,
        DEFAULT_PORT,
        None,
        None,
    )
    assert config.settings is DEFAULTS
    assert config.db_url == default_db_url()


def test_default_db_lives_in_the_users_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/data/home")
    assert default_db_url() == "sqlite:////data/home/droidwire/controller.db"


def test_from_env_then_overrides() -> None:
    env = {
        "DROIDWIRE_DB": "postgresql://u@db/dw",
        "DROIDWIRE_REDIS": "redis://r:6379/0",
        "DROIDWIRE_BOOTSTRAP_TOKEN": "b" * 20,
    }
    config = ControllerConfig.from_env(env, port=9000, db_url=None)
    assert (config.db_url, config.redis_url, config.port) == (
        "postgresql://u@db/dw",
        "redis://r:6379/0",
        9000,
    )
    assert config.bootstrap_token == "b" * 20
    assert "b" * 20 not in repr(config)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bootstrap_token": "short"},
        {"bootstrap_token": "has spaces in the middle"},
        {"bootstrap_token": "ünicode-tokens-are-unusable"},
        {"db_url": "mysql://u@h/d"},
        {"port": 70000},
        {"agent_frame_traces": 0},
        {"agent_frame_bytes": 0},
    ],
)
def test_invalid_values_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ControllerConfig(**kwargs)  # type: ignore[arg-type]


def test_the_agent_frame_bounds_come_from_the_cli(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from droidwire import serve

    seen: list[ControllerConfig] = []
    monkeypatch.setattr(serve, "run", lambda config, **_: seen.append(config) or True)
    app = typer.Typer()
    app.command()(serve.controller)
    result = CliRunner().invoke(
        app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "--agent-frame-traces", "3", "--agent-frame-bytes", "9",
              "--bootstrap-token", "b" * 24],  # a first start needs an admin (docs/cli.md)
    )
    assert result.exit_code == 0, result.output
    assert (seen[0].agent_frame_traces, seen[0].agent_frame_bytes) == (3, 9)
    assert ControllerConfig().agent_frame_traces == DEFAULT_AGENT_FRAME_TRACES
    assert ControllerConfig().agent_frame_bytes == DEFAULT_AGENT_FRAME_BYTES
