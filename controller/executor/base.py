"""The sandbox executor's shared ground: its settings, the :class:`Abort` that turns a failure
into a PENDING reason code, a :class:`Plan`, and :class:`ExecutorBase` — the executor's state,
the caller's rights, and the store writes every part of a run ends with (docs/design.md §5)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import update

from controller.access import ACCESS_REVOKED, AccessWatch, check_access
from controller.analysis import (
    Thresholds,
)
from controller.auth import DeviceRef, Principal
from controller.executor.cache import ApkCache, CompiledTest
from controller.executor.gateway import (
    DeviceView,
    Gateway,
    Target,
)
from controller.executor.placement import Placement
from controller.executor.queue import Scheduler, SharedTurn
from controller.executor.recording import Reauth
from controller.executor.request import DEFAULT_TIMEOUT_S, ExecuteRequest
from controller.executor.results import RunResult, pending_result
from controller.executor.sharding import (
    Units,
)
from controller.executor.steps import ProgressListener, StepLog
from controller.store import (
    Run,
    RunStatus,
    Store,
    TestResult,
    new_id,
    utcnow,
)
from fixer import ChatCompleter
from fixer.prompt import declared_names, package_of
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "DEFAULT_RUNNER",
    "QUOTA_POLL_S",
    "Abort",
    "ExecutorBase",
    "ExecutorSettings",
    "Plan",
    "builder_of",
    "built",
    "lent_to",
    "reason_for",
    "test_class_of",
]


log = logging.getLogger("droidwire.controller.executor")

DEFAULT_RUNNER = "androidx.test.runner.AndroidJUnitRunner"

QUOTA_POLL_S = 0.25  # a run waiting for its user's quota asks again this often


@dataclass(frozen=True, kw_only=True)
class ExecutorSettings:
    # Rounds
    max_fix_rounds: int = 3
    retries: int = 0  # failed tests run again this often, unless the request says otherwise
    # Timeouts
    default_timeout_s: float = DEFAULT_TIMEOUT_S
    compile_timeout_s: float = 900.0  # one compile, within the run's deadline
    step_timeout_s: float = 60.0  # logcat, install, uninstall: within the run's deadline
    cleanup_timeout_s: float = 30.0  # after the deadline too: a borrower leaves nothing behind
    continue_wait_s: float = 120.0  # a dead replica's run waits this long for its device
    # A request whose matching devices are all on bridges that are reconnecting (within their
    # grace period) waits at most this long for one to be back before it is planned.
    reconnect_wait_s: float = 30.0
    rpc_grace_s: float = 5.0  # the RPC's own deadline over the bridge-side one
    # Verdict
    thresholds: Thresholds = field(default_factory=Thresholds)
    runner: str = DEFAULT_RUNNER


def reason_for(exc: RpcError, stage: str) -> str:
    """The PENDING ``reason_code`` of an RPC error at ``stage`` (``build`` or ``device``)."""
    code = exc.code
    if code is ErrorCode.TIMEOUT:
        return "timeout"
    data = exc.data or {}
    if code is ErrorCode.FORBIDDEN and data.get("rule") == ACCESS_REVOKED:
        return "access_revoked"  # the caller's right lapsed: refused before the step ran
    reason = str(data.get("reason", ""))
    if data.get("rule") == "paused":
        return "device_paused"  # the owner paused sharing while the run went on
    if stage == "build":
        if code is ErrorCode.FORBIDDEN or code is ErrorCode.BAD_REQUEST:
            return "compile_failed"  # the test itself was refused (package, path)
        return "bridge_unavailable"
    if "bridge" in reason or (code is ErrorCode.UNAVAILABLE and "bridge" in exc.message.lower()):
        return "bridge_unavailable"
    if code is ErrorCode.NOT_FOUND:
        # Hidden by the owner's config: not there for us. Otherwise adb lost it.
        return "no_device" if data.get("rule") == "not_exposed" else "adb_unavailable"
    if code in (ErrorCode.CANCELLED, ErrorCode.BUSY):
        return "bridge_unavailable"
    return "adb_unavailable"  # device_offline, unavailable adb, refused or failed installs


class Abort(Exception):
    """Ends a run early with a PENDING verdict (internal to this module)."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


@dataclass(slots=True)
class Plan:
    """A request with its devices chosen and its runs created."""

    request: ExecuteRequest
    principal: Principal | None
    run_ids: list[str]
    devices: list[DeviceView | None]  # None: the run has no device (skipped, no_device)
    abort: Abort | None = None  # decided before anything ran
    refusals: list[dict[str, Any]] = field(default_factory=list)
    max_running: int | None = None  # the user's quota: its runs wait for a slot under it
    # Sharded (controller.executor.sharding): each run's units (-e class …), the run that
    # carries the merged result, the file's test units, and the retries on other devices.
    shards: list[list[str]] | None = None
    lead_id: str | None = None
    units: Units | None = None
    retried: list[RunResult] = field(default_factory=list)
    start_seq: int = 0  # a run continued after its controller died: its next step number


def builder_of(compiled: CompiledTest) -> dict[str, Any] | None:
    """The result's ``builder``: the bridge whose APKs the run installed (None: prebuilt)."""
    if compiled.bridge_id is None:
        return None
    return {"id": compiled.bridge_id, "name": compiled.bridge, "shared": compiled.shared}


