"""A refused change is audited too: the shared wrapper of the credential and lending routes.

``grant.*`` and ``token.*`` changes are written to the audit log when they succeed (the route
records what changed) and when they are refused: then the entry's outcome is the refusal's
error code, and its detail what the caller asked for (docs/design.md §6).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from controller.audit import AuditLog
from controller.auth.authorization import Principal
from protocol.errors import RpcError

__all__ = ["audited_refusal"]


@asynccontextmanager
async def audited_refusal(
    audit: AuditLog,
    principal: Principal,
    action: str,
    *,
    device: str | None = None,
    **detail: Any,
) -> AsyncIterator[None]:
    """Record an :class:`RpcError` raised inside as ``action`` with its code, and re-raise it."""
    try:
        yield
    except RpcError as exc:
        await audit.record(principal, action, device=device, outcome=exc.code.value, detail=detail)
        raise
