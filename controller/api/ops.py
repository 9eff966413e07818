"""Unauthenticated operations endpoints: ``/healthz`` and ``/metrics`` (docs/design.md §6).

Neither reveals a secret or a serial.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from controller.metrics import CONTENT_TYPE

__all__ = ["router"]

log = logging.getLogger("droidwire.controller.api")

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the controller can reach its database, else 503."""
    try:
        await request.app.state.store.ping()
    except Exception:  # any database failure means "not healthy"; the reason is in the log
        log.exception("health check: database unreachable")
        return JSONResponse({"status": "unavailable", "db": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
