"""Example configs and the install notes: what they show loads through the real loaders."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from controller.config import (
    ENV_BOOTSTRAP_TOKEN,
    ENV_DB,
    ENV_REDIS,
    ControllerConfig,
)
from device_bridge.build import from_config
from device_bridge.config import load_host_config
from tests.deploy.support import DEPLOY, REPO, cli_context, read_env_file

EXAMPLES = DEPLOY / "examples"
DOCS = [DEPLOY / "raspberry-pi.md", DEPLOY / "README.md"]


def fences(path: Path, language: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_example_bridge_config_is_device_only_and_loads() -> None:
    path = EXAMPLES / "bridge.toml"
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    assert "build" not in raw, "the Pi example builds nothing (no Android build tools)"
    assert "token" not in raw["controller"], "the token belongs in token_file, not in the config"
    config = load_host_config(path)
    assert config.build is None
    assert all(urlsplit(url).scheme == "wss" for url in config.controller.urls)
    assert config.controller.verify and not config.controller.allow_plain
    assert config.controller.token_file == "/etc/droidwire/bridge.token"


def test_trial_bridge_config_builds_with_the_simulated_toolchain(tmp_path: Path) -> None:
    config = load_host_config(DEPLOY / "docker" / "bridge-compose.toml")
    assert config.build is not None
    # The [build] table is accepted by the build service (state kept out of the real path).
    service = from_config({**config.build, "state_dir": str(tmp_path)}, base=config.base)
    assert service is not None


def test_example_controller_env_has_known_keys_and_no_secret() -> None:
    values = read_env_file(EXAMPLES / "controller.env")
    assert set(values) == {ENV_DB, ENV_REDIS, ENV_BOOTSTRAP_TOKEN}
    assert all(value == "" for value in values.values()), "a secret is committed"
    # Empty values mean "not set": the controller starts on its defaults.
    config = ControllerConfig.from_env(values)
    assert config.bootstrap_token is None and config.redis_url is None


def test_controller_env_accepts_filled_in_values() -> None:
    values = read_env_file(EXAMPLES / "controller.env") | {
        ENV_DB: "postgresql://droidwire:pw@db.internal:5432/droidwire",
        ENV_REDIS: "redis://redis.internal:6379/0",
        ENV_BOOTSTRAP_TOKEN: "x" * 43,
    }
    config = ControllerConfig.from_env(values)
    assert config.redis_url == values[ENV_REDIS]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_toml_in_the_docs_loads(doc: Path, tmp_path: Path) -> None:
    for block in fences(doc, "toml"):
        path = tmp_path / "bridge.toml"
        path.write_text(block, encoding="utf-8")
        load_host_config(path)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_commands_in_the_docs_exist(doc: Path) -> None:
    """Every ``droidwire …`` line in a shell block parses with the real CLI; every file the
    notes install from the source tree exists."""
    checked = 0
    for block in fences(doc, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("#")[0].split(">")[0].split("|")[0])
            for word in words:
                if word.startswith("/opt/droidwire/src/"):
                    assert (REPO / word.removeprefix("/opt/droidwire/src/")).exists(), word
            # The command itself: `droidwire …` or a path to the console script.
            if not words or "--help" in words:
                continue
            if words[0] != "droidwire" and not words[0].endswith("/bin/droidwire"):
                continue
            cli_context(words[1:])
            checked += 1
    # `docker run … IMAGE NOUN …`: the images' entrypoint is droidwire.
    for block in fences(doc, "sh"):
        for m in re.finditer(r"(?m)^docker run .* droidwire/(?:controller|bridge)(?::\S+)? (\S.*)$", block):
            cli_context(shlex.split(m.group(1)))
            checked += 1
    assert checked, f"{doc.name}: no droidwire command found to check"
