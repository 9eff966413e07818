"""The build service: which toolchain builds what, and compiling through each of them.

Gradle itself is never run: a host "has an SDK" through a fake SDK layout, and the project's
``gradlew`` is a small shell script that behaves like Gradle's outside (arguments, output,
APKs under ``app/build/outputs/apk``, exit code, or hanging until killed).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from device_bridge.build import BuildService, HostToolchain, detect_host, from_config
from device_bridge.workspace import DEMO_PROJECT, ProjectRegistry, WorkspaceManager
from protocol.envelope import Capabilities
from protocol.errors import ErrorCode, RpcError
from protocol.methods import CompileResult
from tests.conftest import TIME_SCALE, require_or_skip

from .test_workspace import kotlin_test, make_project

SYS_PATH = "/usr/bin:/bin"


@dataclass
class FakeResult:
    ok: bool
    output: str
    app_apk: bytes | None
    test_apk: bytes | None
    toolchain: str = "simulated"


class FakeSimulatedToolchain:
    """Stands in for ``device_bridge.sim.toolchain.SimulatedToolchain`` (same call shape)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, str, list[str]]] = []

    def compile(
        self, project_dir: Path, test_code: str, *, test_path: Path | None = None
    ) -> FakeResult:
        assert test_path is not None and test_path.read_text() == test_code
        test_dir = project_dir / "app/src/androidTest/java/com/droidwire/demo"
        self.calls.append((project_dir, test_code, sorted(p.name for p in test_dir.iterdir())))
        if "BROKEN" in test_code:
            return FakeResult(
                False, "e: file:///x/T.kt:5:9 Unresolved reference 'BROKEN'.", None, None
            )
        return FakeResult(True, "BUILD SUCCESSFUL", b"app-apk", b"test-apk:" + test_code.encode())


def fake_sdk(tmp_path: Path, *, build_tools: bool = True) -> dict[str, str]:
    sdk = tmp_path / "sdk"
    (sdk / "platforms").mkdir(parents=True)
    if build_tools:
        (sdk / "build-tools" / "34.0.0").mkdir(parents=True)
        (sdk / "build-tools" / "34.0.0" / "aapt2").write_text("")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    return {"ANDROID_HOME": str(sdk), "JAVA_HOME": str(tmp_path / "jdk"), "PATH": SYS_PATH}


NO_SDK = HostToolchain(java=None, sdk=None)

FAKE_GRADLEW = r"""#!/bin/sh
echo "fake gradle: $*"
echo "sdk: $ANDROID_HOME"
case "$FAKE_GRADLE_MODE" in
  ok)
    mkdir -p app/build/outputs/apk/debug app/build/outputs/apk/androidTest/debug
    printf 'app apk' > app/build/outputs/apk/debug/app-debug.apk
    cat app/src/androidTest/java/com/droidwire/demo/*Test.kt \
      > app/build/outputs/apk/androidTest/debug/app-debug-androidTest.apk
    echo "BUILD SUCCESSFUL in 1s"
    exit 0 ;;
  fail)
    i=0; while [ $i -lt 200 ]; do echo "> Task :app:noise$i UP-TO-DATE"; i=$((i+1)); done
    echo "e: file://$PWD/app/src/androidTest/java/com/droidwire/demo/DiskReadTest.kt:5:9 Unresolved reference 'nope'."
    echo "BUILD FAILED in 1s"
    exit 1 ;;
  hang)
    echo $$ > "$FAKE_GRADLE_PIDFILE"
    exec sleep 600 ;;
esac
"""


def projects(tmp_path: Path, *, gradlew: bool = False) -> ProjectRegistry:
    root = tmp_path / "projects"
    demo = make_project(root, "demo-copy")
    other = make_project(root, "shop")
    if gradlew:
        for p in (demo, other):
            script = p / "gradlew"
            script.write_text(FAKE_GRADLEW)
            script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return ProjectRegistry.from_config({"shop": str(other)}, roots=[root], demo_dir=demo)


