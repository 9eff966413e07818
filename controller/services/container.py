"""The app's services, built once in the lifespan (:mod:`controller.app`) and passed around as
one typed object: :class:`Services`, on ``app.state.services``.

A route reaches them with the :data:`AppServices` dependency
(``async def handler(services: AppServices, …)``), other code with :func:`services_of` (an app,
its ``state``, a request or a WebSocket). This is the one way to them: the lifespan sets no
other attribute for a service. Before the lifespan built them all (or after it ended) there are
none: ``unavailable``, never an ``AttributeError``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends
from fastapi.requests import HTTPConnection
from starlette.datastructures import State

from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from controller.access import AccessWatch
    from controller.audit import AuditLog
    from controller.cluster import Cluster
    from controller.config import ControllerConfig
    from controller.executor import SandboxExecutor
    from controller.health import HealthMonitor
    from controller.hub import Hub
    from controller.loans import Loans
    from controller.store import Store
    from controller.web import SessionStore

__all__ = ["AppServices", "Services", "current_services", "services_of"]


@dataclass(eq=False)
class Services:
    """What the lifespan started, in start order (it stops them in reverse)."""

    config: ControllerConfig
    store: Store
    audit: AuditLog
    web_sessions: SessionStore
    hub: Hub
    access: AccessWatch
    loans: Loans
    health: HealthMonitor
    executor: SandboxExecutor
    cluster: Cluster | None = None  # cluster mode (docs/cluster.md)
    # A lost replica's runs resumed or cleaned up here, in the background (cancelled at
    # shutdown, before the executor closes).
    recovery_tasks: set[asyncio.Future[Any]] = field(default_factory=set)


def services_of(owner: Any) -> Services:
    """The services of an app, of its ``state``, or of the app a request or WebSocket
    belongs to."""
    state = owner if isinstance(owner, State) else getattr(getattr(owner, "app", owner), "state",
                                                            None)
    services = getattr(state, "services", None)
    if not isinstance(services, Services):
        raise RpcError(ErrorCode.UNAVAILABLE, "the controller is not running",
                       {"reason": "not_started"})
    return services


async def current_services(connection: HTTPConnection) -> Services:
    """A FastAPI dependency: the services of the app serving ``connection``."""
    return services_of(connection.app)


AppServices = Annotated[Services, Depends(current_services)]
