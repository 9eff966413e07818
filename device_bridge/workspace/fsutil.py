"""File-system primitives of the workspace: atomic writes, confinement checks, copy filters.

Every write the bridge makes into a workspace goes through :func:`atomic_write`: the bytes
land in a temporary file in the target's own directory, are flushed to disk, and only then
renamed over the target (``os.replace`` is atomic on POSIX within one file system). A full
disk (ENOSPC) or any other ``OSError`` therefore leaves either the old file or none — never
half a file — and surfaces as a typed ``unavailable`` error, never as a crash.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import IO

from protocol.errors import ErrorCode, RpcError

__all__ = [
    "BUILD_OUTPUT_DIRS",
    "atomic_write",
    "ensure_dirs_no_symlinks",
    "ignore_build_outputs",
    "is_within",
    "os_error",
    "skipped_names",
    "walk_files",
]

# Build outputs and tool state are never copied from a project and never put into a snapshot:
# Gradle recreates them. Tool directories are skipped wherever they appear; ``build/`` and
# ``captures/`` only next to a build script (a Gradle module) or at the project root, so a
# source package that happens to be called ``build`` is kept.
TOOL_STATE_DIRS = frozenset({".gradle", ".kotlin", ".idea", ".cxx", ".externalNativeBuild"})
BUILD_OUTPUT_DIRS = frozenset({"build", "captures"})
_BUILD_SCRIPTS = ("build.gradle.kts", "build.gradle")


def os_error(action: str, exc: OSError) -> RpcError:
    """Translate an ``OSError`` into the typed ``unavailable`` error, keeping errno's name."""
    code, reason = exc.errno, exc.strerror
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        # copytree gathers per-file failures as (src, dst, "[Errno N] text: path") tuples.
        why = str(exc.args[0][0][-1])
        m = re.match(r"\[Errno (\d+)\] ([^:]+)", why)
        code, reason = (int(m.group(1)), m.group(2)) if m else (None, why)
    name = errno.errorcode.get(code or 0, "EIO")
    reason = reason or str(exc)
    return RpcError(
        ErrorCode.UNAVAILABLE,
        f"workspace unavailable: cannot {action}: {reason}",
        {"errno": name, "reason": reason},
    )


def _write_all(fh: IO[bytes], data: bytes) -> None:
    """Write ``data`` to ``fh`` (module level so tests can inject ENOSPC here)."""
    fh.write(data)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically (temp file + fsync + rename).

    Raises ``RpcError(unavailable)`` on any ``OSError``; the temporary file is removed and the
    target is left as it was.
    """
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".droidwire-", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_all(fh, data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise os_error(f"write {path.name}", exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_within(path: Path, root: Path) -> bool:
    """True when ``path`` is ``root`` or lies under it (both taken as given: resolve first)."""
    return path == root or root in path.parents


def ensure_dirs_no_symlinks(base: Path, parts: Iterable[str]) -> Path:
    """Create ``base/parts…`` one level at a time, refusing any component that is a symlink.

    ``base`` itself must already exist and have been checked by the caller. Never follows a
    link: a directory planted as a symlink to somewhere outside is refused with ``forbidden``.
    """
    current = base
    for part in parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            try:
                os.mkdir(current, 0o755)
            except OSError as exc:
                raise os_error(f"create {current.name}/", exc) from exc
            continue
        except OSError as exc:
            raise os_error(f"inspect {current.name}", exc) from exc
        if stat.S_ISLNK(st.st_mode):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"refused: {current.name}/ in the test source path is a symbolic link",
                {"rule": "symlink_in_path"},
            )
        if not stat.S_ISDIR(st.st_mode):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"refused: {current.name} in the test source path is not a directory",
                {"rule": "not_a_directory"},
            )
    return current


def skipped_names(directory: Path, names: Collection[str], *, at_root: bool) -> set[str]:
    """The entries of ``directory`` that are build outputs or tool state (see above)."""
    skipped = {n for n in names if n in TOOL_STATE_DIRS}
    if at_root or any(script in names for script in _BUILD_SCRIPTS):
        skipped |= {n for n in names if n in BUILD_OUTPUT_DIRS and (directory / n).is_dir()}
    return skipped


def ignore_build_outputs(root: Path) -> Callable[[str, list[str]], set[str]]:
    """A ``shutil.copytree`` ``ignore`` callable for a copy of the project at ``root``."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        d = Path(directory)
        return skipped_names(d, names, at_root=d == root)

    return ignore


def walk_files(root: Path) -> Iterator[Path]:
    """Every file and symlink under ``root`` (relative paths, sorted), build outputs skipped.

    Symlinks to directories are yielded as entries, never followed.
    """
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        skip = skipped_names(d, dirnames + filenames, at_root=d == root)
        links = [n for n in dirnames if (d / n).is_symlink()]
        dirnames[:] = sorted(n for n in dirnames if n not in skip and n not in links)
        for name in sorted(filenames + links):
            if name not in skip:
                yield (d / name).relative_to(root)
