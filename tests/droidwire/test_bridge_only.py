"""The bridge-only install (``pip install droidwire``, no extras; docs/deploy.md): ``droidwire
bridge`` and the client commands run without the controller's packages and never import them,
and a command that needs an extra says which one to install.

Each command runs in a process of its own (the real ``droidwire`` entry point) that writes the
modules it imported, at exit, to a file; the controller is a real one on loopback. A missing
extra is simulated the way Python itself spells "not installed": ``sys.modules[name] = None``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controller.config import ControllerConfig
from droidwire import EXTRAS, NOUNS, command_tree
from tests.adb_support import AdbServer
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer
from tests.droidwire.stack import wait_until

WAIT_S = 60 * TIME_SCALE
# What a bridge host does not install, or installs only for a feature it uses (loaded then).
NEVER_ON_A_BRIDGE = frozenset({
    "controller", "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "aiosqlite",
    "asyncpg", "redis", "mcp", "openai", "tenacity", "prometheus_client", "tree_sitter",
    "tree_sitter_kotlin", "tree_sitter_java", "av", "cryptography",
})
# Installed with the bridge (adbutils' requirements), never loaded by a running one: it speaks
# to the adb server itself and only runs the binary adbutils ships (device_bridge/adb/wire.py).
NOT_LOADED_BY_A_BRIDGE = frozenset({"adbutils", "PIL", "requests", "urllib3", "charset_normalizer"})

# Runs the real entry point; the modules imported are written at exit. Modules named in
# DW_HIDE are made "not installed" first.
LAUNCHER = """
import atexit, json, os, sys
for name in filter(None, os.environ.get("DW_HIDE", "").split(",")):
    sys.modules[name] = None
atexit.register(lambda: open(os.environ["DW_MODULES_OUT"], "w").write(json.dumps(sorted(
    {m.split(".")[0] for m, v in sys.modules.items() if v is not None}))))
from droidwire import main
main()
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "DW_MODULES_OUT": str(tmp_path / "modules.json"), **extra}


def _imported(tmp_path: Path) -> set[str]:
    return set(json.loads((tmp_path / "modules.json").read_text()))


def _droidwire(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, *args], env=env, capture_output=True, text=True,
        timeout=WAIT_S, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[LiveController]:
    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", bootstrap_token=ADMIN_TOKEN)
    with LiveController(config) as live:
        yield live


def _bridges(live: LiveController) -> list[dict[str, object]]:
    response = httpx.get(f"{live.url}/v1/bridges", headers=bearer(ADMIN_TOKEN), timeout=WAIT_S)
    response.raise_for_status()
    return list(response.json())


def test_a_running_bridge_imports_nothing_of_the_controller(
    tmp_path: Path, controller: LiveController, adb_server: AdbServer
) -> None:
    created = httpx.post(f"{controller.url}/v1/tokens", headers=bearer(ADMIN_TOKEN),
                         json={"kind": "bridge", "name": "pi"}, timeout=WAIT_S)
    created.raise_for_status()
    env = _env(tmp_path, **adb_server.env, DROIDWIRE_BRIDGE_TOKEN=created.json()["token"])
    log = tmp_path / "bridge.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, "bridge", "--controller", controller.url,
             "--adb-port", str(adb_server.port)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        # The controller lists the bridge connected once it has sent `welcome`.
        wait_until("the bridge connected",
                   lambda: any(b.get("state") == "connected" for b in _bridges(controller)),
                   deadline_s=WAIT_S,
                   alive=lambda: None if proc.poll() is None else log.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    imported = _imported(tmp_path)
    assert "device_bridge" in imported  # the check sees what the bridge imported
    assert imported & NEVER_ON_A_BRIDGE == set()
    # typer's help renderer (rich's Markdown, Pygments) is loaded for help and errors only,
    # the client commands' HTTP client for them only.
    assert imported & {"markdown_it", "pygments", "httpx"} == set()
    assert imported & NOT_LOADED_BY_A_BRIDGE == set()


@pytest.mark.parametrize("args", [
    pytest.param(("device", "list", "--json"), id="device-list"),
    pytest.param(("token", "list"), id="token-list"),
    pytest.param(("runs", "list"), id="runs-list"),
])
def test_client_commands_import_nothing_of_the_controller(
    tmp_path: Path, controller: LiveController, args: tuple[str, ...]
) -> None:
    env = _env(tmp_path, DROIDWIRE_CONTROLLER=controller.url, DROIDWIRE_TOKEN=ADMIN_TOKEN)
    done = _droidwire(*args, env=env)
    assert done.returncode == 0, done.stderr
    imported = _imported(tmp_path)
    assert "httpx" in imported
    assert imported & NEVER_ON_A_BRIDGE == set()


def test_the_bridge_runs_with_every_extra_missing(tmp_path: Path) -> None:
    """Without the extras' modules the bridge still starts (here: no controller to reach)."""
    hidden = sorted({m for modules in EXTRAS.values() for m in modules})
    env = _env(tmp_path, DW_HIDE=",".join(hidden))
    done = _droidwire("bridge", "--controller", "http://127.0.0.1:9", "--token", "t",
                      "--start-budget", "0.1", env=env)
    assert done.returncode == 3, done.stderr  # unreachable controller, not an ImportError
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "extra"), [
    pytest.param(("controller",), "controller", id="controller"),
    pytest.param(("demo", "--json"), "controller", id="demo"),
    pytest.param(("sim-device",), "sim", id="sim-device"),
    pytest.param(("bridge", "--metrics-port", "0", "--token", "t",
                  "--controller", "http://127.0.0.1:9"), "metrics", id="bridge-metrics"),
])
def test_a_command_without_its_extra_says_what_to_install(
    tmp_path: Path, args: tuple[str, ...], extra: str
) -> None:
    done = _droidwire(*args, env=_env(tmp_path, DW_HIDE=",".join(EXTRAS[extra])))
    assert done.returncode in (1, 2)
    assert f"pip install 'droidwire[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_lists_every_noun_even_without_the_controller(tmp_path: Path) -> None:
    env = _env(tmp_path, DW_HIDE=",".join(EXTRAS["controller"]), COLUMNS="200")
    done = _droidwire("--help", env=env)
    assert done.returncode == 0, done.stderr
    for noun in NOUNS:
        assert noun.name in done.stdout
    assert "(needs the controller extra)" in done.stdout
    assert _imported(tmp_path) & {"fastapi", "sqlalchemy", "uvicorn", "redis", "openai"} == set()


def test_the_command_tree_holds_every_noun() -> None:
    """Tools that walk the CLI see every noun, although each loads on first use."""
    assert {n.name for n in NOUNS} | {"version"} == set(command_tree().commands)


def test_every_extra_of_the_distribution_is_known_to_the_cli() -> None:
    """A command's missing-extra message names an extra pyproject.toml really has."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]
    assert set(EXTRAS) == set(extras) - {"dev"}
    assert all(set(noun.extras) <= set(EXTRAS) for noun in NOUNS)