def service(
    tmp_path: Path,
    *,
    host: HostToolchain | None = NO_SDK,
    env: dict[str, str] | None = None,
    gradlew: bool = False,
    slots: int = 2,
    **kw: object,
) -> BuildService:
    manager = WorkspaceManager(
        projects(tmp_path, gradlew=gradlew), state_dir=tmp_path / "state", slots_per_project=slots
    )
    env = dict(env if env is not None else {"PATH": SYS_PATH})
    # The kotlinc check has its own tests (tests/device_bridge/kotlinc): here, a cache without a compiler.
    env.setdefault("DROIDWIRE_CACHE_DIR", str(tmp_path / "no-kotlinc-cache"))
    return BuildService(
        manager,
        host=host,
        env=env,
        simulated=kw.pop("simulated", FakeSimulatedToolchain()),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# -- detecting the host ------------------------------------------------------------------------


def test_detect_nothing_on_a_bare_host(tmp_path: Path) -> None:
    host = detect_host({"PATH": str(tmp_path)})
    assert not host.can_build
    assert host.java is None and host.sdk is None
    assert len(host.missing) == 2


def test_detect_a_jdk_and_an_sdk(tmp_path: Path) -> None:
    host = detect_host(fake_sdk(tmp_path))
    assert host.can_build and host.missing == []
    assert host.build_tools == ("34.0.0",)
    assert host.java == tmp_path / "jdk" / "bin" / "java"


def test_an_sdk_without_build_tools_cannot_build(tmp_path: Path) -> None:
    env = fake_sdk(tmp_path, build_tools=False)
    env["ANDROID_SDK_ROOT"] = env.pop("ANDROID_HOME")
    host = detect_host(env)
    assert host.sdk is not None and not host.can_build
    assert any("build-tools" in m for m in host.missing)


# -- choosing the toolchain --------------------------------------------------------------------


def test_without_an_sdk_the_demo_is_simulated_and_other_projects_are_refused(
    tmp_path: Path,
) -> None:
    svc = service(tmp_path)
    registry = svc.workspaces.projects
    assert svc.toolchain_for(registry.get(DEMO_PROJECT)) == "simulated"
    with pytest.raises(RpcError) as info:
        svc.toolchain_for(registry.get("shop"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "only the demo project" in info.value.message
    assert info.value.data and info.value.data["reason"] == "no_sdk"
    assert svc.capabilities() == {
        "build": True,
        "toolchain": "simulated",
        "checker": None,
        "projects": [DEMO_PROJECT],
        "default_project": "shop",
    }
    assert Capabilities(**svc.capabilities()).projects == [DEMO_PROJECT]


async def test_compiling_another_project_without_an_sdk_is_refused(tmp_path: Path) -> None:
    svc = service(tmp_path)
    with pytest.raises(RpcError) as info:
        await svc.compile("shop", kotlin_test(), timeout_s=30)
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert not (tmp_path / "state").exists()  # refused before any workspace work


def test_with_an_sdk_and_a_wrapper_everything_builds_with_gradle(tmp_path: Path) -> None:
    svc = service(tmp_path, host=None, env=fake_sdk(tmp_path), gradlew=True)
    assert svc.project_toolchains() == {"shop": "gradle", DEMO_PROJECT: "gradle"}
    assert svc.capabilities()["toolchain"] == "gradle"


def test_with_an_sdk_but_no_gradle_launcher_only_the_demo_falls_back(tmp_path: Path) -> None:
    env = fake_sdk(tmp_path)
    env["PATH"] = str(tmp_path / "jdk" / "bin")  # no gradle on it, whatever this host has
    svc = service(tmp_path, host=None, env=env, gradlew=False)
    assert svc.project_toolchains() == {"shop": None, DEMO_PROJECT: "simulated"}


def test_prefer_simulated_ignores_the_sdk_and_serves_only_the_demo(tmp_path: Path) -> None:
    svc = service(tmp_path, host=None, env=fake_sdk(tmp_path), gradlew=True, prefer="simulated")
    assert svc.project_toolchains() == {"shop": None, DEMO_PROJECT: "simulated"}
    with pytest.raises(RpcError) as info:
        svc.toolchain_for(svc.workspaces.projects.get("shop"))
    assert info.value.data and info.value.data["reason"] == "simulated_only"


def test_prefer_gradle_without_an_sdk_builds_nothing(tmp_path: Path) -> None:
    svc = service(tmp_path, prefer="gradle")
    caps = svc.capabilities()
    assert caps["build"] is False and caps["toolchain"] is None


def test_no_simulated_toolchain_installed_means_no_build(tmp_path: Path) -> None:
    svc = service(tmp_path, simulated=None)
    svc._simulated_loaded = True  # as if the import had failed
    assert svc.capabilities()["build"] is False


# -- compiling with the simulated toolchain ---------------------------------------------------


async def test_simulated_compile_reports_itself_and_hashes_the_apks(tmp_path: Path) -> None:
    fake = FakeSimulatedToolchain()
    svc = service(tmp_path, simulated=fake)
    outcome = await svc.compile(DEMO_PROJECT, kotlin_test("LoadTest"), timeout_s=30)
    assert outcome.ok and outcome.toolchain == "simulated"
    assert outcome.project == DEMO_PROJECT
    assert outcome.test_class == "com.droidwire.demo.LoadTest"
    assert outcome.workspace == "fresh"
    assert outcome.app_apk == b"app-apk"
    assert outcome.test_apk == b"test-apk:" + kotlin_test("LoadTest").encode()
    assert set(outcome.apk_hashes) == {"app", "test"}
    assert all(len(h) == 64 for h in outcome.apk_hashes.values())
    project_dir, code, files = fake.calls[0]
    assert code == kotlin_test("LoadTest")
    assert "LoadTest.kt" in files  # the test was in the working copy when it compiled
    assert project_dir.is_relative_to(tmp_path / "state")
    result = CompileResult.model_validate(outcome.to_result().model_dump())
    assert result.toolchain == "simulated"
    assert [(a.role, a.data, a.sha256) for a in result.apks] == [
        ("app", outcome.app_apk, outcome.apk_hashes["app"]),
        ("test", outcome.test_apk, outcome.apk_hashes["test"]),
    ]


async def test_default_project_is_used_when_none_is_named(tmp_path: Path) -> None:
    svc = service(tmp_path)
    with pytest.raises(RpcError) as info:  # the default here is "shop", which needs an SDK
        await svc.compile(None, kotlin_test(), timeout_s=30)
    assert info.value.code is ErrorCode.UNAVAILABLE


async def test_simulated_compile_errors_come_back_as_output(tmp_path: Path) -> None:
    svc = service(tmp_path)
    outcome = await svc.compile(DEMO_PROJECT, kotlin_test(marker="BROKEN"), timeout_s=30)
    assert not outcome.ok and outcome.toolchain == "simulated"
    assert "Unresolved reference" in outcome.output
    assert outcome.app_apk is None and outcome.test_apk is None and outcome.apk_hashes == {}


async def test_a_compile_does_not_block_the_event_loop(tmp_path: Path) -> None:
    entered, loop_ran = threading.Event(), threading.Event()

    class WaitsForTheLoop(FakeSimulatedToolchain):
        def compile(
            self, project_dir: Path, test_code: str, *, test_path: Path | None = None
        ) -> FakeResult:
            entered.set()
            # Only the test's coroutine sets this: were the loop blocked by this very call,
            # it could not run, and the wait would time out.
            assert loop_ran.wait(10), "the event loop was blocked during the compile"
            return super().compile(project_dir, test_code, test_path=test_path)

    svc = service(tmp_path, simulated=WaitsForTheLoop())
    compiling = asyncio.create_task(svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30))
    assert await asyncio.to_thread(entered.wait, 10)
    loop_ran.set()
    assert (await compiling).ok


async def test_stop_snapshots_and_refuses_new_compiles(tmp_path: Path) -> None:
    svc = service(tmp_path)
    await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    await svc.stop()
    assert (tmp_path / "state" / DEMO_PROJECT / "snapshot.tar.gz").is_file()
    with pytest.raises(RpcError) as info:
        await svc.compile(DEMO_PROJECT, kotlin_test(marker="new"), timeout_s=30)
    assert info.value.code is ErrorCode.UNAVAILABLE


async def test_a_crashing_simulator_is_an_internal_error_not_a_crash(tmp_path: Path) -> None:
    class Exploding(FakeSimulatedToolchain):
        def compile(
            self, project_dir: Path, test_code: str, *, test_path: Path | None = None
        ) -> FakeResult:
            raise ValueError("simulator bug")

    svc = service(tmp_path, simulated=Exploding(), slots=1)
    with pytest.raises(RpcError) as info:
        await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    assert info.value.code is ErrorCode.INTERNAL and "simulator bug" in info.value.message
    svc._simulated = FakeSimulatedToolchain()
    assert (await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)).ok  # slot released


async def test_refused_test_code_is_a_typed_error(tmp_path: Path) -> None:
    svc = service(tmp_path)
    with pytest.raises(RpcError) as info:
        await svc.compile(DEMO_PROJECT, kotlin_test(cls="build.gradle.kts"), timeout_s=30)
    assert info.value.code is ErrorCode.FORBIDDEN


async def test_nonpositive_timeout_is_a_bad_request(tmp_path: Path) -> None:
    with pytest.raises(RpcError) as info:
        await service(tmp_path).compile(DEMO_PROJECT, kotlin_test(), timeout_s=0)
    assert info.value.code is ErrorCode.BAD_REQUEST


async def test_the_real_simulated_toolchain_builds_the_demo(tmp_path: Path) -> None:
    require_or_skip(
        importlib.util.find_spec("device_bridge.sim.toolchain") is not None,
        "the simulated toolchain is not in this tree yet",
    )
    toolchain = importlib.import_module("device_bridge.sim.toolchain")
    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=tmp_path / "state")
    svc = BuildService(
        manager, host=NO_SDK, simulated=toolchain.SimulatedToolchain(), prefer="simulated"
    )
    assert svc.capabilities()["toolchain"] == "simulated"
    outcome = await svc.compile(None, kotlin_test("FormatTitleTest"), timeout_s=60)
    assert outcome.toolchain == "simulated"
    assert outcome.ok, outcome.output


