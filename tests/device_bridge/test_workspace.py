"""The workspace manager: projects, the 4-branch start, snapshots, isolation, refusals."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gzip
import io
import logging
import os
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

from device_bridge.workspace import (
    DEMO_PROJECT,
    ProjectRegistry,
    StartBranch,
    WorkspaceManager,
    fsutil,
)
from device_bridge.workspace import (
    manager as manager_mod,
)
from device_bridge.workspace_template import template_dir
from protocol.errors import ErrorCode, RpcError

NS = "com.droidwire.demo"
TEST_DIR = Path("app/src/androidTest/java/com/droidwire/demo")

PROJECT_FILES = {
    "settings.gradle.kts": 'rootProject.name = "tiny"\ninclude(":app")\n',
    "build.gradle.kts": "plugins {}\n",
    "app/build.gradle.kts": f'android {{\n    namespace = "{NS}"\n}}\n',
    "app/src/main/AndroidManifest.xml": "<manifest/>\n",
    "app/src/main/java/com/droidwire/demo/MainActivity.kt": f"package {NS}\nclass MainActivity\n",
    "app/src/main/java/com/droidwire/demo/build/Versions.kt": f"package {NS}.build\nobject V\n",
    f"{TEST_DIR}/StrictModeRule.kt": f"package {NS}\nclass StrictModeRule\n",
}
BUILD_OUTPUTS = {
    "app/build/outputs/apk/debug/app-debug.apk": "stale apk",
    "build/reports/problems.html": "report",
    ".gradle/8.7/fileHashes.bin": "cache",
}


def make_project(parent: Path, name: str = "tiny", namespace: str = NS) -> Path:
    root = parent / name
    for rel, text in {**PROJECT_FILES, **BUILD_OUTPUTS}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(NS, namespace) if rel.endswith(".kts") else text)
    return root


def kotlin_test(cls: str = "DiskReadTest", package: str = NS, marker: str = "") -> str:
    return (
        f"package {package}\n\nimport org.junit.Test\n\n"
        f"class {cls} {{\n    @Test fun run() {{ /* {marker} */ }}\n}}\n"
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "projects")


@pytest.fixture
def registry(tmp_path: Path, project: Path) -> ProjectRegistry:
    return ProjectRegistry.from_config(
        {"tiny": str(project)}, roots=[tmp_path / "projects"], include_demo=False
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def files_of(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def matching(root: Path, pattern: str) -> list[Path]:
    """Blocking glob, kept out of the async tests' bodies (ASYNC240)."""
    return list(root.glob(pattern))


# -- projects ---------------------------------------------------------------------------------


def test_demo_is_the_default_when_nothing_is_configured() -> None:
    registry = ProjectRegistry.from_config()
    assert registry.default == DEMO_PROJECT
    demo = registry.get(None)
    assert demo.demo and demo.path == template_dir().resolve()
    assert registry.get(str(template_dir())) is demo  # its directory designates it too


def test_configured_projects_first_is_default_and_demo_stays(tmp_path: Path, project: Path) -> None:
    registry = ProjectRegistry.from_config(
        {"tiny": "projects/tiny"}, roots=["projects"], base=tmp_path
    )
    assert registry.default == "tiny"
    assert registry.get(None).path == project.resolve()
    assert not registry.get("tiny").demo
    assert registry.get(DEMO_PROJECT).demo


def test_project_outside_every_root_is_refused_at_load(tmp_path: Path, project: Path) -> None:
    (tmp_path / "other").mkdir()
    with pytest.raises(RpcError) as info:
        ProjectRegistry.from_config({"tiny": str(project)}, roots=[tmp_path / "other"])
    assert info.value.code is ErrorCode.FORBIDDEN
    assert info.value.data and info.value.data["rule"] == "project_outside_roots"


def test_no_roots_means_no_configured_project(project: Path) -> None:
    with pytest.raises(RpcError) as info:
        ProjectRegistry.from_config({"tiny": str(project)})
    assert info.value.code is ErrorCode.FORBIDDEN


def test_symlink_in_a_root_pointing_out_is_refused(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "sneaky").symlink_to(project)
    with pytest.raises(RpcError) as info:
        ProjectRegistry.from_config({"sneaky": str(root / "sneaky")}, roots=[root])
    assert info.value.code is ErrorCode.FORBIDDEN


def test_dotdot_in_a_configured_path_is_resolved_before_the_root_check(tmp_path: Path) -> None:
    make_project(tmp_path, "outside")
    (tmp_path / "root").mkdir()
    with pytest.raises(RpcError) as info:
        ProjectRegistry.from_config(
            {"x": str(tmp_path / "root/../outside")}, roots=[tmp_path / "root"]
        )
    assert info.value.code is ErrorCode.FORBIDDEN


