"""``WebSocket /v1/devices/{device}/perf/stream``: performance samples of the app in front.

One JSON text message per sample (:mod:`controller.perf`): ``{"ts", "package", "activity",
"focus_changed", "battery", "cpu_pct", "memory_kb", "fps", "janky_pct"}``, every
``interval_s`` seconds (default 2, at least 1, at most 60), one sample at a time; a user holds
at most as many perf streams as logcat streams (``busy``, rule ``stream_quota``). Authenticated
by the handshake's ``Authorization`` header; every read is the caller's own device call
(authorized at that moment), so a loan that ends stops the stream with a last
``{"eof": true, "reason"}`` and close code 1008. The stream is audited once, when it opens
(``perf.stream``), and a refused read again; its periodic reads are not, or a stream left
running would grow the audit log without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket
from starlette.websockets import WebSocketDisconnect

from controller.auth import DeviceRef, Principal, UserPrincipal
from controller.hub import Hub, resolve_device
from controller.perf import DEFAULT_INTERVAL_S, MAX_INTERVAL_S, MIN_INTERVAL_S, PerfSampler
from controller.services import services_of
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Method

__all__ = ["router"]

router = APIRouter(tags=["agent"])


@router.websocket("/v1/devices/{device}/perf/stream")
async def perf_stream(
    websocket: WebSocket,
    device: str,
    principal: UserPrincipal,
    interval_s: Annotated[float, Query(ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)] = DEFAULT_INTERVAL_S,
) -> None:
    hub = services_of(websocket).hub
    record = await resolve_device(hub, principal, device)
    # Bounded per user like logcat streams (docs/security.md, "Bounds and secrets").
    state = websocket.app.state
    live: Counter[str | None] | None = getattr(state, "perf_streams", None)
    if live is None:
        live = state.perf_streams = Counter()
    limit = hub.streams_per_user
    if live[principal.user_id] >= limit:
        raise RpcError(ErrorCode.BUSY, f"at most {limit} live perf streams per user",
                       {"rule": "stream_quota", "limit": limit})
    live[principal.user_id] += 1
    try:
        await _serve(websocket, hub, principal, record.ref, interval_s)
    finally:
        live[principal.user_id] -= 1


async def _serve(
    websocket: WebSocket, hub: Hub, principal: Principal, ref: DeviceRef, interval_s: float
) -> None:
    async def call(method: Method[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
        result = await hub.device_call(principal, ref, method, params,
                                       action=f"perf.{method.name}", audited=False)
        out: dict[str, Any] = result.model_dump(exclude_unset=True)
        return out

    sampler = PerfSampler(call)
    await websocket.accept()
    await hub.audit_device(principal, "perf.stream", ref, None)
    closed = asyncio.create_task(_until_closed(websocket))
    try:
        while not closed.done():
            try:
                sample = await sampler.sample()
            except RpcError as exc:
                if exc.code in (ErrorCode.FORBIDDEN, ErrorCode.NOT_FOUND):
                    reason = f"{exc.code.value}: {exc.message}"
                    await websocket.send_text(json.dumps({"eof": True, "reason": reason}))
                    await websocket.close(1008, reason[:120])
                    return
                sample = {"error": {"code": exc.code.value, "message": exc.message}}
            await websocket.send_text(json.dumps(sample))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(closed), interval_s)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the client went away mid-send
    finally:
        closed.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await closed


async def _until_closed(websocket: WebSocket) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