async def test_the_real_simulated_toolchain_reports_errors_at_the_written_file(
    tmp_path: Path,
) -> None:
    toolchain = importlib.import_module("device_bridge.sim.toolchain")
    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=tmp_path / "state")
    svc = BuildService(
        manager, host=NO_SDK, simulated=toolchain.SimulatedToolchain(), prefer="simulated"
    )
    broken = kotlin_test("BrokenTest").replace("/*  */", "missingHelper()")
    outcome = await svc.compile(None, broken, timeout_s=60)
    assert not outcome.ok and outcome.toolchain == "simulated"
    written = tmp_path / "state/demo/slot-0/project/app/src/androidTest/java/com/droidwire/demo"
    assert f"e: {(written / 'BrokenTest.kt').resolve().as_uri()}:" in outcome.output
    assert "missingHelper" in outcome.output


# -- the bridge's APK cache ------------------------------------------------------------------


async def test_a_repeated_compile_is_served_from_the_cache(tmp_path: Path) -> None:
    fake = FakeSimulatedToolchain()
    svc = service(tmp_path, simulated=fake)
    first = await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    again = await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    assert len(fake.calls) == 1
    assert again.cached and not first.cached
    assert again.apk_hashes == first.apk_hashes and again.test_apk == first.test_apk
    await svc.compile(DEMO_PROJECT, kotlin_test(marker="other"), timeout_s=30)
    assert len(fake.calls) == 2  # other code: compiled