@pytest.mark.parametrize(
    ("name", "code"),
    [("../x", ErrorCode.BAD_REQUEST), ("", ErrorCode.BAD_REQUEST), ("a/b", ErrorCode.BAD_REQUEST)],
)
def test_bad_project_names(tmp_path: Path, project: Path, name: str, code: ErrorCode) -> None:
    with pytest.raises(RpcError) as info:
        ProjectRegistry.from_config({name: str(project)}, roots=[tmp_path])
    assert info.value.code is code


def test_lookup_refusals(registry: ProjectRegistry, tmp_path: Path) -> None:
    with pytest.raises(RpcError) as info:
        registry.get("nope")
    assert info.value.code is ErrorCode.NOT_FOUND and info.value.data == {"projects": ["tiny"]}
    for path in ("../projects/tiny", "./tiny", "~/x"):
        with pytest.raises(RpcError) as info:
            registry.get(path)
        assert info.value.code is ErrorCode.FORBIDDEN
    with pytest.raises(RpcError) as info:
        registry.get(str(tmp_path))  # inside nothing configured
    assert info.value.code is ErrorCode.FORBIDDEN
    assert registry.get(str(tmp_path / "projects" / "tiny")).name == "tiny"


async def test_the_shipped_demo_project_takes_a_test(state: Path) -> None:
    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=state)
    async with manager.lease(None, kotlin_test("ShippedDemoTest")) as lease:
        assert lease.project.demo and lease.branch is StartBranch.FRESH
        siblings = {p.name for p in lease.test_file.parent.iterdir()}
    assert lease.test_file.relative_to(lease.project_dir) == TEST_DIR / "ShippedDemoTest.kt"
    assert {"ShippedDemoTest.kt", "StrictModeRule.kt", "DroidUnblocker.kt"} <= siblings
    assert not (template_dir() / TEST_DIR / "ShippedDemoTest.kt").exists()  # never the source


# -- the four start branches -----------------------------------------------------------------


async def test_branch_4_fresh_init_copies_the_project_without_build_outputs(
    registry: ProjectRegistry, state: Path, project: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state)
    async with manager.lease("tiny", kotlin_test()) as lease:
        assert lease.branch is StartBranch.FRESH and lease.reason is None
        wc = lease.project_dir
        assert lease.test_file == wc / TEST_DIR / "DiskReadTest.kt"
        assert lease.test_file.read_text() == kotlin_test()
        assert lease.test_class == f"{NS}.DiskReadTest"
        copied = files_of(wc)
        for rel in PROJECT_FILES:
            assert copied[rel] == (project / rel).read_bytes()
        for rel in BUILD_OUTPUTS:
            assert rel not in copied
        # a source package named "build" is source, not a build output
        assert "app/src/main/java/com/droidwire/demo/build/Versions.kt" in copied


async def test_branch_1_ready_applies_only_the_test_file(
    registry: ProjectRegistry, state: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test("FirstTest")) as first:
        (first.project_dir / "app/build").mkdir()
        (first.project_dir / "app/build/incremental.bin").write_text("gradle state")
    async with manager.lease("tiny", kotlin_test("SecondTest")) as second:
        assert second.branch is StartBranch.READY and not second.synced
        assert second.project_dir == first.project_dir
        # the earlier test file is gone, the new one is there, build state kept
        assert not first.test_file.exists()
        assert second.test_file.read_text() == kotlin_test("SecondTest")
        assert (second.project_dir / "app/build/incremental.bin").exists()
        assert sorted(p.name for p in second.test_file.parent.glob("*.kt")) == [
            "SecondTest.kt",
            "StrictModeRule.kt",
        ]


async def test_ready_root_reapplies_project_files_that_changed(
    registry: ProjectRegistry, state: Path, project: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()):
        pass
    changed = project / "app/src/main/java/com/droidwire/demo/MainActivity.kt"
    changed.write_text(f"package {NS}\nclass MainActivity {{ fun added() = 1 }}\n")
    async with manager.lease("tiny", kotlin_test()) as lease:
        assert lease.branch is StartBranch.READY and lease.synced
        assert "added" in (lease.project_dir / changed.relative_to(project)).read_text()


