"""Placement: which of the devices a request may use its runs go to (docs/sandbox.md,
"Placement").

A request that does not name its device (no selector, ``any``, a count ``N``, ``pool=NAME``)
gets the least-loaded ready device that matches, across every replica:

1. **queue depth**: the runs queued or running on the device, counted in the store, so every
   replica's runs count (the store is shared in cluster mode);
2. then the **expected time** until a new run there would be done: ``(depth + 1) ×`` the
   device's mean instrumentation time over its last finished runs (a slow phone loses a tie
   to a fast one; a device with no history counts as the mean of those that have one);
3. then **fairness by user**: fewer of the caller's own runs on the device first, so one
   user's burst spreads over the devices instead of filling one queue;
4. then the order devices are listed in (bridge name, serial): deterministic.

Choosing and creating the run happen in one transaction, under one lock: an ``asyncio.Lock``
within a replica and, on PostgreSQL, a transaction-scoped advisory lock across replicas. Two
requests arriving together therefore never both see the same device idle and both take it.

Quotas: an admin may limit a user's runs started at once (``max_running``: more wait, status
``queued``, until one of theirs ends) and waiting to start (``max_queued``: more are refused,
``busy``, HTTP 429, naming the limit). Both are counted from the store, cluster-wide, under
the same lock.

Labels and pools: a device's ``labels`` (a set of names) and ``pool`` (one name, or none) come
from its bridge's config (the bridge owner, reported in its inventory) and from an admin
through the API (``PUT /v1/devices/{device}/labels``, kept in the store). An admin's labels are
added to the owner's; an admin's pool replaces the owner's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from controller.executor.gateway import DeviceView
from controller.hub.devices import merge_labels
from controller.store import Device, Run, RunStatus, Store, User, utcnow
from protocol.envelope import LABEL_PATTERN, MAX_LABELS
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "LABEL_RE",
    "MAX_LABELS",
    "Load",
    "Placement",
    "Quota",
    "order_by_load",
    "store_labels",
    "with_store_labels",
]

#: A label or pool name: what a selector can spell and a Prometheus label can carry.
LABEL_RE = re.compile(LABEL_PATTERN)
_ADVISORY_KEY = 0x6477_706C  # "dwpl": the placement lock across replicas (PostgreSQL)
_HISTORY_RUNS = 20  # finished runs per device its expected time is averaged over
_HISTORY_DAYS = 7
_ACTIVE = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


@dataclass(frozen=True, slots=True)
class Load:
    """A device's load as placement compares it."""

    depth: int = 0  # runs queued or running on it, cluster-wide
    mean_ms: float | None = None  # its mean instrumentation time, None: no history
    mine: int = 0  # of ``depth``, the caller's


def order_by_load(devices: Sequence[DeviceView], loads: Mapping[str, Load]) -> list[DeviceView]:
    """``devices`` least-loaded first (module docstring); stable for equal loads."""
    known = [x.mean_ms for x in loads.values() if x.mean_ms is not None]
    default_ms = sum(known) / len(known) if known else 0.0

    def key(item: tuple[int, DeviceView]) -> tuple[int, float, int, int]:
        index, device = item
        load = loads.get(device.id, Load())
        mean = load.mean_ms if load.mean_ms is not None else default_ms
        return (load.depth, (load.depth + 1) * mean, load.mine, index)

    return [d for _, d in sorted(enumerate(devices), key=key)]


@dataclass(frozen=True, slots=True)
class Quota:
    """A user's limits (an admin sets them; None: no limit), and what the user has now."""

    max_running: int | None = None  # runs started (compiling, waiting for or using a device)
    max_queued: int | None = None  # runs accepted but not started yet
    running: int = 0
    queued: int = 0

    def refusal(self, new_runs: int) -> RpcError | None:
        """``busy`` (HTTP 429) naming the limit, when ``new_runs`` more may not be accepted:
        more than ``max_running`` at once can never start, and they may not push the runs
        waiting to start past ``max_queued``."""
        if self.max_running is not None and new_runs > self.max_running:
            return RpcError(
                ErrorCode.BUSY,
                f"this request needs {new_runs} runs at once; your limit is "
                f"{self.max_running} running runs",
                {"rule": "quota", "quota": "max_running", "limit": self.max_running,
                 "current": self.running},
            )
        if self.max_queued is not None and self.queued + new_runs > self.max_queued:
            return RpcError(
                ErrorCode.BUSY,
                f"you have {self.queued} runs waiting to start; your limit is "
                f"{self.max_queued} queued runs",
                {"rule": "quota", "quota": "max_queued", "limit": self.max_queued,
                 "current": self.queued},
            )
        return None

    def may_start(self, new_runs: int) -> bool:
        return self.max_running is None or self.running + new_runs <= self.max_running


