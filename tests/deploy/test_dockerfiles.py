"""The two Dockerfiles: slim Python base, multi-stage, non-root, and they copy what exists."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.deploy.support import DEPLOY, REPO, Dockerfile, cli_context, dockerignored

DOCKERFILES = {
    "controller": DEPLOY / "docker" / "controller.Dockerfile",
    "bridge": DEPLOY / "docker" / "bridge.Dockerfile",
}

# Files that must be in the image for the wheel to build (pyproject.toml decides).
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def wheel_inputs() -> set[str]:
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", "constraints.txt", PYPROJECT["project"]["readme"]}
    needed |= set(wheel["packages"])
    needed |= set(wheel.get("force-include", {}))
    return needed


@pytest.fixture(params=sorted(DOCKERFILES))
def dockerfile(request: pytest.FixtureRequest) -> Dockerfile:
    return Dockerfile.read(DOCKERFILES[request.param])


def copy_sources(df: Dockerfile, stage: int | None = None) -> list[str]:
    """Sources of COPY/ADD from the build context (not ``--from`` another stage)."""
    sources: list[str] = []
    for keyword in ("COPY", "ADD"):
        for i in df.all(keyword, stage=stage):
            if "from" not in i.flags:
                sources += i.words[:-1]
    return sources


def test_base_is_python_311_slim_and_multi_stage(dockerfile: Dockerfile) -> None:
    args = dockerfile.global_args()
    stages = dockerfile.all("FROM")
    assert len(stages) >= 2
    for stage in stages:
        image = stage.words[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        assert image.startswith("python:3.11-slim"), image
    # The runtime stage takes the environment from the build stage, and installs nothing.
    last = dockerfile.last_stage
    assert any(i.flags.get("from") for i in dockerfile.all("COPY", stage=last))
    assert not any("pip install" in i.args for i in dockerfile.all("RUN", stage=last))
    assert copy_sources(dockerfile, stage=last) == []


# The extras each image installs (pyproject.toml): the controller image the controller; the
# bridge image the bridge-only install plus the simulated device (for `sim-device` trials).
IMAGE_EXTRAS = {"controller": "controller", "bridge": "sim"}


def test_project_installed_with_the_constraints(dockerfile: Dockerfile) -> None:
    runs = [i.args for i in dockerfile.all("RUN") if "pip install" in i.args]
    found = [m for r in runs
             for m in re.findall(r"pip install -c constraints\.txt '?\.(?:\[([a-z,]+)\])?'?", r)]
    assert found, runs
    kind = "controller" if "controller" in str(dockerfile.path) else "bridge"
    assert found == [IMAGE_EXTRAS[kind]], runs


def test_runs_as_a_numeric_non_root_user(dockerfile: Dockerfile) -> None:
    users = dockerfile.all("USER", stage=dockerfile.last_stage)
    assert users, "the runtime stage has no USER"
    user, _, group = users[-1].args.partition(":")
    assert user.isdigit() and int(user) >= 1000, users[-1].args
    assert not group or (group.isdigit() and int(group) != 0)
    # And that user exists in the image with that UID.
    useradd = " ".join(i.args for i in dockerfile.all("RUN", stage=dockerfile.last_stage))
    assert f"--uid {user}" in useradd


def test_copies_only_files_that_exist_and_are_not_ignored(dockerfile: Dockerfile) -> None:
    sources = copy_sources(dockerfile)
    assert sources
    ignore = dockerfile.path.with_name(dockerfile.path.name + ".dockerignore")
    assert ignore.is_file(), f"{ignore.name} keeps .venv and .git out of the context"
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        assert not dockerignored(source, ignore), f"COPY {source}: excluded by {ignore.name}"
    # The wheel's every input is there (a new package in pyproject.toml needs a COPY here).
    assert wheel_inputs() <= set(sources), wheel_inputs() - set(sources)


def test_dockerignore_keeps_local_state_out() -> None:
    for df in DOCKERFILES.values():
        ignore = df.with_name(df.name + ".dockerignore")
        for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py",
                     "controller/__pycache__/app.cpython-311.pyc",
                     "gradle-workspace/app/build/outputs/x.apk"):
            assert dockerignored(path, ignore), path
        for path in ("controller/app.py", "gradle-workspace/app/build.gradle.kts",
                     "device_bridge/sim/device.py"):
            assert not dockerignored(path, ignore), path


def test_entrypoint_is_the_console_script(dockerfile: Dockerfile) -> None:
    (entry,) = dockerfile.all("ENTRYPOINT", stage=dockerfile.last_stage)
    script = next(iter(PYPROJECT["project"]["scripts"]))
    assert entry.exec_form == [script]
    env = dockerfile.env(dockerfile.last_stage)
    assert env["PATH"].startswith("/opt/droidwire/bin:")
    assert "RUN python -m venv /opt/droidwire" in "\n".join(
        f"{i.keyword} {i.args}" for i in dockerfile.instructions
    )


def test_controller_serves_on_all_interfaces_with_a_healthcheck() -> None:
    df = Dockerfile.read(DOCKERFILES["controller"])
    last = df.last_stage
    (cmd,) = df.all("CMD", stage=last)
    ctx = cli_context(cmd.exec_form)
    assert ctx.params["host"] == "0.0.0.0"
    port = ctx.params["port"]
    assert [i.args for i in df.all("EXPOSE", stage=last)] == [str(port)]
    (health,) = df.all("HEALTHCHECK", stage=last)
    assert "DROIDWIRE_HEALTHCHECK_URL" in health.args
    assert df.env(last)["DROIDWIRE_HEALTHCHECK_URL"] == f"http://127.0.0.1:{port}/healthz"
    # Exec form, and Python (slim has no curl or wget).
    probe = health.args.split("CMD", 1)[1].strip()
    assert probe.startswith('["python", "-c"')


def test_bridge_image_runs_a_bridge_and_a_simulated_device() -> None:
    df = Dockerfile.read(DOCKERFILES["bridge"])
    last = df.last_stage
    (cmd,) = df.all("CMD", stage=last)
    cli_context(cmd.exec_form)
    cli_context(["sim-device", "--port", "5555", "--serial", "SIM1", "--profile", "pixel-7"])
    runs = " ".join(i.args for i in df.all("RUN", stage=last))
    # USB phones belong to plugdev (deploy/udev); arm64 has no bundled adb, Debian's is used.
    assert "--groups plugdev" in runs
    assert "TARGETARCH" in runs and "install -y --no-install-recommends adb" in runs
    assert df.env(last)["HOME"] == "/var/lib/droidwire"
