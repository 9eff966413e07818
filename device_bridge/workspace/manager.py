"""Working copies of a project, started with the sandbox's 4-branch rule, snapshotted on stop.

Layout under the bridge's state directory::

    <state_dir>/<project>/snapshot.tar.gz     the persisted snapshot (build outputs excluded)
    <state_dir>/<project>/slot-<i>/ready.json the root-ready marker (+ the ephemeral entries)
    <state_dir>/<project>/slot-<i>/project/   the working copy Gradle builds in

The *entries* of a working copy are the project's files (persistent) and the test source
(ephemeral). Starting a slot for a build takes one of four branches:

1. root ready, project dir present  → apply only the ephemeral entries (the test file)
2. root ready, project dir missing  → restore from the snapshot, then the ephemeral entries
3. root not ready, usable snapshot  → hydrate from the snapshot, then all entries
4. root not ready, no snapshot      → fresh init: a copy of the project, then the test file

A snapshot that cannot be used (corrupt, truncated, unsafe member, another project's) falls
back to a fresh init, and the reason is logged and reported in the lease. When the project's
files changed since the working copy was made (a fingerprint of paths, sizes and mtimes),
the persistent entries are applied again, whatever the branch.

Isolation: each project has a small pool of slots (``slots_per_project``, default 2), each a
separate working copy used by one build at a time. Builds of one project run in parallel up
to the pool size and queue beyond it; each keeps Gradle's incremental state in its own slot
(a fresh copy per build would throw that away; one lock per project would serialise
everything). A slot is released only once the blocking work running for it has finished,
even if the build that held it was cancelled. Across processes (two bridges, or a bridge and
``droidwire demo``, sharing a state directory) each slot is also guarded by an advisory lock
file (``slot-<i>.lock``, ``flock``): a slot locked elsewhere is skipped.

One working copy — its markers, snapshot, lock file and the branch it takes — is a
:class:`~device_bridge.workspace.slot.Slot` (:mod:`device_bridge.workspace.slot`); this module
leases them to builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode, RpcError

from .fsutil import (
    os_error,
)
from .placement import TestPlacement, place_test, read_namespace
from .projects import Project, ProjectRegistry
from .slot import Slot, StartBranch, source_fingerprint

__all__ = [
    "DEFAULT_SLOTS_PER_PROJECT",
    "Lease",
    "StartBranch",
    "WorkspaceManager",
    "default_state_dir",
    "source_fingerprint",
]

log = logging.getLogger("droidwire.bridge.workspace")

DEFAULT_SLOTS_PER_PROJECT = 2
DEFAULT_STOP_TIMEOUT_S = 30.0
SNAPSHOT_NAME = "snapshot.tar.gz"


@dataclass(frozen=True)
class Lease:
    """A working copy held by one build, with its test file written."""

    project: Project
    slot: int
    project_dir: Path
    test_file: Path
    placement: TestPlacement
    branch: StartBranch
    synced: bool  # the project's files were (re)applied
    reason: str | None  # why a snapshot was not used, when it was not
    _holds: list[asyncio.Future[Any]] = field(default_factory=list, repr=False, compare=False)

    @property
    def test_class(self) -> str:
        return self.placement.qualified_class

    def hold(self, work: asyncio.Future[Any]) -> None:
        """Keep the slot taken until ``work`` (e.g. a thread reading the working copy) ends,
        even if the build that holds the lease is cancelled or times out first."""
        self._holds.append(work)


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/droidwire/workspaces`` (``~/.local/state/…`` by default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "droidwire" / "workspaces"


class _ProjectPool:
    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots
        # LIFO: the slot released last is taken first, so sequential builds keep hitting the
        # same warm working copy (Gradle's incremental state) and extra slots stay cold.
        self.free: asyncio.LifoQueue[int] = asyncio.LifoQueue()
        for slot in reversed(slots):
            self.free.put_nowait(slot.index)


class WorkspaceManager:
    """Leases working copies of the configured projects to builds."""

    def __init__(
        self,
        projects: ProjectRegistry,
        *,
        state_dir: Path | None = None,
        slots_per_project: int = DEFAULT_SLOTS_PER_PROJECT,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        if slots_per_project < 1:
            raise ValueError("slots_per_project must be at least 1")
        self.projects = projects
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.slots_per_project = slots_per_project
        self.stop_timeout_s = stop_timeout_s
        self._pools: dict[str, _ProjectPool] = {}
        self._stopping = False

    def _pool(self, project: Project) -> _ProjectPool:
        pool = self._pools.get(project.name)
        if pool is None:
            base = self.state_dir / project.name
            snapshot = base / SNAPSHOT_NAME
            slots = [
                Slot(project, i, base / f"slot-{i}", snapshot)
                for i in range(self.slots_per_project)
            ]
            pool = self._pools[project.name] = _ProjectPool(slots)
        return pool

    @contextlib.asynccontextmanager
    async def lease(
        self,
        project: str | None,
        test_code: str,
        *,
        acquire_timeout_s: float | None = None,
    ) -> AsyncIterator[Lease]:
        """Hold a working copy of ``project`` with ``test_code`` written as its test file.

        Raises ``RpcError``: ``not_found``/``forbidden`` (project), ``bad_request``/
        ``forbidden``/``conflict`` (the test's placement), ``busy`` (no slot within
        ``acquire_timeout_s``, or every slot locked by another process), ``unavailable``
        (disk errors, shutting down).
        """
        if self._stopping:
            raise RpcError(
                ErrorCode.UNAVAILABLE, "the bridge is shutting down", {"reason": "stopping"}
            )
        proj = self.projects.get(project)
        placement = await asyncio.to_thread(_plan, proj, test_code)
        pool = self._pool(proj)
        index, lease = await self._start(pool, placement, test_code, acquire_timeout_s)
        try:
            yield lease
        finally:
            self._free_when_done(pool, index, lease._holds)

    async def _start(
        self,
        pool: _ProjectPool,
        placement: TestPlacement,
        test_code: str,
        acquire_timeout_s: float | None,
    ) -> tuple[int, Lease]:
        """Take a free slot this process can lock, and prepare it in a thread."""
        name = pool.slots[0].project.name
        locked_elsewhere: list[int] = []
        try:
            while True:
                try:
                    async with asyncio.timeout(acquire_timeout_s):
                        index = await pool.free.get()
                except TimeoutError:
                    raise RpcError(
                        ErrorCode.BUSY,
                        f"all {len(pool.slots)} workspaces of project {name} are busy",
                        {"project": name},
                    ) from None
                slot = pool.slots[index]
                work = asyncio.ensure_future(
                    asyncio.to_thread(_prepare, slot, placement, test_code)
                )
                try:
                    lease = await asyncio.shield(work)
                except _SlotLocked:
                    locked_elsewhere.append(index)
                    if len(locked_elsewhere) == len(pool.slots):
                        raise RpcError(
                            ErrorCode.BUSY,
                            f"every workspace of project {name} is locked by another"
                            f" droidwire process using {self.state_dir}",
                            {"project": name, "reason": "locked"},
                        ) from None
                    continue
                except BaseException:
                    self._free_when_done(pool, index, [work])
                    raise
                lease._holds.append(work)
                return index, lease
        finally:
            for index in locked_elsewhere:
                pool.free.put_nowait(index)

    def _free_when_done(
        self, pool: _ProjectPool, index: int, holds: list[asyncio.Future[Any]]
    ) -> None:
        """Unlock and free slot ``index`` — once no thread or process works in it any more."""

        def free(_: object = None) -> None:
            pool.slots[index].unlock()
            pool.free.put_nowait(index)

        pending = [f for f in holds if not f.done()]
        if pending:
            # Cancelled while a thread still works in the slot: free it only afterwards.
            asyncio.gather(*pending, return_exceptions=True).add_done_callback(free)
        else:
            free()

    async def snapshot(self, project: str | None) -> bool:
        """Persist ``project``'s snapshot now from a free, ready slot; False if none is ready."""
        proj = self.projects.get(project)
        pool = self._pool(proj)
        taken: list[int] = []
        try:
            async with asyncio.timeout(self.stop_timeout_s):
                for _ in pool.slots:
                    index = await pool.free.get()
                    taken.append(index)
                    if await asyncio.to_thread(_snapshot, pool.slots[index]):
                        return True
        except TimeoutError:
            log.warning(
                "project %s: no free slot to snapshot within %.0fs", proj.name, self.stop_timeout_s
            )
        finally:
            for index in taken:
                pool.free.put_nowait(index)
        return False

    async def stop(self) -> None:
        """Refuse new leases, wait for running ones, and snapshot every project used."""
        self._stopping = True
        for name in list(self._pools):
            try:
                await self.snapshot(name)
            except RpcError as exc:
                log.warning("project %s: snapshot on stop failed: %s", name, exc)


class _SlotLocked(Exception):
    """Another process holds this slot's lock file."""


def _snapshot(slot: Slot) -> bool:
    if not slot.try_lock():
        return False
    try:
        return slot.write_snapshot()
    finally:
        slot.unlock()


def _plan(project: Project, test_code: str) -> TestPlacement:
    namespace = read_namespace(project.path / project.module)
    if namespace is None:
        raise RpcError(
            ErrorCode.UNAVAILABLE,
            f"project {project.name}: no namespace in {project.module}/build.gradle(.kts)"
            " nor a package in its AndroidManifest.xml",
            {"reason": "no_namespace"},
        )
    return place_test(test_code, namespace)


def _prepare(slot: Slot, placement: TestPlacement, test_code: str) -> Lease:
    if not slot.try_lock():
        raise _SlotLocked(slot.index)
    try:
        branch, synced, reason = slot.start()
        test_file = slot.write_test(placement, test_code)
    except OSError as exc:
        raise os_error(f"prepare the workspace of {slot.project.name}", exc) from exc
    return Lease(
        project=slot.project,
        slot=slot.index,
        project_dir=slot.project_dir,
        test_file=test_file,
        placement=placement,
        branch=branch,
        synced=synced,
        reason=reason,
    )