async def test_the_cache_follows_the_project_files(tmp_path: Path) -> None:
    fake = FakeSimulatedToolchain()
    svc = service(tmp_path, simulated=fake)
    await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    source = svc.workspaces.projects.get(DEMO_PROJECT).path
    (source / "app/src/main/java/com/droidwire/demo/Extra.kt").write_text("package x\n")
    outcome = await svc.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)
    assert not outcome.cached and len(fake.calls) == 2


async def test_failures_are_not_cached_and_the_cache_can_be_off(tmp_path: Path) -> None:
    fake = FakeSimulatedToolchain()
    svc = service(tmp_path, simulated=fake)
    for _ in range(2):
        assert not (await svc.compile(DEMO_PROJECT, kotlin_test(marker="BROKEN"), timeout_s=30)).ok
    assert len(fake.calls) == 2
    fake_off = FakeSimulatedToolchain()
    off = service(tmp_path / "off", simulated=fake_off, cache_bytes=None)
    for _ in range(2):
        assert not (await off.compile(DEMO_PROJECT, kotlin_test(), timeout_s=30)).cached
    assert len(fake_off.calls) == 2


# -- compiling with "Gradle" (a wrapper script that behaves like it) --------------------------


def gradle_service(tmp_path: Path, mode: str, **kw: object) -> BuildService:
    env = fake_sdk(tmp_path)
    env["FAKE_GRADLE_MODE"] = mode
    env["FAKE_GRADLE_PIDFILE"] = str(tmp_path / "gradle.pid")
    return service(tmp_path, host=None, env=env, gradlew=True, **kw)