class Placement:
    """The placement lock, and the loads read under it."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession | None]:
        """A transaction holding the placement lock (None without a store): read the loads,
        choose, and create the runs in it."""
        async with self._lock:
            if self.store is None:
                yield None
                return
            async with self.store.session() as session, session.begin():
                if self.store.dialect == "postgresql":
                    await session.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_KEY}
                    )
                yield session

    async def quota(self, session: AsyncSession | None, user: str | None) -> Quota:
        """``user``'s limits and their runs queued and running now, cluster-wide."""
        if session is None or user is None:
            return Quota()
        limits = (await session.execute(
            select(User.max_running, User.max_queued).where(User.id == user)
        )).one_or_none()
        if limits is None or (limits[0] is None and limits[1] is None):
            return Quota()
        counts = dict((await session.execute(
            select(Run.status, func.count())
            .where(Run.user_id == user, Run.status.in_(_ACTIVE))
            .group_by(Run.status)
        )).all())
        return Quota(limits[0], limits[1], int(counts.get(RunStatus.RUNNING.value, 0)),
                     int(counts.get(RunStatus.QUEUED.value, 0)))

    async def loads(
        self, session: AsyncSession | None, device_ids: Iterable[str], user: str | None
    ) -> dict[str, Load]:
        """Each device's :class:`Load` (devices without runs are left out)."""
        ids = sorted(set(device_ids))
        if session is None or not ids:
            return {}
        device = Run.request["device_id"].as_string()
        depth: dict[str, int] = defaultdict(int)
        mine: dict[str, int] = defaultdict(int)
        rows = await session.execute(
            select(device, Run.user_id, func.count())
            .where(Run.status.in_(_ACTIVE), device.in_(ids))
            .group_by(device, Run.user_id)
        )
        for device_id, run_user, count in rows.all():
            depth[str(device_id)] += int(count)
            if user is not None and run_user == user:
                mine[str(device_id)] += int(count)
        run_ms = Run.result[("timings", "run_ms")].as_float()
        history = await session.execute(
            select(device, run_ms)
            .where(
                Run.status == RunStatus.FINISHED.value,
                Run.created_at > utcnow() - timedelta(days=_HISTORY_DAYS),
                device.in_(ids),
                run_ms.is_not(None),
            )
            .order_by(Run.created_at.desc())
            .limit(_HISTORY_RUNS * len(ids))
        )
        samples: dict[str, list[float]] = defaultdict(list)
        for device_id, ms in history.all():
            if len(samples[str(device_id)]) < _HISTORY_RUNS:
                samples[str(device_id)].append(float(ms))
        return {
            i: Load(depth[i], sum(samples[i]) / len(samples[i]) if samples.get(i) else None,
                    mine[i])
            for i in ids
            if i in depth or i in samples
        }


async def store_labels(store: Store | None) -> dict[tuple[str, str], tuple[list[str], str | None]]:
    """(bridge id, serial) → the labels and pool an admin set, for devices that have any."""
    if store is None:
        return {}
    async with store.session() as session:
        rows = await session.execute(
            select(Device.bridge_id, Device.serial, Device.labels, Device.pool).where(
                (Device.labels.is_not(None)) | (Device.pool.is_not(None))
            )
        )
        return {
            (str(b), str(s)): ([str(x) for x in labels or []], pool)
            for b, s, labels, pool in rows.all()
        }


async def with_store_labels(store: Store | None, devices: Sequence[DeviceView]) -> list[DeviceView]:
    """``devices`` with their admin-set labels merged in (:func:`merge_labels`)."""
    admin = await store_labels(store)
    return [replace(d, info=merge_labels(d.info, admin.get((d.bridge_id, d.serial))))
            for d in devices]

