"""The sandbox executor's REST surface (docs/design.md §9): execute, runs, tools.

* ``POST /v1/sandbox/execute`` — body :class:`~controller.executor.ExecuteRequest`. Waits for
  the verdict and answers with the result (the base fields plus droidwire's, docs/sandbox.md#output); when the selector
  picks several devices, ``{"results": [result, …]}``, one per device. ``?wait=false``
  answers at once, 202 ``{"run_id", "run_ids", "status": "queued"}``: follow the runs with
  ``GET /v1/runs/{id}``.
* ``GET /v1/runs`` — the caller's runs, newest first (an admin sees everyone's);
  ``?limit=N`` (≤ 200), ``?status=queued|running|finished|cancelled``, ``?kind=sandbox|agent``
  (sandbox runs, or the agent toolkit's traces; each run says its ``kind``).
* ``GET /v1/runs/{id}`` — one run: status, verdict, request, result, and its step log.
  Both read runs through :mod:`controller.services.runs`, as the MCP run tools do.
* ``POST /v1/runs/{id}/cancel`` — cancel a queued or running run (its owner or an admin):
  202 ``{"id", "status": "cancelling"}``; the run ends ``cancelled`` once its device is
  cleaned up. 409 for a run already over (or one another replica runs).

Scopes: execute and cancel need ``runs:write``, reading runs ``runs:read``
(:data:`controller.auth.RunWriter` / :data:`~controller.auth.RunReader`); the devices a run
may use are still decided per device by :func:`controller.auth.authorize`.

At start-up (this router's lifespan, inside the app's: the store is open), runs left
``queued``/``running`` by a controller process that is gone are ended PENDING
``controller_restarted`` (:mod:`controller.executor.recovery`); what they installed is
uninstalled in the background once their devices' bridges are back.
* ``GET /v1/tools`` — the tools an agent can call, in OpenAI function format: the
  ``sandbox_executor``.

The executor is built once, in the app's lifespan, from its hub and store (the LLM client from
the environment: ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``), and is one of the app's services
(:class:`controller.services.Services`); a test may replace ``services.executor``. Finished runs are counted in ``droidwire_sandbox_runs_total``
(by verdict and reason code) and timed in ``droidwire_sandbox_run_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter, Histogram

from controller.auth.http import RunReader, RunWriter, UserPrincipal
from controller.executor import ExecuteRequest, RunResult, SandboxExecutor, tool_schema
from controller.executor.recovery import Recovered, clean_up, recover_runs
from controller.services import runs, services_of
from controller.services.runs import MAX_RUNS
from controller.store import RunStatus, Store, new_id
from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from controller.access import AccessWatch
    from controller.cluster import Cluster
    from controller.hub import Hub

__all__ = ["close_executor", "executor_of", "instance_of", "recover", "router"]

log = logging.getLogger("droidwire.controller.api.sandbox")

CLEANUP_WAIT_S = 120.0  # at least: devices of a recovered run get this long to come back
_FINAL = (RunStatus.FINISHED.value, RunStatus.CANCELLED.value)


def instance_of(app: Any, cluster: Cluster | None) -> str:
    """This controller process's name in run records: its cluster replica id, else an id
    drawn once per app."""
    if cluster is not None and cluster.replica_id:
        return cluster.replica_id
    state = app.state
    instance: str | None = getattr(state, "run_instance", None)
    if instance is None:
        instance = state.run_instance = new_id()
    return instance


async def recover(app: Any, store: Store | None = None, hub: Hub | None = None) -> list[Recovered]:
    """End the runs a dead controller process left unfinished (see the module docstring).

    ``store`` and ``hub``: those the lifespan has, for a replica lost while it still builds
    the services (or already took them down); by default, the app's services'."""
    if store is None:
        try:
            services = services_of(app)
        except RpcError:  # not running: nothing to recover with
            return []
        store, hub = services.store, services.hub
    cluster = getattr(hub, "cluster", None) if hub is not None else None
    alive = None
    if cluster is not None:

        async def alive(replica: str) -> bool:
            try:
                return bool(await cluster.replica_alive(replica))
            except Exception:  # Redis away: assume alive rather than end a live run
                log.warning("cannot tell whether replica %s is alive", replica)
                return True

    resume = restart = None
    if hub is not None:
        try:  # a run whose bridge holds its instrumentation result is resumed, not ended
            executor = services_of(app).executor
            resume = executor.resume
            if cluster is not None:
                # A dead replica's run that never reached its tests starts over here, on its
                # device (docs/cluster.md, "When a replica dies").
                restart = executor.continue_run
        except Exception:
            log.exception("cannot resume runs: no executor")
    try:
        return await recover_runs(store, instance=instance_of(app, cluster), alive=alive, resume=resume,
                                  restart=restart)
    except Exception:  # recovery must not keep the controller from starting
        log.exception("run recovery failed")
        return []


async def take_over(app: Any, tasks: set[asyncio.Future[Any]], store: Store | None = None,
                    hub: Hub | None = None) -> None:
    """Cluster mode: replicas died. Their unfinished runs are ended — or resumed here, when
    their bridge may hold their instrumentation result — and their cleanup done, in the
    background: in ``tasks`` (the services' ``recovery_tasks``, cancelled at shutdown with
    the executor). ``store``, ``hub``: as for :func:`recover`."""
    recovered = await recover(app, store, hub)
    owed = [r for r in recovered if r.packages]
    loop = asyncio.get_running_loop()
    started = [loop.create_task(_clean_up(app, owed))] if owed else []
    started += [asyncio.ensure_future(r.resumed) for r in recovered if r.resumed is not None]
    for task in started:
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def _clean_up(app: Any, owed: list[Recovered]) -> None:
    try:
        services = services_of(app)
        executor = services.executor
        wait_s = max(services.config.settings.grace_period_s, CLEANUP_WAIT_S)
        await clean_up(executor.gateway, services.store, owed, wait_s=wait_s,
                       turn=lambda device, run: executor.scheduler.turn(device, "", run))
    except RpcError as exc:  # no hub: nothing to clean through
        log.warning("cleanup after restart skipped: %s", exc)
    except Exception:
        log.exception("cleanup after restart failed")


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    recovered = await recover(app)
    owed = [r for r in recovered if r.packages]
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_clean_up(app, owed))] if owed else []
    # Resumed runs finish in the background: start-up does not wait for their bridges.
    tasks += [asyncio.ensure_future(r.resumed) for r in recovered if r.resumed is not None]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


router = APIRouter(prefix="/v1", tags=["sandbox"], lifespan=_lifespan)


def executor_of(request: Request) -> SandboxExecutor:
    """The app's executor (:class:`controller.services.Services`)."""
    return services_of(request).executor