async def test_snapshot_round_trip_and_branch_2_restore(
    registry: ProjectRegistry, state: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()) as lease:
        wc = lease.project_dir
        (wc / "app/build").mkdir()
        (wc / "app/build/out.bin").write_text("output")
        before = files_of(wc)
    await manager.stop()
    snapshot = state / "tiny" / "snapshot.tar.gz"
    with tarfile.open(snapshot, "r:gz") as tf:
        names = set(tf.getnames())
        meta = dict(tf.pax_headers)
    assert "app/build.gradle.kts" in names
    assert not any(n.startswith(("app/build/", ".gradle/")) for n in names)
    assert f"{TEST_DIR}/DiskReadTest.kt" not in names  # ephemeral entries are not persisted
    assert meta["droidwire.project"] == "tiny"

    shutil.rmtree(wc)  # root still ready, project dir missing
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test("Again")) as lease:
        assert lease.branch is StartBranch.RESTORED and not lease.synced
        after = files_of(lease.project_dir)
    expected = {k: v for k, v in before.items() if not k.startswith("app/build/")}
    expected.pop(f"{TEST_DIR}/DiskReadTest.kt")
    expected[f"{TEST_DIR}/Again.kt"] = kotlin_test("Again").encode()
    assert after == expected


async def test_branch_3_hydrate_then_all_entries(
    registry: ProjectRegistry, state: Path, project: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()):
        pass
    await manager.stop()
    shutil.rmtree(state / "tiny" / "slot-0")  # root gone, snapshot kept
    (project / "app/src/main/java/com/droidwire/demo/New.kt").write_text(f"package {NS}\n")

    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()) as lease:
        assert lease.branch is StartBranch.HYDRATED and lease.synced and lease.reason is None
        assert (lease.project_dir / "app/src/main/java/com/droidwire/demo/New.kt").exists()
        assert lease.test_file.exists()


async def test_a_second_slot_hydrates_from_the_first_ones_snapshot(
    registry: ProjectRegistry, state: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=2)
    async with manager.lease("tiny", kotlin_test()):
        pass
    assert await manager.snapshot("tiny")
    async with (
        manager.lease("tiny", kotlin_test("A")) as a,
        manager.lease("tiny", kotlin_test("B")) as b,
    ):
        assert {a.branch, b.branch} == {StartBranch.READY, StartBranch.HYDRATED}


def _corrupt_garbage(path: Path) -> None:
    path.write_bytes(b"this is not a tarball")


def _corrupt_truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_unsafe_member(path: Path) -> None:
    with tarfile.open(path, "r:gz") as tf:
        tf.getmembers()
        headers = dict(tf.pax_headers)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 4
        tf.addfile(info, io.BytesIO(b"evil"))
    path.write_bytes(gzip.compress(buf.getvalue()))


def _corrupt_foreign(path: Path) -> None:
    buf = io.BytesIO()
    headers = {"droidwire.format": "1", "droidwire.project": "tiny", "droidwire.source": "/else"}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
        info = tarfile.TarInfo("settings.gradle.kts")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"foo"))
    path.write_bytes(gzip.compress(buf.getvalue()))


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (_corrupt_garbage, "corrupt snapshot"),
        (_corrupt_truncated, "corrupt snapshot"),
        (_corrupt_unsafe_member, "corrupt snapshot"),
        (_corrupt_foreign, "snapshot belongs to"),
    ],
)
@pytest.mark.parametrize("keep_root", [True, False], ids=["ready-root", "no-root"])
async def test_unusable_snapshot_falls_back_to_fresh_init_with_a_logged_reason(
    registry: ProjectRegistry,
    state: Path,
    caplog: pytest.LogCaptureFixture,
    corrupt: object,
    reason: str,
    keep_root: bool,
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()):
        pass
    await manager.stop()
    corrupt(state / "tiny" / "snapshot.tar.gz")  # type: ignore[operator]
    if keep_root:
        shutil.rmtree(state / "tiny" / "slot-0" / "project")
    else:
        shutil.rmtree(state / "tiny" / "slot-0")

    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    with caplog.at_level(logging.WARNING, logger="droidwire.bridge.workspace"):
        async with manager.lease("tiny", kotlin_test()) as lease:
            assert lease.branch is StartBranch.FRESH
            assert lease.reason is not None and reason in lease.reason
            assert (lease.project_dir / "app/build.gradle.kts").exists()
    assert any(reason in r.getMessage() for r in caplog.records)
    assert not matching(state, "**/escaped.txt")
    assert not matching(state / "tiny" / "slot-0", ".init-*")


async def test_stop_snapshot_replaces_a_corrupt_one(registry: ProjectRegistry, state: Path) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()):
        pass
    _corrupt_garbage(state / "tiny" / "snapshot.tar.gz")
    await manager.stop()
    with tarfile.open(state / "tiny" / "snapshot.tar.gz", "r:gz") as tf:
        assert "settings.gradle.kts" in tf.getnames()


