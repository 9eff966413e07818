"""The build service with the kotlinc check in front: without an SDK it gates the simulated
toolchain, with one it gates Gradle (run once, on a test that already compiles); without a
JDK or the compiler the bridge says so once and goes on without it. Set-up refuses a compiler
that does not match its pinned hash and is never fatal for ``make setup``."""

from __future__ import annotations

import logging
import shutil
import stat
from pathlib import Path

import pytest

from device_bridge.build import BuildService, detect_host
from device_bridge.kotlinc import CompilerError, KotlincChecker
from device_bridge.kotlinc import install as kinstall
from device_bridge.kotlinc.install import SetupError, ensure_compiler
from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace import DEMO_PROJECT, ProjectRegistry, WorkspaceManager
from device_bridge.workspace_template import template_dir
from protocol.errors import ErrorCode, RpcError
from tests.device_bridge.test_build import FAKE_GRADLEW, SYS_PATH, fake_sdk

TEMPLATE = Path(template_dir())
GOOD = (TEMPLATE / "app/src/androidTestExamples/java/com/droidwire/demo/examples/"
        "MainActivityExamplesTest.kt").read_text().replace(
            "package com.droidwire.demo.examples", "package com.droidwire.demo")
BAD = GOOD.replace('activity.saveDraftSync("hello")', "val n: Long = activity.saveDraftSync()")


def demo_copy(tmp_path: Path, *, gradlew: bool) -> ProjectRegistry:
    demo = tmp_path / "demo"
    shutil.copytree(TEMPLATE, demo, ignore=shutil.ignore_patterns("stubs", "androidTestExamples"))
    if gradlew:
        script = demo / "gradlew"
        script.write_text(FAKE_GRADLEW)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return ProjectRegistry.from_config({}, demo_dir=demo)


async def test_with_an_sdk_gradle_runs_once_on_a_test_kotlinc_accepted(
    tmp_path: Path, kotlinc_checker: KotlincChecker
) -> None:
    env = {**fake_sdk(tmp_path), "FAKE_GRADLE_MODE": "ok"}
    manager = WorkspaceManager(demo_copy(tmp_path, gradlew=True), state_dir=tmp_path / "state")
    svc = BuildService(manager, host=detect_host(env), env=env, checker=kotlinc_checker,
                       cache_bytes=None)
    try:
        refused = await svc.compile(None, BAD, timeout_s=120)
        assert not refused.ok and refused.toolchain == "gradle"
        assert refused.checked_by == "kotlinc" and refused.check is not None
        assert "Initializer type mismatch: expected 'kotlin.Long', actual" in refused.output
        assert "fake gradle" not in refused.output  # Gradle never ran
        built = await svc.compile(None, GOOD, timeout_s=120)
        assert built.ok and built.toolchain == "gradle" and built.checked_by == "kotlinc"
        assert built.output.count("fake gradle: --console=plain assembleDebug") == 1
        assert built.to_result().check == built.check and built.check["ok"] is True
    finally:
        await svc.stop()
    assert kotlinc_checker.compiler.pid() is not None  # a given checker outlives the service


async def test_without_an_sdk_kotlinc_gates_the_simulated_toolchain(
    tmp_path: Path, kotlinc_checker: KotlincChecker
) -> None:
    manager = WorkspaceManager(demo_copy(tmp_path, gradlew=False), state_dir=tmp_path / "state")
    svc = BuildService(manager, prefer="kotlinc", env={"PATH": SYS_PATH},
                       simulated=SimulatedToolchain(), checker=kotlinc_checker)
    try:
        assert svc.capabilities()["checker"] == "kotlinc"
        refused = await svc.compile(None, BAD, timeout_s=120)
        assert not refused.ok and refused.toolchain == "simulated"
        assert refused.to_result().checked_by == "kotlinc"
        assert SimulatedToolchain().compile(manager.projects.get(None).path, BAD).ok
        built = await svc.compile(None, GOOD, timeout_s=120)
        assert built.ok and built.app_apk and built.test_apk
        assert "BUILD SUCCESSFUL" in built.output and "kotlinc" in built.output
    finally:
        await svc.stop()


async def test_without_a_jdk_the_bridge_says_so_once_and_builds_without_the_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"PATH": str(tmp_path / "empty"), "DROIDWIRE_CACHE_DIR": str(tmp_path / "cache")}
    manager = WorkspaceManager(demo_copy(tmp_path, gradlew=False), state_dir=tmp_path / "state")
    with caplog.at_level(logging.WARNING, logger="droidwire.bridge.build"):
        svc = BuildService(manager, env=env, simulated=SimulatedToolchain())
        assert svc.capabilities()["checker"] is None
        outcome = await svc.compile(None, BAD, timeout_s=60)
        await svc.compile(None, GOOD, timeout_s=60)
    assert outcome.ok and outcome.checked_by is None and outcome.toolchain == "simulated"
    said = [r.getMessage() for r in caplog.records if "kotlinc" in r.getMessage()]
    assert len(said) == 1 and "no JDK" in said[0]
    strict = BuildService(manager, env=env, prefer="kotlinc", simulated=SimulatedToolchain())
    with pytest.raises(RpcError) as info:
        strict.toolchain_for(manager.projects.get(DEMO_PROJECT))
    assert info.value.code is ErrorCode.UNAVAILABLE and info.value.data["reason"] == "no_kotlinc"


def fake_npm(tmp_path: Path) -> dict[str, str]:
    """An ``npm`` whose ``pack`` hands over a tarball that is not the pinned one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text('#!/bin/sh\nshift; shift; shift; shift\n'
                   'printf "not the compiler" > "$1/kotlin-compiler-2.0.21.tgz"\n')
    npm.chmod(0o755)
    return {"PATH": f"{bin_dir}:{SYS_PATH}"}


def test_a_compiler_that_does_not_match_its_pinned_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", fake_npm(tmp_path)["PATH"])
    with pytest.raises(SetupError, match="does not match its pinned hash"):
        ensure_compiler(tmp_path / "cache", fetch=True)
    assert not kinstall.compiler_ok(tmp_path / "cache")
    assert not (tmp_path / "cache/kotlinc/2.0.21").exists()


def test_setup_is_never_fatal_without_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert kinstall.main(["--cache-dir", str(tmp_path / "cache")]) == 0
    assert "falls back to the simulated toolchain" in capsys.readouterr().err
    assert kinstall.main(["--cache-dir", str(tmp_path / "cache"), "--strict"]) == 1


def test_a_check_past_the_callers_budget_frees_the_compiler(
    kotlinc_checker: KotlincChecker, tmp_path: Path
) -> None:
    """The build service passes what is left of the run's deadline: past it the JVM is killed,
    so a test cannot hold the one warm compiler after its run gave up; the next check works."""
    project = tmp_path / "p"
    test = project / "app/src/androidTest/java/com/droidwire/demo/GoodTest.kt"
    test.parent.mkdir(parents=True)
    test.write_text(GOOD)
    kotlinc_checker.check(project, test, app_dir=TEMPLATE)  # the app's classes are cached
    with pytest.raises(CompilerError, match="timed out"):
        kotlinc_checker.check(project, test, app_dir=TEMPLATE, timeout_s=0)
    assert kotlinc_checker.compiler.pid() is None
    assert kotlinc_checker.check(project, test, app_dir=TEMPLATE).ok