def build_executor(
    app: Any, store: Store, hub: Hub, access: AccessWatch | None, cluster: Cluster | None
) -> SandboxExecutor:
    """The app's one executor over its hub, built in the lifespan (:mod:`controller.app`)."""
    from controller.executor.hub_gateway import HubGateway
    from fixer import LlmClient

    return SandboxExecutor(
        HubGateway(hub), store, llm=LlmClient.from_env(), observer=_observer(app.state),
        instance=instance_of(app, cluster),
        # Cluster mode: a device serves one run at a time across every replica.
        shared_turn=cluster.device_turn if cluster is not None else None,
        # A run ends when its caller's token or loan does (controller.access).
        access=access,
    )


def _observer(state: Any) -> Callable[[RunResult], None] | None:
    """Counts finished runs by verdict and reason, and their duration, in the app's registry."""
    metrics = getattr(state, "metrics", None)
    if metrics is None:
        return None
    runs = Counter(
        "droidwire_sandbox_runs",
        "Sandbox runs finished, by verdict and reason code",
        ["verdict", "reason_code"],
        registry=metrics.registry,
    )
    seconds = Histogram(
        "droidwire_sandbox_run_seconds",
        "Wall time of a sandbox run (compile, install, run, logcat, cleanup)",
        buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
        registry=metrics.registry,
    )

    def observe(result: RunResult) -> None:
        runs.labels(result.verification_status, result.reason_code).inc()
        total_ms = result.timings.get("total_ms")
        if total_ms is not None:
            seconds.observe(total_ms / 1000)
        metrics.run_finished(result)  # droidwire_device_runs_total

    return observe