async def test_leases_are_refused_once_stopping(registry: ProjectRegistry, state: Path) -> None:
    manager = WorkspaceManager(registry, state_dir=state)
    await manager.stop()
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", kotlin_test()):
            pass
    assert info.value.code is ErrorCode.UNAVAILABLE


# -- confinement -----------------------------------------------------------------------------


async def test_symlinked_package_dir_pointing_out_is_refused(
    tmp_path: Path, registry: ProjectRegistry, state: Path, project: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()) as lease:
        wc = lease.project_dir
    # plant a link where the package directory is, in the working copy
    shutil.rmtree(wc / "app/src/androidTest/java/com/droidwire")
    (wc / "app/src/androidTest/java/com/droidwire").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", kotlin_test()):
            pass
    assert info.value.code is ErrorCode.FORBIDDEN
    assert info.value.data and info.value.data["rule"] == "symlink_in_path"
    assert list(outside.rglob("*")) == []


async def test_a_working_copy_replaced_by_a_link_is_never_followed(
    tmp_path: Path, registry: ProjectRegistry, state: Path
) -> None:
    outside = make_project(tmp_path / "elsewhere")
    before = files_of(outside)
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test()) as lease:
        wc = lease.project_dir
    shutil.rmtree(wc)
    wc.symlink_to(outside, target_is_directory=True)
    async with manager.lease("tiny", kotlin_test("Next")) as lease:
        assert lease.branch is StartBranch.FRESH  # ready root, but no real dir: started over
        assert not lease.project_dir.is_symlink()
    assert files_of(outside) == before


async def test_symlinked_source_set_in_the_project_is_refused(tmp_path: Path, state: Path) -> None:
    project = make_project(tmp_path / "projects")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(project / "app/src/androidTest")
    (project / "app/src/androidTest").symlink_to(outside, target_is_directory=True)
    registry = ProjectRegistry.from_config(
        {"tiny": str(project)}, roots=[tmp_path / "projects"], include_demo=False
    )
    manager = WorkspaceManager(registry, state_dir=state)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", kotlin_test()):
            pass
    assert info.value.code is ErrorCode.FORBIDDEN
    assert list(outside.rglob("*")) == []


