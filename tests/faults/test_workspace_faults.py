"""Bad input and a full disk at the workspace writer (device_bridge.workspace).

Hostile test code tries to place its file outside the androidTest sources — traversal in the
package, class names that are build files, Kotlin backtick names, separators, look-alike
dots, NUL — or to overwrite a project file. Whatever is refused or accepted, afterwards: no
file outside ``<module>/src/androidTest/`` differs from the project, and the project itself is
untouched. ENOSPC injected at the writer must surface as ``unavailable`` and leave no file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from device_bridge.workspace import ProjectRegistry, WorkspaceManager, fsutil
from protocol.errors import ErrorCode, RpcError
from tests.device_bridge.test_workspace import NS, TEST_DIR, make_project
from tests.faults.figures import record

AREA = "security: workspace writes"
ANDROID_TEST = "app/src/androidTest/"


def _test(package: str = NS, cls: str = "ProbeTest", extra: str = "") -> str:
    return (f"{extra}package {package}\n\nimport org.junit.Test\n\n"
            f"class {cls} {{\n    @Test fun run() {{}}\n}}\n")


HOSTILE: list[str] = [
    *(_test(package=p) for p in [
        f"{NS}/../../../..", f"{NS}.`..`.`..`", f"{NS}...", "..", "/etc", f"{NS}\\..\\..",
        f"{NS}.\u2024\u2024", f"{NS}.%2e%2e", f"{NS};", f"{NS}\x00x", "com.example",
        f"{NS}.`../../../../../tmp`", f"{NS}.`build.gradle.kts`", f"{NS}. ..", "`..`",
        f"{NS}.{'a' * 300}", f"{NS}.{'.'.join(['b'] * 200)}", f"{NS}\nimport x",
    ]),
    *(_test(cls=c) for c in [
        "`build.gradle.kts`", "`../../build.gradle.kts`", "`../../../../settings.gradle.kts`",
        "`/etc/passwd`", "`..`", "`AndroidManifest.xml`", "StrictModeRule", "`a/b`",
        "`a\\\\b`", "`CON`", "X" * 300, "`.gradle`", "`\u2215etc\u2215x`",
    ]),
    _test(extra='@file:JvmName("../../../../build.gradle")\n'),
    _test(extra="// package evil.outside\n/* package ../../x */\n"),
    _test(package=NS) + "\npackage com.other\nclass Second\n",
    "package " + NS + "\n\nclass `build.gradle.kts` {}\n",
    "",
    "not kotlin at all \x00\x01",
]


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _escapes(working_copy: Path, project_digest: dict[str, str]) -> list[str]:
    """Files of the working copy, outside the androidTest sources, that the project lacks or
    that differ from it."""
    out = []
    for rel, digest in _digest(working_copy).items():
        original = project_digest.get(rel)
        if rel.startswith(ANDROID_TEST) and original is None:
            continue  # a new file in the test sources: the test itself
        if original != digest:
            out.append(rel)
    return out


async def test_hostile_test_code_writes_only_its_test_file(tmp_path: Path) -> None:
    project = make_project(tmp_path / "projects")
    registry = ProjectRegistry.from_config(
        {"tiny": str(project)}, roots=[tmp_path / "projects"], include_demo=False
    )
    project_before = _digest(project)
    outside_before = _names(tmp_path)
    manager = WorkspaceManager(registry, state_dir=tmp_path / "state", slots_per_project=1)
    refused = accepted = 0
    escapes: list[str] = []
    for code in HOSTILE:
        try:
            async with manager.lease("tiny", code) as lease:
                accepted += 1
                written = lease.test_file.resolve().relative_to(lease.project_dir.resolve())
                if not written.as_posix().startswith(ANDROID_TEST):
                    escapes.append(f"test file at {written}")
                escapes += [f"{code[:60]!r}: {e}" for e in _escapes(lease.project_dir,
                                                                    project_before)]
        except RpcError as exc:
            assert exc.code in (ErrorCode.FORBIDDEN, ErrorCode.BAD_REQUEST, ErrorCode.CONFLICT)
            refused += 1
    await manager.stop()
    changed = [rel for rel, d in _digest(project).items() if project_before.get(rel) != d]
    strays = sorted(set(_names(tmp_path)) - set(outside_before) - {"state"})
    record(AREA, "hostile test sources", len(HOSTILE))
    record(AREA, "  refused (forbidden / bad_request / conflict)", refused)
    record(AREA, "  accepted, written inside the androidTest sources", accepted)
    record(AREA, "  files written outside androidTest or project files changed",
           len(escapes) + len(changed) + len(strays), must_be_zero=True)
    assert not escapes and not changed and not strays, (escapes, changed, strays)
    assert refused >= len(HOSTILE) - 8  # most are refused outright


@pytest.mark.parametrize("where", ["test file", "fresh copy"])
async def test_enospc_at_the_writer_is_unavailable_and_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    project = make_project(tmp_path / "projects")
    registry = ProjectRegistry.from_config(
        {"tiny": str(project)}, roots=[tmp_path / "projects"], include_demo=False
    )
    code = _test(cls="EnospcProbe")
    real_write = fsutil._write_all
    real_copy, real_copytree = shutil.copy2, shutil.copytree
    injected = 0

    def full_disk(fh: object, data: bytes) -> None:
        nonlocal injected
        if b"EnospcProbe" not in data:
            return real_write(fh, data)  # type: ignore[arg-type]
        injected += 1
        fh.write(data[: len(data) // 2])  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_disk_copy(src: str, dst: str, *args: object, **kwargs: object) -> object:
        nonlocal injected
        if str(src).endswith("MainActivity.kt"):
            injected += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_copy(src, dst, *args, **kwargs)

    def copytree(src: str, dst: str, *args: object, **kwargs: object) -> object:
        if not args:  # the outer call; copytree recurses with positional arguments
            kwargs["copy_function"] = full_disk_copy
        return real_copytree(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    if where == "test file":
        monkeypatch.setattr(fsutil, "_write_all", full_disk)
    else:
        monkeypatch.setattr(shutil, "copytree", copytree)
    manager = WorkspaceManager(registry, state_dir=tmp_path / "state", slots_per_project=1)
    with pytest.raises(RpcError) as info:
        async with manager.lease("tiny", code):
            pass
    assert injected >= 1
    ok = info.value.code is ErrorCode.UNAVAILABLE and (info.value.data or {}).get("errno") == "ENOSPC"
    leftovers = [p.name for p in (tmp_path / "state").rglob("*")
                 if p.name.startswith((".droidwire-", ".init-")) or p.name == "EnospcProbe.kt"]
    record(AREA, f"ENOSPC at the {where}: half-written files left", len(leftovers),
           must_be_zero=True)
    record(AREA, f"ENOSPC at the {where}: reported as unavailable/ENOSPC", "yes" if ok else "NO")
    assert ok, info.value
    assert leftovers == []
    monkeypatch.undo()  # space again: the next lease works
    async with manager.lease("tiny", code) as lease:
        assert lease.test_file.read_text() == code
        assert lease.test_file.relative_to(lease.project_dir).parts[:4] == TEST_DIR.parts[:4]
    await manager.stop()
