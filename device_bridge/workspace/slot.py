"""One working copy of a project (a *slot*): its markers, its snapshot, its lock file, and the
4-branch rule that starts it for a build.

:mod:`device_bridge.workspace.manager` describes the layout and the four branches
(:class:`StartBranch`) and leases slots to builds; here :meth:`Slot.start` takes the branch, a
snapshot that cannot be used raises :class:`SnapshotUnusable` inside and falls back to a fresh
copy, and :meth:`Slot.write_snapshot` persists one. Every method of a slot blocks: the manager
calls them from a thread.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from enum import StrEnum
from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode, RpcError

from .fsutil import (
    atomic_write,
    ensure_dirs_no_symlinks,
    ignore_build_outputs,
    is_within,
    os_error,
    walk_files,
)
from .placement import TestPlacement
from .projects import Project

__all__ = ["MARKER_FORMAT", "Slot", "SnapshotUnusable", "StartBranch", "source_fingerprint"]

log = logging.getLogger("droidwire.bridge.workspace")

MARKER_FORMAT = 1
_PAX_PREFIX = "droidwire."


class StartBranch(StrEnum):
    READY = "ready"  # 1: ephemeral entries only
    RESTORED = "restored"  # 2: snapshot restored into a ready root, + ephemeral
    HYDRATED = "hydrated"  # 3: snapshot hydrated into a new root, + all entries
    FRESH = "fresh"  # 4: a fresh copy of the project, + the test file


def source_fingerprint(root: Path) -> str:
    """A cheap identity of a project's files: paths, sizes, mtimes (build outputs excluded)."""
    h = hashlib.sha256()
    for rel in walk_files(root):
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue
        h.update(f"{rel.as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
    return h.hexdigest()[:32]


class SnapshotUnusable(Exception):
    """The snapshot cannot be restored; ``str(exc)`` is the reason that gets logged."""


class Slot:
    """One working copy of one project. All methods block: call them from a thread."""

    def __init__(self, project: Project, index: int, root: Path, snapshot: Path) -> None:
        self.project = project
        self.index = index
        self.root = root
        self.project_dir = root / "project"
        self.marker_path = root / "ready.json"
        self.snapshot_path = snapshot
        self.fingerprint = ""
        self.lock_path = root.parent / f"{root.name}.lock"
        self._lock_fd: int | None = None

    # -- the inter-process lock -----------------------------------------------------------
    # The pool isolates builds inside one process; an advisory lock file per slot keeps two
    # bridge processes (or a bridge and ``droidwire demo``) sharing a state dir apart.
    def try_lock(self) -> bool:
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise os_error(f"lock workspace slot {self.index}", exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    # -- the marker --------------------------------------------------------------------
    def read_marker(self) -> dict[str, Any] | None:
        try:
            raw = json.loads(self.marker_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (
            not isinstance(raw, dict)
            or raw.get("format") != MARKER_FORMAT
            or raw.get("project") != self.project.name
            or raw.get("source") != str(self.project.path)
        ):
            return None
        return raw

    def write_marker(self, fingerprint: str, ephemeral: list[str]) -> None:
        body = {
            "format": MARKER_FORMAT,
            "project": self.project.name,
            "source": str(self.project.path),
            "fingerprint": fingerprint,
            "ephemeral": ephemeral,
        }
        atomic_write(self.marker_path, json.dumps(body, indent=1).encode())

    # -- starting ----------------------------------------------------------------------
    def start(self) -> tuple[StartBranch, bool, str | None]:
        """Bring the working copy up by the 4-branch rule, without any test file; returns
        (branch, whether the project's files were applied, why a snapshot was not used)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(".init-*"):  # an init cut short by a crash
            shutil.rmtree(leftover, ignore_errors=True)
        fingerprint = source_fingerprint(self.project.path)
        marker = self.read_marker()
        reason: str | None = None

        if marker is not None and self.project_dir.is_dir() and not self.project_dir.is_symlink():
            branch = StartBranch.READY
            synced = marker.get("fingerprint") != fingerprint
        else:
            if self.project_dir.exists() or self.project_dir.is_symlink():
                # A working copy without a valid marker (another source, a crash mid-init),
                # or something that is not a directory where it should be: start over.
                self._remove(self.project_dir)
            try:
                if not self.snapshot_path.is_file():
                    raise SnapshotUnusable("no snapshot to restore")
                snap_fingerprint = self._restore_snapshot()
            except SnapshotUnusable as exc:
                # Branch 4 proper needs no reason; a snapshot that was there (or that a ready
                # root needed) and could not be used does.
                if marker is not None or self.snapshot_path.exists():
                    reason = str(exc)
                    log.warning(
                        "project %s slot %d: snapshot not used (%s); fresh init",
                        self.project.name,
                        self.index,
                        reason,
                    )
                self._fresh_copy()
                branch, synced = StartBranch.FRESH, False
            else:
                if marker is not None:
                    branch = StartBranch.RESTORED
                    synced = snap_fingerprint != fingerprint
                else:
                    branch, synced = StartBranch.HYDRATED, True
        if synced:
            self._apply_project_files()
        if branch is StartBranch.READY:
            self._remove_test_files(marker)
        self.fingerprint = fingerprint
        self.write_marker(fingerprint, [])  # the root is ready from here on
        log.info(
            "project %s slot %d: start branch %s%s",
            self.project.name,
            self.index,
            branch.value,
            " (project files applied)" if synced else "",
        )
        return branch, synced, reason

    def _remove(self, path: Path) -> None:
        if not is_within(path, self.root) or path == self.root:
            raise RuntimeError(f"refusing to remove {path} outside {self.root}")
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)

    def _new_init_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=".init-", dir=self.root))

    def _fresh_copy(self) -> None:
        tmp = self._new_init_dir()
        target = tmp / "project"
        try:
            shutil.copytree(
                self.project.path,
                target,
                symlinks=True,
                ignore=ignore_build_outputs(self.project.path),
            )
            os.replace(target, self.project_dir)
        except OSError as exc:
            raise os_error(f"copy project {self.project.name}", exc) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _apply_project_files(self) -> None:
        try:
            shutil.copytree(
                self.project.path,
                self.project_dir,
                symlinks=True,
                dirs_exist_ok=True,
                ignore=ignore_build_outputs(self.project.path),
            )
        except OSError as exc:  # shutil.Error included: it gathers per-file failures
            raise os_error(f"apply project {self.project.name}", exc) from exc

    def _restore_snapshot(self) -> str:
        """Extract the snapshot into the project dir; returns its source fingerprint."""
        tmp = self._new_init_dir()
        target = tmp / "project"
        try:
            with tarfile.open(self.snapshot_path, "r:gz") as tf:
                members = tf.getmembers()  # reads the whole archive: a truncation shows here
                meta = {
                    k.removeprefix(_PAX_PREFIX): v
                    for k, v in tf.pax_headers.items()
                    if k.startswith(_PAX_PREFIX)
                }
                if meta.get("format") != str(MARKER_FORMAT):
                    raise SnapshotUnusable("snapshot has no droidwire metadata")
                if meta.get("project") != self.project.name or meta.get("source") != str(
                    self.project.path
                ):
                    raise SnapshotUnusable(
                        f"snapshot belongs to {meta.get('project')}@{meta.get('source')}"
                    )
                target.mkdir()
                tf.extractall(target, members=members, filter="data")
            os.replace(target, self.project_dir)
            return str(meta.get("fingerprint", ""))
        except SnapshotUnusable:
            raise
        except (tarfile.TarError, EOFError, zlib.error, ValueError) as exc:
            raise SnapshotUnusable(f"corrupt snapshot: {type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise SnapshotUnusable(f"snapshot unreadable: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- the ephemeral entry: the test file --------------------------------------------
    def _remove_test_files(self, marker: dict[str, Any] | None) -> None:
        """Delete the test files earlier builds wrote (the marker lists them)."""
        android_test = (self.project_dir / self.project.module / "src" / "androidTest").resolve()
        for rel in (marker or {}).get("ephemeral", []):
            if not isinstance(rel, str):
                continue
            old = self.project_dir / rel
            # Only ever delete a regular .kt file that really lies under the androidTest sources.
            if (
                old.suffix == ".kt"
                and not old.is_symlink()
                and old.is_file()
                and is_within(old.parent.resolve(), android_test)
            ):
                old.unlink()

    def write_test(self, placement: TestPlacement, test_code: str) -> Path:
        """Write the test source (derived path, confined, atomic); refuse to overwrite."""
        android_test = self.project_dir / self.project.module / "src" / "androidTest"
        real_wc = self.project_dir.resolve()
        lang = (
            "kotlin"
            if (android_test / "kotlin").is_dir() and not (android_test / "java").is_dir()
            else "java"
        )
        # Every level from the slot's root down must be a real directory, never a link.
        source_root = ensure_dirs_no_symlinks(
            self.root, [self.project_dir.name, self.project.module, "src", "androidTest", lang]
        )
        *pkg_parts, file_name = placement.relative_parts
        directory = ensure_dirs_no_symlinks(source_root, pkg_parts)
        target = directory / file_name
        real_root = source_root.resolve()
        if not is_within(real_root, real_wc) or not is_within(directory.resolve(), real_root):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                "refused: the test source path escapes the working copy",
                {"rule": "path_escape"},
            )
        rel = target.relative_to(self.project_dir).as_posix()
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise os_error(f"inspect {file_name}", exc) from exc
        if st is not None:
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
                raise RpcError(
                    ErrorCode.FORBIDDEN,
                    f"refused: {rel} exists and is not a regular file",
                    {"rule": "symlink_in_path"},
                )
            raise RpcError(
                ErrorCode.CONFLICT,
                f"refused: {rel} is a file of the project; rename the test class",
                {"rule": "overwrites_project_file", "path": rel},
            )
        # Record the entry before writing it, so a crash in between still cleans it up.
        self.write_marker(self.fingerprint, [rel])
        atomic_write(target, test_code.encode("utf-8", "surrogatepass"))
        return target

    # -- the snapshot --------------------------------------------------------------------
    def write_snapshot(self) -> bool:
        """Persist this working copy (no build outputs, no test files) as the snapshot."""
        marker = self.read_marker()
        if marker is None or not self.project_dir.is_dir():
            return False
        ephemeral = {p for p in marker.get("ephemeral", []) if isinstance(p, str)}
        headers = {
            _PAX_PREFIX + "format": str(MARKER_FORMAT),
            _PAX_PREFIX + "project": self.project.name,
            _PAX_PREFIX + "source": str(self.project.path),
            _PAX_PREFIX + "fingerprint": str(marker.get("fingerprint", "")),
        }
        fd, tmp_name = tempfile.mkstemp(
            dir=self.snapshot_path.parent, prefix=".snapshot-", suffix=".tmp"
        )
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
                for rel in walk_files(self.project_dir):
                    if rel.as_posix() in ephemeral:
                        continue
                    path = self.project_dir / rel
                    if path.is_symlink():
                        link = os.readlink(path)
                        if os.path.isabs(link) or not is_within(
                            Path(os.path.normpath(path.parent / link)), self.project_dir
                        ):
                            log.info(
                                "snapshot of %s skips %s (link out of the tree)",
                                self.project.name,
                                rel,
                            )
                            continue
                    tf.add(path, arcname=rel.as_posix(), recursive=False)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.snapshot_path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise os_error(f"write the snapshot of {self.project.name}", exc) from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        log.info("project %s: snapshot written from slot %d", self.project.name, self.index)
        return True
