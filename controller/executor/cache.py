"""The controller's APK cache: one compile serves every device a test fans out to.

Keyed by the SHA-256 of the project name, the submitted test code and the *build boundary*
(docs/design.md §5): the same draft for the same project is compiled — and fixed — once per
boundary, and its APKs are shipped to any device's bridge afterwards, even a bridge that
cannot build (a Raspberry Pi). The boundary is whom the APKs' builder belongs to: its owner
(``owner:USER_ID``), or, for a bridge an admin marked shared, that bridge
(``shared:BRIDGE_ID``). A run looks up only the boundary of a builder it may use (its
caller's, its device owner's, or a shared one), so an APK a user's own bridge built — or
planted — is never served to another user's run on another user's device. Concurrent
requests for one key share a single compile (single flight). Bounded by total APK bytes,
least recently used first out. Only successful builds are kept: a failed one is retried.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.methods import Apk

__all__ = ["DEFAULT_CACHE_BYTES", "ApkCache", "CompiledTest", "build_boundary", "cache_key"]

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


def cache_key(project: str | None, test_code: str, boundary: str = "") -> str:
    """The key of a build of ``test_code`` for ``project`` by a builder within ``boundary``
    (:func:`build_boundary`)."""
    h = hashlib.sha256()
    h.update((project or "").encode("utf-8"))
    h.update(b"\0")
    h.update(boundary.encode("utf-8"))
    h.update(b"\0")
    h.update(test_code.encode("utf-8"))
    return h.hexdigest()


def build_boundary(owner_id: str, bridge_id: str, shared: bool) -> str:
    """Whose build an APK is: its builder's owner, or the shared builder itself."""
    return f"shared:{bridge_id}" if shared else f"owner:{owner_id}"


@dataclass(frozen=True, slots=True)
class CompiledTest:
    """A compile (with its fix rounds) and what it produced."""

    ok: bool
    toolchain: str | None
    app_apk: Apk | None
    test_apk: Apk | None
    code: str  # the code that was compiled last (the one that built, when ok)
    compile_rounds: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""
    bridge: str | None = None  # the bridge that built it (its name)
    bridge_id: str | None = None
    shared: bool = False  # built on a bridge an admin marked shared
    stop_reason: str = ""
    duration_ms: int = 0

    @property
    def size(self) -> int:
        return sum(len(a.data) for a in (self.app_apk, self.test_apk) if a is not None)


class ApkCache:
    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CompiledTest] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[CompiledTest]] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CompiledTest | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: CompiledTest) -> None:
        if not entry.ok or entry.size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._entries[key] = entry
        self._bytes += entry.size
        while self._bytes > self.max_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    async def get_or_build(
        self, key: str, build: Callable[[], Awaitable[CompiledTest]]
    ) -> tuple[CompiledTest, bool]:
        """The cached build, or ``build()``'s (shared with concurrent callers); and whether it
        came from the cache."""
        hit = self.get(key)
        if hit is not None:
            self.hits += 1
            return hit, True
        pending = self._inflight.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending), True
        self.misses += 1
        future: asyncio.Future[CompiledTest] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            entry = await build()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        else:
            future.set_result(entry)
            self.put(key, entry)
            return entry, False
        finally:
            self._inflight.pop(key, None)