def built(build: CompiledTest | Abort | None) -> CompiledTest | None:
    """A build that produced APKs, else None (its runs ended before any device work)."""
    return build if isinstance(build, CompiledTest) and build.ok else None


def lent_to(principal: Principal | None) -> Callable[[DeviceView], bool] | None:
    """Which devices ``principal`` uses through a loan (none for an admin: every device is
    theirs to use); selectors reach those only when nothing of their own matches."""
    if principal is None or principal.is_admin:
        return None
    return lambda d: d.owner_id != principal.user_id


def test_class_of(code: str) -> str | None:
    """The fully-qualified name of the test's first top-level class."""
    names = declared_names(code, top_level_only=True)
    if not names:
        return None
    package = package_of(code)
    return f"{package}.{names[0]}" if package else names[0]


class ExecutorBase:
    """The executor's state and the steps every part of a run shares."""

    def __init__(
        self,
        gateway: Gateway,
        store: Store | None,
        *,
        settings: ExecutorSettings | None = None,
        llm: ChatCompleter | None = None,
        cache: ApkCache | None = None,
        observer: Callable[[RunResult], None] | None = None,
        instance: str | None = None,
        shared_turn: SharedTurn | None = None,
        access: AccessWatch | None = None,
    ) -> None:
        self.gateway = gateway
        # Ends a run whose caller's right lapses while it waits or runs (controller.access).
        self.access = access
        self._revoked: dict[str, str] = {}  # run id -> why its caller's right lapsed
        self.store = store
        self.settings = settings or ExecutorSettings()
        self.llm = llm
        self.cache = cache if cache is not None else ApkCache()
        self.observer = observer  # sees every finished result (metrics)
        # shared_turn: a device's turn across replicas (cluster mode), see Scheduler.
        self.scheduler = Scheduler(shared_turn)
        self.placement = Placement(store)  # which device a run goes to (least loaded)
        # Which controller process ran a run (kept in its request record): after a restart,
        # runs of a process that is gone are ended (controller.executor.recovery).
        self.instance = instance or new_id()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._plan_tasks: dict[str, asyncio.Task[Any]] = {}  # run id -> its plan's task
        self._plan_runs: dict[str, tuple[str, ...]] = {}  # run id -> its plan's run ids
        self._jobs: dict[str, asyncio.Task[Any]] = {}  # run id -> its device job
        self._cancelled: dict[str, str] = {}  # run id -> who cancelled it
        self._leads: dict[str, tuple[str, ...]] = {}  # a sharded run's lead id -> its shards

    async def _note_cancel(self, steps: StepLog, run_id: str) -> None:
        if run_id in self._cancelled:
            with contextlib.suppress(Exception):
                await asyncio.shield(steps.record("cancel", "ok", by=self._cancelled[run_id]))

    def _reauth(self, principal: Principal | None) -> Reauth | None:
        """Each device step re-checks the caller's token, loan and scope when it runs."""
        store = self.store
        if principal is None or store is None:
            return None

        async def reauth(target: Target) -> None:
            await check_access(
                store, principal, target if isinstance(target, DeviceRef) else None
            )

        return reauth

    def _cancelled_result(self, run_id: str, device: DeviceView | None) -> RunResult:
        if run_id in self._revoked:
            return pending_result(run_id, device, "access_revoked", self._revoked[run_id])
        by = self._cancelled.get(run_id, "shutdown")
        return pending_result(run_id, device, "cancelled", f"cancelled by {by}")

    # -- the store ---------------------------------------------------------------------------

    async def _mark(self, run_ids: Sequence[str], status: RunStatus) -> None:
        if self.store is None:
            return
        try:
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(Run).where(Run.id.in_(list(run_ids))).values(status=status.value)
                )
        except Exception:
            log.exception("could not mark runs %s %s", run_ids, status.value)

    async def _mark_cancelled(self, run_ids: Sequence[str]) -> None:
        if self.store is None:
            return
        with contextlib.suppress(Exception):
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(Run)
                    .where(Run.id.in_(list(run_ids)))
                    .values(status=RunStatus.CANCELLED.value, finished_at=utcnow())
                )

    async def _finish(self, run_ids: Sequence[str], results: Sequence[RunResult]) -> None:
        if self.store is None:
            return
        try:
            async with self.store.session() as session, session.begin():
                for run_id, result in zip(run_ids, results, strict=True):
                    cancelled = result.reason_code in ("cancelled", "access_revoked")
                    await session.execute(
                        update(Run)
                        .where(Run.id == run_id)
                        .values(
                            status=(RunStatus.CANCELLED if cancelled else RunStatus.FINISHED).value,
                            verdict=result.verification_status,
                            result=result.to_json(),
                            finished_at=utcnow(),
                        )
                    )
                    for test in result.tests:
                        session.add(
                            TestResult(
                                run_id=run_id,
                                class_name=str(test.get("class") or "")[:255],
                                name=str(test.get("name") or "")[:255],
                                status=str(test.get("status") or "")[:32],
                                stack=test.get("stack"),
                            )
                        )
        except Exception:
            log.exception("could not store the results of runs %s", run_ids)

    async def run(
        self, plan: Plan, *, listener: ProgressListener | None = None
    ) -> list[RunResult]:
        """Run a planned request: :meth:`controller.executor.executor.SandboxExecutor.run`."""
        raise NotImplementedError
