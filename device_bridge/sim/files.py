"""The simulated device's file system: a dict of files under the shell user's writable places.

The ``shell`` user of a real device (uid 2000) can write ``/data/local/tmp`` and the shared
storage ``/sdcard``; it can see that ``/data`` exists but not list it. We model exactly that:
a fixed set of read-only directories, and files (with mode and mtime) below the writable roots,
bounded by a storage quota so a client cannot fill the host's memory.
"""

from __future__ import annotations

import posixpath
import stat as stat_mod
import time
from collections.abc import Callable
from dataclasses import dataclass

from device_bridge.sim.shell import match_paths

__all__ = ["WRITABLE_ROOTS", "FileStat", "SimFiles"]

WRITABLE_ROOTS = ("/data/local/tmp", "/sdcard")
_SYSTEM_DIRS = {
    "/": 0o40755, "/data": 0o40771, "/data/local": 0o40751, "/data/local/tmp": 0o40771,
    "/sdcard": 0o42770, "/system": 0o40755, "/system/bin": 0o40755, "/dev": 0o40755,
    "/proc": 0o40555, "/vendor": 0o40755, "/storage": 0o40755, "/bugreports": 0o40750,
}
_LISTABLE = {"/", "/data/local/tmp", "/sdcard", "/system", "/bugreports"}
MAX_PATH = 1024


@dataclass
class FileStat:
    mode: int
    size: int
    mtime: int


@dataclass
class _File:
    data: bytes
    mode: int
    mtime: int


def _norm(path: str) -> str:
    if not path or "\0" in path or len(path.encode()) > MAX_PATH:
        raise OSError(f"{path[:60]!r}: invalid path")
    if not path.startswith("/"):
        path = "/" + path
    return posixpath.normpath(path).replace("//", "/")


def _writable(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in WRITABLE_ROOTS)


class SimFiles:
    def __init__(self, *, quota: int = 512 * 1024 * 1024) -> None:
        self.quota = quota
        self._files: dict[str, _File] = {}
        self._dirs: dict[str, int] = {}  # user-created directories → mtime
        # Read-only files whose content is made when read (/proc/stat…); like the kernel's,
        # they stat with size 0.
        self.virtual: dict[str, Callable[[], bytes]] = {}

    @property
    def used(self) -> int:
        return sum(len(f.data) for f in self._files.values())

    def is_dir(self, path: str) -> bool:
        p = _norm(path)
        return p in _SYSTEM_DIRS or p in self._dirs

    def stat(self, path: str) -> FileStat | None:
        p = _norm(path)
        if p in _SYSTEM_DIRS:
            return FileStat(_SYSTEM_DIRS[p], 4096, 1_230_768_000)
        if p in self._dirs:
            return FileStat(0o40771, 4096, self._dirs[p])
        if p in self.virtual:
            return FileStat(0o100444, 0, int(time.time()))
        f = self._files.get(p)
        return FileStat(f.mode, len(f.data), f.mtime) if f else None

    def read(self, path: str) -> bytes:
        p = _norm(path)
        if self.is_dir(p):
            raise IsADirectoryError(f"{path}: Is a directory")
        if p in self.virtual:
            return self.virtual[p]()
        f = self._files.get(p)
        if f is None:
            if not _writable(p) and p != "/":
                raise PermissionError(f"{path}: Permission denied")
            raise FileNotFoundError(f"{path}: No such file or directory")
        return f.data

    def write(
        self, path: str, data: bytes, *, mode: int = 0o100644, mtime: int | None = None,
        append: bool = False,
    ) -> None:
        p = _norm(path)
        if not _writable(p) or p in WRITABLE_ROOTS:
            raise PermissionError(f"{path}: Permission denied")
        if self.is_dir(p):
            raise IsADirectoryError(f"{path}: Is a directory")
        old = self._files.get(p)
        body = (old.data + data) if (append and old) else data
        if self.used - (len(old.data) if old else 0) + len(body) > self.quota:
            raise OSError(f"{path}: No space left on device")
        self._mkdirs(posixpath.dirname(p))
        fmode = stat_mod.S_IFREG | ((mode & 0o777) or 0o644)  # adbd: mode &= 0777
        self._files[p] = _File(body, fmode, int(time.time()) if mtime is None else mtime)

    def write_system(self, path: str, data: bytes, *, mode: int = 0o100640) -> None:
        """A file a system service writes where the shell user cannot (``/bugreports``)."""
        p = _norm(path)
        if posixpath.dirname(p) not in _SYSTEM_DIRS:
            raise PermissionError(f"{path}: not a system directory")
        old = self._files.get(p)
        if self.used - (len(old.data) if old else 0) + len(data) > self.quota:
            raise OSError(f"{path}: No space left on device")
        self._files[p] = _File(data, mode, int(time.time()))

    def _mkdirs(self, d: str) -> None:
        while d not in _SYSTEM_DIRS and d not in self._dirs:
            if d in self._files:
                raise NotADirectoryError(f"{d}: Not a directory")
            self._dirs[d] = int(time.time())
            d = posixpath.dirname(d)

    def mkdir(self, path: str, *, parents: bool = False) -> None:
        p = _norm(path)
        if not _writable(p):
            raise PermissionError(f"{path}: Permission denied")
        if self.is_dir(p) or p in self._files:
            if parents and self.is_dir(p):
                return
            raise FileExistsError(f"{path}: File exists")
        if not parents and not self.is_dir(posixpath.dirname(p)):
            raise FileNotFoundError(f"{path}: No such file or directory")
        self._mkdirs(p)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        p = _norm(path)
        if p in self._files:
            if not _writable(p):
                raise PermissionError(f"{path}: Permission denied")
            del self._files[p]
            return
        if p in self._dirs:
            if not recursive:
                raise IsADirectoryError(f"{path}: Is a directory")
            for f in [f for f in self._files if f.startswith(p + "/")]:
                del self._files[f]
            for d in [d for d in self._dirs if d == p or d.startswith(p + "/")]:
                del self._dirs[d]
            return
        if p in _SYSTEM_DIRS:
            raise PermissionError(f"{path}: Permission denied")
        raise FileNotFoundError(f"{path}: No such file or directory")

    def listdir(self, path: str) -> list[tuple[str, FileStat]]:
        """Entries of a directory (without ``.``/``..``), sorted by name."""
        p = _norm(path)
        if not self.is_dir(p):
            if p in self._files:
                raise NotADirectoryError(f"{path}: Not a directory")
            raise FileNotFoundError(f"{path}: No such file or directory")
        if p in _SYSTEM_DIRS and p not in _LISTABLE:
            raise PermissionError(f"{path}: Permission denied")
        names: dict[str, FileStat] = {}
        prefix = p.rstrip("/") + "/"
        candidates = list(self._files) + list(self._dirs)
        if p == "/":
            candidates += [d for d in _SYSTEM_DIRS if d != "/"]
        for full in candidates:
            if full.startswith(prefix) and "/" not in full[len(prefix):]:
                st = self.stat(full)
                if st is not None:
                    names[full[len(prefix):]] = st
        return sorted(names.items())

    def glob(self, pattern: str) -> list[str]:
        p = posixpath.normpath(pattern)
        return match_paths(list(self._files) + list(self._dirs), p)