async def test_test_named_like_a_project_file_does_not_overwrite_it(
    registry: ProjectRegistry, state: Path, project: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", kotlin_test("StrictModeRule")):
            pass
    assert info.value.code is ErrorCode.CONFLICT
    wc = state / "tiny" / "slot-0" / "project"
    assert (wc / TEST_DIR / "StrictModeRule.kt").read_text() == PROJECT_FILES[
        f"{TEST_DIR}/StrictModeRule.kt"
    ]
    async with manager.lease("tiny", kotlin_test()) as lease:  # the slot is fine afterwards
        assert lease.branch is StartBranch.READY


@pytest.mark.parametrize(
    "bad",
    [
        kotlin_test(cls="build.gradle.kts"),
        kotlin_test(package="com.droidwire.demo/../../../.."),
        kotlin_test(package="com.example"),
    ],
)
async def test_refused_tests_write_nothing(
    registry: ProjectRegistry, state: Path, bad: str
) -> None:
    manager = WorkspaceManager(registry, state_dir=state)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", bad):
            pass
    assert info.value.code is ErrorCode.FORBIDDEN
    assert not matching(state.parent, "state")  # refused before any slot was touched


async def test_namespace_is_read_from_the_project(tmp_path: Path, state: Path) -> None:
    project = make_project(tmp_path / "projects", namespace="org.other.app")
    registry = ProjectRegistry.from_config(
        {"other": str(project)}, roots=[tmp_path / "projects"], include_demo=False
    )
    manager = WorkspaceManager(registry, state_dir=state)
    with pytest.raises(RpcError) as info:
        async with manager.lease("other", kotlin_test()):
            pass
    assert info.value.code is ErrorCode.FORBIDDEN
    assert info.value.data and info.value.data["namespace"] == "org.other.app"
    async with manager.lease("other", kotlin_test(package="org.other.app.tests")) as lease:
        assert lease.test_file.parts[-5:] == ("org", "other", "app", "tests", "DiskReadTest.kt")


# -- disk errors ------------------------------------------------------------------------------


async def test_enospc_writing_the_test_is_unavailable_and_leaves_no_half_file(
    registry: ProjectRegistry, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = kotlin_test(marker="payload")
    real_write = fsutil._write_all

    def full_disk(fh, data: bytes) -> None:  # type: ignore[no-untyped-def]
        if b"payload" not in data:
            return real_write(fh, data)
        fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fsutil, "_write_all", full_disk)
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", code):
            pass
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.data and info.value.data["errno"] == "ENOSPC"
    test_dir = state / "tiny" / "slot-0" / "project" / TEST_DIR
    assert sorted(p.name for p in test_dir.iterdir()) == ["StrictModeRule.kt"]  # no temp, no half

    monkeypatch.setattr(fsutil, "_write_all", real_write)  # space again: the slot recovers
    async with manager.lease("tiny", code) as lease:
        assert lease.test_file.read_text() == code


async def test_enospc_during_fresh_init_leaves_no_half_copy(
    registry: ProjectRegistry, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_copy, real_copytree = shutil.copy2, shutil.copytree
    calls = 0

    def copy_until_full(src, dst, **kw):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_copy(src, dst, **kw)

    def copytree(src, dst, *args, **kw):  # type: ignore[no-untyped-def]
        if not args:  # the outer call; copytree recurses with positional arguments
            kw["copy_function"] = copy_until_full
        return real_copytree(src, dst, *args, **kw)

    monkeypatch.setattr(shutil, "copytree", copytree)
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", kotlin_test()):
            pass
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.data and info.value.data["errno"] == "ENOSPC"
    assert "No space left on device" in info.value.message
    slot = state / "tiny" / "slot-0"
    assert not (slot / "project").exists() and not (slot / "ready.json").exists()
    assert not list(slot.glob(".init-*"))


# -- isolation --------------------------------------------------------------------------------


async def test_concurrent_builds_get_separate_working_copies(
    registry: ProjectRegistry, state: Path
) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=2)
    inside = asyncio.Barrier(2)
    seen: dict[str, list[str]] = {}

    async def build(name: str) -> None:
        async with manager.lease("tiny", kotlin_test(name, marker=name)) as lease:
            await inside.wait()  # both leases held at the same time
            names = sorted(p.name for p in lease.test_file.parent.glob("*Test.kt"))
            seen[name] = names
            assert name in lease.test_file.read_text()

    await asyncio.gather(build("AlphaTest"), build("BetaTest"))
    assert seen == {"AlphaTest": ["AlphaTest.kt"], "BetaTest": ["BetaTest.kt"]}


async def test_a_full_pool_queues_then_answers_busy(registry: ProjectRegistry, state: Path) -> None:
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
    async with manager.lease("tiny", kotlin_test("HeldTest")) as held:
        with pytest.raises(RpcError) as info:
            async with manager.lease("tiny", kotlin_test("WaitingTest"), acquire_timeout_s=0.05):
                pass
        assert info.value.code is ErrorCode.BUSY
        assert held.test_file.read_text() == kotlin_test("HeldTest")
    async with manager.lease("tiny", kotlin_test("WaitingTest")) as lease:
        assert lease.slot == held.slot


async def test_cancelled_start_frees_the_slot_only_after_the_thread_ends(
    registry: ProjectRegistry, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real_prepare = manager_mod._prepare

    def slow_prepare(*args):  # type: ignore[no-untyped-def]
        entered.set()
        assert release.wait(10)
        return real_prepare(*args)

    monkeypatch.setattr(manager_mod, "_prepare", slow_prepare)
    manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)

    async def hold() -> None:
        async with manager.lease("tiny", kotlin_test()):
            pass

    task = asyncio.create_task(hold())
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pool = manager._pools["tiny"]
    assert pool.free.qsize() == 0  # the thread still works in the slot
    release.set()
    async with asyncio.timeout(10):
        assert await pool.free.get() == 0


async def test_a_slot_locked_by_another_process_is_skipped(
    registry: ProjectRegistry, state: Path
) -> None:
    # flock locks belong to an open file description: a second descriptor in this process
    # conflicts exactly like another process would.
    (state / "tiny").mkdir(parents=True)
    fd = os.open(state / "tiny" / "slot-0.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        manager = WorkspaceManager(registry, state_dir=state, slots_per_project=2)
        async with manager.lease("tiny", kotlin_test()) as lease:
            assert lease.slot == 1
        assert not matching(state / "tiny", "slot-0")  # never touched
        manager = WorkspaceManager(registry, state_dir=state, slots_per_project=1)
        with pytest.raises(RpcError) as info:
            async with manager.lease("tiny", kotlin_test()):
                pass
        assert info.value.code is ErrorCode.BUSY
        assert info.value.data and info.value.data["reason"] == "locked"
    finally:
        os.close(fd)
    async with manager.lease("tiny", kotlin_test()) as lease:  # lock gone: usable again
        assert lease.slot == 0
