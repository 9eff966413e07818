"""Reading runs: what ``GET /v1/runs`` and ``GET /v1/runs/{id}`` (:mod:`controller.api.sandbox`)
and the MCP run tools and ``run://`` resources (:mod:`controller.mcp.tools`) both call, with the
caller's principal and the app's state — no HTTP request in between.

Visibility is the same for both: one's own runs, an admin everyone's; someone else's run is
``not_found``, as absent as one that never existed. Agent traces are runs too (``kind``).
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import or_, select

from controller.auth import Principal
from controller.services.container import services_of
from controller.store import Run, RunStatus, RunStep
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_RUNS",
    "RunKind",
    "get_run",
    "kind_of",
    "list_runs",
    "summary",
    "visible_run",
]

MAX_RUNS = 200
DEFAULT_LIMIT = 50
RunKind = Literal["sandbox", "agent"]


def kind_of(run: Run) -> RunKind:
    return "agent" if (run.request or {}).get("kind") == "agent" else "sandbox"


def summary(run: Run) -> dict[str, Any]:
    """A run as the listing shows it."""
    result = run.result or {}
    return {
        "id": run.id,
        "status": run.status,
        "verdict": run.verdict,
        "kind": kind_of(run),
        "device": (run.request or {}).get("device_id"),
        "summary": result.get("summary"),
        "reason_code": result.get("reason_code"),
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


async def list_runs(
    state: Any,
    principal: Principal,
    limit: int = DEFAULT_LIMIT,
    status: RunStatus | None = None,
    kind: RunKind | None = None,
) -> dict[str, Any]:
    """``{"runs": [summary, …]}``: the caller's newest runs (an admin: everyone's)."""
    query = select(Run).order_by(Run.created_at.desc()).limit(limit)
    if not principal.is_admin:
        query = query.where(Run.user_id == principal.user_id)
    if status is not None:
        query = query.where(Run.status == status.value)
    if kind is not None:
        # Agent traces are runs whose request says ``"kind": "agent"``; every other is a
        # sandbox run (their requests carry no kind).
        request_kind = Run.request["kind"].as_string()
        if kind == "agent":
            query = query.where(request_kind == "agent")
        else:
            query = query.where(or_(request_kind.is_(None), request_kind != "agent"))
    async with services_of(state).store.session() as session:
        runs = (await session.execute(query)).scalars().all()
    return {"runs": [summary(r) for r in runs]}


async def visible_run(state: Any, principal: Principal, run_id: str) -> Run:
    """The run ``run_id`` if the caller may see it, else ``not_found``."""
    if not run_id.isalnum() or len(run_id) > 64:
        raise RpcError(ErrorCode.NOT_FOUND, "no such run")
    async with services_of(state).store.session() as session:
        run: Run | None = (
            await session.execute(select(Run).where(Run.id == run_id))
        ).scalar_one_or_none()
    if run is None or not (principal.is_admin or run.user_id == principal.user_id):
        raise RpcError(ErrorCode.NOT_FOUND, "no such run")  # others' runs are not disclosed
    return run


async def get_run(state: Any, principal: Principal, run_id: str) -> dict[str, Any]:
    """One run: its summary, request, result and step log."""
    run = await visible_run(state, principal, run_id)
    async with services_of(state).store.session() as session:
        steps = (
            await session.execute(
                select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq)
            )
        ).scalars().all()
    out = summary(run)
    # The submitting token's id stays in the store (a replica continuing the run acts as it).
    out["request"] = {k: v for k, v in (run.request or {}).items() if k != "token_id"}
    out["result"] = run.result
    out["steps"] = [
        {
            "seq": s.seq,
            "kind": s.kind,
            "status": s.status,
            "detail": s.detail,
            "at": s.created_at.isoformat(),
            "finished_at": s.finished_at.isoformat() if s.finished_at else None,
        }
        for s in steps
    ]
    return out