async def test_gradle_build_runs_both_tasks_and_reads_the_apks(tmp_path: Path) -> None:
    svc = gradle_service(tmp_path, "ok")
    outcome = await svc.compile("shop", kotlin_test(marker="gradle"), timeout_s=60)
    assert outcome.ok and outcome.toolchain == "gradle"
    assert "fake gradle: --console=plain assembleDebug assembleDebugAndroidTest" in outcome.output
    assert f"sdk: {tmp_path / 'sdk'}" in outcome.output
    assert outcome.app_apk == b"app apk"
    assert outcome.test_apk is not None and b"gradle" in outcome.test_apk
    assert outcome.apk_hashes["app"] != outcome.apk_hashes["test"]


async def test_gradle_failure_returns_its_output_tail(tmp_path: Path) -> None:
    svc = gradle_service(tmp_path, "fail", max_output_bytes=2000)
    outcome = await svc.compile("shop", kotlin_test(), timeout_s=60)
    assert not outcome.ok and outcome.toolchain == "gradle"
    assert outcome.output.startswith("[droidwire: ")  # the head was dropped, the errors kept
    assert "Unresolved reference 'nope'" in outcome.output
    assert outcome.output.rstrip().endswith("BUILD FAILED in 1s")
    assert outcome.app_apk is None and outcome.apk_hashes == {}


async def test_gradle_timeout_kills_the_build_and_frees_the_workspace(tmp_path: Path) -> None:
    svc = gradle_service(tmp_path, "hang", slots=1)
    with pytest.raises(RpcError) as info:
        await svc.compile("shop", kotlin_test(), timeout_s=1.0 * TIME_SCALE)
    assert info.value.code is ErrorCode.TIMEOUT
    pid = int((tmp_path / "gradle.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    svc._env["FAKE_GRADLE_MODE"] = "ok"  # the single slot is usable again
    outcome = await svc.compile("shop", kotlin_test(), timeout_s=60)
    assert outcome.ok and outcome.workspace == "ready"


# -- configuration -----------------------------------------------------------------------------


def test_from_config_reads_the_build_section(tmp_path: Path) -> None:
    make_project(tmp_path / "android", "shop")
    svc = from_config(
        {
            "roots": ["android"],
            "projects": {"shop": "android/shop"},
            "slots_per_project": 3,
            "toolchain": "simulated",
            "state_dir": "state",
        },
        base=tmp_path,
        env={"PATH": SYS_PATH},
    )
    assert svc.prefer == "simulated"
    assert svc.workspaces.slots_per_project == 3
    assert svc.workspaces.state_dir == (tmp_path / "state").resolve()
    assert svc.workspaces.projects.default == "shop"
    assert svc.workspaces.projects.names == ["shop", DEMO_PROJECT]


def test_from_config_can_leave_the_demo_out(tmp_path: Path) -> None:
    make_project(tmp_path / "android", "shop")
    svc = from_config(
        {"roots": ["android"], "projects": {"shop": "android/shop"}, "serve_demo": False},
        base=tmp_path,
        env={"PATH": SYS_PATH},
    )
    assert svc.workspaces.projects.names == ["shop"]
    assert svc.capabilities()["build"] is False  # no SDK, no demo: nothing builds here


def test_from_config_without_a_section_serves_the_demo() -> None:
    svc = from_config(None, env={"PATH": SYS_PATH})
    assert svc.workspaces.projects.default == DEMO_PROJECT


@pytest.mark.parametrize(
    ("section", "code"),
    [
        ({"projets": {}}, ErrorCode.BAD_REQUEST),
        ({"roots": "/srv"}, ErrorCode.BAD_REQUEST),
        ({"slots_per_project": 0}, ErrorCode.BAD_REQUEST),
        ({"slots_per_project": True}, ErrorCode.BAD_REQUEST),
        ({"toolchain": "bazel"}, ErrorCode.BAD_REQUEST),
        ({"serve_demo": "yes"}, ErrorCode.BAD_REQUEST),
        ({"default_project": "nope"}, ErrorCode.BAD_REQUEST),
        ({"projects": {"etc": "/etc"}, "roots": ["/srv"]}, ErrorCode.FORBIDDEN),
    ],
)
def test_from_config_refusals(tmp_path: Path, section: dict[str, object], code: ErrorCode) -> None:
    with pytest.raises(RpcError) as info:
        from_config(section, base=tmp_path, env={"PATH": SYS_PATH})
    assert info.value.code is code