async def close_executor(app: Any) -> None:
    """Cancel the executor's background runs (app shutdown, before the hub closes)."""
    services = services_of(app)
    tasks = list(services.recovery_tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    with contextlib.suppress(RpcError):  # never started
        await services.executor.aclose()


async def _audit(app: Any, principal: Any, results: list[RunResult]) -> None:
    audit = services_of(app).audit
    for result in results:
        try:
            await audit.record(
                principal,
                "sandbox.execute",
                device=result.device_id,
                outcome=result.verification_status.lower() or "ok",
                detail={"run_id": result.run_id, "reason_code": result.reason_code},
            )
        except Exception:  # the audit write never hides the verdict
            log.exception("audit write failed for run %s", result.run_id)


@router.post(
    "/sandbox/execute",
    responses={202: {"description": "wait=false: {run_id, run_ids, status: queued} at once"}},
)
async def execute(
    body: ExecuteRequest,
    request: Request,
    principal: RunWriter,
    wait: Annotated[bool, Query(description="Wait for the verdict (false: run ids at once).")] = True,
) -> Any:
    executor = executor_of(request)
    plan = await executor.plan(body, principal)
    if not wait:

        async def audit(results: list[RunResult]) -> None:
            await _audit(request.app, principal, results)

        executor.submit(plan, then=audit)
        if plan.lead_id is not None:  # sharded: follow the run that carries the merge
            return JSONResponse(
                {"run_id": plan.lead_id, "run_ids": [plan.lead_id],
                 "shard_run_ids": plan.run_ids, "status": RunStatus.QUEUED.value},
                status_code=202,
            )
        return JSONResponse(
            {"run_id": plan.run_ids[0], "run_ids": plan.run_ids, "status": RunStatus.QUEUED.value},
            status_code=202,
        )
    results = await executor.run(plan)
    await _audit(request.app, principal, results)
    if len(results) == 1:
        return results[0].to_json()
    return {"results": [r.to_json() for r in results]}


@router.get("/runs")
async def list_runs(
    request: Request,
    principal: RunReader,
    limit: Annotated[int, Query(ge=1, le=MAX_RUNS)] = runs.DEFAULT_LIMIT,
    status: Annotated[RunStatus | None, Query()] = None,
    kind: Annotated[runs.RunKind | None, Query()] = None,
) -> dict[str, Any]:
    return await runs.list_runs(request.app.state, principal, limit, status, kind)


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    responses={409: {"description": "the run is over, or runs on another replica"}},
)
async def cancel_run(run_id: str, request: Request, principal: RunWriter) -> dict[str, Any]:
    run = await runs.visible_run(request.app.state, principal, run_id)
    if run.status in _FINAL:
        raise RpcError(ErrorCode.CONFLICT, f"run {run_id} is already {run.status}",
                       {"status": run.status})
    if not executor_of(request).cancel(run_id, by=principal.user_name):
        raise RpcError(ErrorCode.CONFLICT, f"run {run_id} is not running on this controller",
                       {"status": run.status})
    try:
        await services_of(request).audit.record(
            principal, "run.cancel", device=(run.request or {}).get("device_id"), outcome="ok",
            detail={"run_id": run_id})
    except Exception:
        log.exception("audit write failed for cancel of run %s", run_id)
    return {"id": run_id, "status": "cancelling"}


@router.get("/runs/{run_id}")
async def get_run(run_id: str, request: Request, principal: RunReader) -> dict[str, Any]:
    return await runs.get_run(request.app.state, principal, run_id)


@router.get("/tools")
async def tools(principal: UserPrincipal) -> list[dict[str, Any]]:
    del principal  # authenticated like every /v1 call
    return [tool_schema()]
