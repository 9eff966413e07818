"""Unauthenticated operations endpoints: ``/healthz`` and ``/metrics`` (docs/design.md §6).

Neither reveals a secret or a serial to an unauthenticated caller; an authenticated scrape of
``/metrics`` adds the per-device health gauges of the caller's devices.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from controller.auth.http import current_principal, current_user
from controller.health import render_gauges
from controller.hub import list_devices
from controller.metrics import CONTENT_TYPE
from controller.services import services_of

__all__ = ["router"]

log = logging.getLogger("droidwire.controller.api")

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the controller can reach its database, else 503."""
    try:
        await services_of(request).store.ping()
    except Exception:  # any database failure means "not healthy"; the reason is in the log
        log.exception("health check: database unreachable")
        return JSONResponse({"status": "unavailable", "db": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Without credentials: aggregates only, no serials. With a Bearer token (a user's or an
    admin's): also the per-device health gauges of the devices that caller may see
    (controller.health); a bad token is 401."""
    body = request.app.state.metrics.render()
    if request.headers.get("authorization") is not None:
        principal = await current_user(await current_principal(request))
        services = services_of(request)
        readings = [
            reading
            for record in await list_devices(services.hub, principal)
            if (reading := services.health.latest(record.ref)) is not None
        ]
        body += render_gauges(readings)
    return Response(body, media_type=CONTENT_TYPE)
