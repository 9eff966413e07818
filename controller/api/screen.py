"""Live screen and remote control over one WebSocket (docs/screen.md).

``/v1/devices/{device}/screen/stream?codec=jpeg|png|h264`` (Bearer header) and the
dashboard's ``/devices/{device}/screen/stream`` (session cookie) are served by
:func:`serve_screen`. Viewing needs the right to *use* the device (a screenshot does);
controlling needs to hold it: its owner, or a borrower inside a live grant. An admin who is
neither watches read-only (their input is refused, and said so).

Server → client:

* text ``{"type": "hello", "codec", "source", "control": bool}`` first;
* binary frames: a 4-byte big-endian header length, the header as JSON
  (``{"n", "w", "h", "ts", "key", "codec"}``), then the picture or H.264 access unit;
* text ``{"type": "input", "id", "ok", "error"?}`` answering each input message;
* text ``{"type": "eof", "reason"}`` last, then the close (1008 when access ended).

Client → server: text ``{"id"?, "action": "tap"|"long_press"|"swipe"|"text"|"key", "x", "y",
"x2", "y2", "duration_ms", "text", "key"}`` — coordinates as fractions of the picture. Every
input is a ``device.input`` call through :meth:`controller.hub.Hub.device_call`: authorized
again, audited, and checked by the bridge's policy.

The view ends as the logcat stream does once the caller's right lapses — a token revoked
(owners and admins too), a loan revoked or expired (:func:`controller.access.until_lapsed`:
at once with the app's access watch, else re-checked every ``stream_reauth_s``): ``eof``
``forbidden: …`` and close code 1008.

Cluster mode: when another replica holds the device's bridge, the viewer runs there and its
frames are relayed (:mod:`controller.cluster.screens`); the handshake, the view's audit entry,
the watch on the caller's access and the inputs (forwarded calls) stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from controller.access import until_lapsed
from controller.auth.authorization import Action, DeviceRef, Principal, authorize, may
from controller.hub import Hub, resolve_device
from controller.hub.screen import ScreenView
from controller.services import services_of
from protocol.errors import ErrorCode, RpcError
from protocol.screen_methods import INPUT, InputParams, ScreenFrame

__all__ = ["MAX_INPUT_MESSAGE", "may_control", "serve_screen"]

log = logging.getLogger("droidwire.controller.api.screen")

MAX_INPUT_MESSAGE = 4096
MAX_INPUTS_WAITING = 16
CODECS = ("jpeg", "png", "h264")


async def may_control(hub: Hub, principal: Principal, device: DeviceRef) -> bool:
    """The owner, or a borrower inside a live grant; an admin alone only watches."""
    if not await may(principal, device, Action.USE, store=hub.store):
        return False
    return principal.user_id == device.owner_id or not principal.is_admin


def frame_message(frame: ScreenFrame) -> bytes:
    header = json.dumps({"n": frame.n, "w": frame.w, "h": frame.h, "ts": frame.ts,
                         "key": frame.key, "codec": frame.codec}).encode()
    return len(header).to_bytes(4, "big") + header + frame.data


async def serve_screen(
    websocket: WebSocket, hub: Hub, principal: Principal, device: str, codec: str
) -> None:
    if codec not in CODECS:
        raise RpcError(ErrorCode.BAD_REQUEST, f"codec must be one of {', '.join(CODECS)}")
    record = await resolve_device(hub, principal, device)
    ref = record.ref
    action = "device.screen.view"
    try:
        await authorize(principal, ref, Action.USE, store=hub.store)
        viewer = await _view(hub, principal, ref, codec)
    except RpcError as exc:
        await hub.audit_device(principal, action, ref, exc)
        raise
    await hub.audit_device(principal, action, ref, None)
    control = await may_control(hub, principal, ref)
    inputs: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_INPUTS_WAITING)
    try:
        await websocket.accept()
        await websocket.send_text(json.dumps(
            {"type": "hello", "codec": viewer.codec, "source": viewer.source,
             "control": control}))
        tasks = [
            asyncio.create_task(_receive(websocket, inputs, control)),
            asyncio.create_task(until_lapsed(services_of(websocket).access, hub.store,
                                             hub.settings.stream_reauth_s, principal, ref)),
            asyncio.create_task(_inputs(websocket, hub, principal, ref, inputs)),
        ]
        closed, revoked, _ = tasks
        try:
            while True:
                getter = asyncio.ensure_future(viewer.get())
                done, _pending = await asyncio.wait(
                    {getter, closed, revoked}, return_when=asyncio.FIRST_COMPLETED)
                if closed in done:
                    getter.cancel()
                    return
                if revoked in done:
                    getter.cancel()
                    reason = str(revoked.result())
                    await websocket.send_text(json.dumps({"type": "eof", "reason": reason}))
                    await websocket.close(1008, reason[:120])
                    return
                frame = getter.result()
                if frame.eof:
                    reason = frame.reason or "eof"
                    await websocket.send_text(json.dumps({"type": "eof", "reason": reason}))
                    await websocket.close(1000, reason[:120])
                    return
                await websocket.send_bytes(frame_message(frame))
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass
    finally:
        await viewer.close()


async def _view(hub: Hub, principal: Principal, ref: DeviceRef, codec: str) -> ScreenView:
    """A viewer: here when this replica holds the device's bridge (or none does), else on the
    replica that holds it, its frames relayed (cluster mode, docs/screen.md)."""
    replica = await hub.held_elsewhere(ref.bridge_id)
    if replica is not None:
        return await hub.hooks.screen(replica, principal, ref, codec)
    return await hub.screens.watch(ref, codec)


async def _receive(websocket: WebSocket, inputs: asyncio.Queue[dict[str, Any]],
                   control: bool) -> None:
    """Read the client's messages until it goes; queue its inputs (bounded)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        reply: dict[str, Any] | None = None
        if not isinstance(text, str) or len(text) > MAX_INPUT_MESSAGE:
            reply = {"type": "input", "ok": False, "error": "bad_request: not an input message"}
        else:
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                reply = {"type": "input", "ok": False, "error": "bad_request: not a JSON object"}
            elif not control:
                reply = {"type": "input", "id": body.get("id"), "ok": False,
                         "error": "forbidden: read-only view (you do not hold this device)"}
            else:
                try:
                    inputs.put_nowait(body)
                except asyncio.QueueFull:
                    reply = {"type": "input", "id": body.get("id"), "ok": False,
                             "error": "busy: too many inputs waiting"}
        if reply is not None:
            await websocket.send_text(json.dumps(reply))


async def _inputs(websocket: WebSocket, hub: Hub, principal: Principal, ref: DeviceRef,
                  inputs: asyncio.Queue[dict[str, Any]]) -> None:
    """Send the inputs to the device one at a time, in order; answer each."""
    while True:
        body = await inputs.get()
        ident = body.pop("id", None)
        reply: dict[str, Any] = {"type": "input", "id": ident if isinstance(ident, int) else None}
        try:
            params = InputParams.model_validate({**body, "serial": ref.serial})
            result = await hub.device_call(principal, ref, INPUT, params)
            reply["ok"] = result.ok
            if not reply["ok"]:
                reply["error"] = f"exit code {result.exit_code}"
        except ValidationError as exc:
            reply.update(ok=False, error=f"bad_request: {exc.errors()[0]['msg']}"[:300])
        except RpcError as exc:
            reply.update(ok=False, error=f"{exc.code.value}: {exc.message}"[:300])
        await websocket.send_text(json.dumps(reply))
