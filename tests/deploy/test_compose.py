"""docker-compose.yml: the local trial wires two replicas, Redis, PostgreSQL, nginx, a bridge."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from device_bridge.config import load_host_config
from device_bridge.sim.profiles import PROFILES
from tests.conftest import require_or_skip
from tests.deploy.support import DEPLOY, cli_context, load_yaml, read_env_file

COMPOSE = DEPLOY / "docker-compose.yml"
NGINX = DEPLOY / "docker" / "nginx.conf"
CONTROLLERS = ("controller-1", "controller-2")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = load_yaml(COMPOSE)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def nginx_directives(name: str) -> list[str]:
    text = re.sub(r"#.*", "", NGINX.read_text(encoding="utf-8"))
    return [m.group(1).strip() for m in re.finditer(rf"(?m)^\s*{name}\s+([^;]+);", text)]


def interpolate(value: str) -> str:
    """Compose's ``${VAR:?message}`` replaced by a stand-in value named after VAR."""
    return re.sub(r"\$\{(\w+)(?::?[?-][^}]*)?\}", lambda m: f"value-of-{m.group(1)}", value)


def command(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def test_the_trial_has_every_part(services: dict[str, Any]) -> None:
    assert {*CONTROLLERS, "redis", "postgres", "lb", "bridge", "sim-device"} <= set(services)


def test_every_reference_between_services_resolves(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dep, spec in (service.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if spec.get("condition") == "service_healthy":
                check = services[dep].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), (
                    f"{name} waits for {dep} to be healthy, but {dep} has no health check"
                )
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.removeprefix("service:") in services
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in volumes, f"{name}: undeclared volume {source}"
        build = service.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file()
            assert (context / "pyproject.toml").is_file(), "the context is the repository root"


def test_controllers_are_replicas_on_postgres_and_redis(services: dict[str, Any]) -> None:
    first = services[CONTROLLERS[0]]
    for name in CONTROLLERS:
        ctl = services[name]
        assert ctl == first, "the replicas differ"
        ctx = cli_context(command(ctl))
        assert ctx.info_name == "controller" and ctx.params["host"] == "0.0.0.0"
        env = ctl["environment"]
        db = urlsplit(interpolate(env["DROIDWIRE_DB"]))
        assert db.scheme == "postgresql" and db.hostname == "postgres"
        assert (db.username, db.path) == ("droidwire", "/droidwire")
        redis = urlsplit(interpolate(env["DROIDWIRE_REDIS"]))
        assert redis.scheme == "redis" and redis.hostname == "redis"
        # Secrets come from deploy/.env, and compose refuses to start without them.
        assert "${POSTGRES_PASSWORD:?" in env["DROIDWIRE_DB"]
        assert db.password == "value-of-POSTGRES_PASSWORD"
        assert env["DROIDWIRE_BOOTSTRAP_TOKEN"].startswith("${DROIDWIRE_BOOTSTRAP_TOKEN:?")
        for dep in ("postgres", "redis"):
            assert ctl["depends_on"][dep]["condition"] == "service_healthy"
        probe = " ".join(ctl["healthcheck"]["test"])
        assert f"http://127.0.0.1:{ctx.params['port']}/healthz" in probe
        assert "ports" not in ctl, "replicas are reached through the load balancer only"
    pg = services["postgres"]["environment"]
    assert pg["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert (pg["POSTGRES_USER"], pg["POSTGRES_DB"]) == ("droidwire", "droidwire")


def test_load_balancer_spreads_over_the_replicas_with_websockets(
    services: dict[str, Any],
) -> None:
    lb = services["lb"]
    assert any(v.startswith("./docker/nginx.conf:/etc/nginx/nginx.conf") for v in lb["volumes"])
    port = cli_context(command(services[CONTROLLERS[0]])).params["port"]
    upstream = sorted(d.split()[0] for d in nginx_directives("server") if ":" in d.split()[0])
    assert upstream == [f"{name}:{port}" for name in CONTROLLERS]
    headers = nginx_directives("proxy_set_header")
    assert "Upgrade $http_upgrade" in headers
    assert "Connection $connection_upgrade" in headers
    assert nginx_directives("proxy_http_version") == ["1.1"]
    for timeout in ("proxy_read_timeout", "proxy_send_timeout"):
        (value,) = nginx_directives(timeout)
        assert int(value.removesuffix("s")) >= 3600
    for dep in CONTROLLERS:
        assert lb["depends_on"][dep]["condition"] == "service_healthy"
    # Published on the host's loopback only.
    (listen,) = nginx_directives("listen")
    assert lb["ports"] == [f"127.0.0.1:{port}:{listen}"]
    for name, service in services.items():
        if name != "lb":
            assert "ports" not in service, f"{name} is published"


def test_bridge_dials_the_load_balancer_and_serves_the_simulated_device(
    services: dict[str, Any],
) -> None:
    bridge = services["bridge"]
    assert cli_context(command(bridge)).info_name == "bridge"
    config_path = bridge["environment"]["DROIDWIRE_BRIDGE_CONFIG"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in bridge["volumes"]}
    config = load_host_config(DEPLOY / mounts[config_path])
    (listen,) = nginx_directives("listen")
    for url in config.controller.urls:
        parts = urlsplit(url)
        assert (parts.hostname, parts.port) == ("lb", int(listen)), url
    # The token file lies in the volume the one-shot service writes the token into.
    token_dir = config.controller.token_file.rsplit("/", 1)[0]
    assert mounts[token_dir] == "tokens"
    assert any(v == f"tokens:{token_dir}" for v in services["bridge-token"]["volumes"])
    assert bridge["depends_on"]["bridge-token"]["condition"] == "service_completed_successfully"
    # The simulated device listens on the loopback of the namespace the bridge shares.
    sim = cli_context(command(services["sim-device"]))
    assert sim.params["profile"] in PROFILES
    assert bridge["network_mode"] == "service:sim-device"
    assert config.adb.connect == (f"127.0.0.1:{sim.params['port']}",)
    assert sim.params["host"] == "127.0.0.1"
    assert services["sim-device"]["image"] == bridge["image"]


def test_bridge_token_is_minted_through_the_load_balancer(services: dict[str, Any]) -> None:
    minter = services["bridge-token"]
    assert minter["environment"]["DROIDWIRE_CONTROLLER"] == "http://lb:8080"
    assert minter["environment"]["DROIDWIRE_TOKEN"].startswith("${DROIDWIRE_BOOTSTRAP_TOKEN:?")
    assert minter["depends_on"]["lb"]["condition"] == "service_healthy"
    script = "\n".join(command(minter)) if isinstance(minter["command"], list) else minter["command"]
    (line,) = [ln for ln in script.splitlines() if ln.strip().startswith("droidwire ")]
    argv = shlex.split(line.split(">")[0])[1:]
    ctx = cli_context(argv)
    assert ctx.params["kind"] == "bridge"
    assert "umask 077" in script


def test_no_unescaped_dollar_in_commands(services: dict[str, Any]) -> None:
    """Compose interpolates ``$X``: a shell variable must be written ``$$X``."""
    for name, service in services.items():
        cmd = service.get("command", [])
        text = cmd if isinstance(cmd, str) else "\n".join(cmd)
        assert "$" not in text.replace("$$", ""), f"{name}: unescaped $ in its command"


def test_env_example_supplies_every_required_variable_and_no_secret() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text(encoding="utf-8")))
    assert required == {"POSTGRES_PASSWORD", "DROIDWIRE_BOOTSTRAP_TOKEN"}
    example = read_env_file(DEPLOY / "examples" / "compose.env")
    assert set(example) == required
    assert all(value == "" for value in example.values()), "a secret is committed"
    assert ".env" in (DEPLOY / ".gitignore").read_text(encoding="utf-8").split()


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    """``nginx -t`` where nginx is installed (it is not a project dependency)."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    require_or_skip(nginx is not None, "nginx is not installed (make test installs it as root)")
    assert nginx is not None
    # The replicas' names resolve only inside the compose network: stand in loopback addresses.
    text = NGINX.read_text(encoding="utf-8")
    for n, name in enumerate(CONTROLLERS, 1):
        assert f"server {name}:" in text
        text = text.replace(f"server {name}:", f"server 127.0.0.{n}:")
    conf = tmp_path / "nginx.conf"
    conf.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log"),
         "-g", f"pid {tmp_path / 'nginx.pid'};"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
