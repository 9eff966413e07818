"""Remote adb through the link, REST side (docs/tunnel.md).

WebSocket ``/v1/devices/{device}/tunnel`` (``Authorization: Bearer`` on the handshake, never a
URL): one tunnel to one device, for ``droidwire device tunnel`` (or any client speaking the
frames of :mod:`protocol.tunnel_methods`). Binary msgpack frames both ways; the first one the
server sends is ``hello``. Using a device through a tunnel needs the right to *use* it (its
owner, a borrower inside a live grant, an admin), checked before the socket opens, again at
every stream the client opens, and watched for the tunnel's whole life: once the token is
revoked or the loan revoked or expired (:func:`controller.access.until_lapsed`), the tunnel
ends (``end {reason: "forbidden: …"}``, close code 1008) and the adb client sees the device go
offline. The tunnel, every stream it opens (refused or not), the sync requests refused inside
its streams (bounded) and its end are in the audit log.

Cluster mode: when another replica holds the device's bridge, the tunnel runs there and its
frames are relayed (:mod:`controller.cluster.tunnels`); the handshake, the watch on the
caller's access and the tunnel's own audit entries stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from controller.access import until_lapsed
from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.hub import Hub, resolve_device
from controller.hub.tunnel import TunnelSession
from controller.services import services_of
from protocol.errors import ErrorCode, RpcError

__all__ = ["serve_tunnel"]

log = logging.getLogger("droidwire.controller.api.tunnel")


async def serve_tunnel(websocket: WebSocket, hub: Hub, principal: Principal, device: str) -> None:
    record = await resolve_device(hub, principal, device)
    ref = record.ref
    action = "device.tunnel"
    tunnel: TunnelSession | None = None
    try:
        await authorize(principal, ref, Action.USE, store=hub.store)
        if hub.gate is not None:
            hub.gate(ref)
        tunnel = await _session(hub, principal, ref)
        hello = await tunnel.start()
    except RpcError as exc:
        if tunnel is not None:
            tunnel.end("refused")
        await hub.audit_device(principal, action, ref, exc)
        raise
    await hub.audit_device(principal, action, ref, None)
    reason = "closed"
    try:
        await websocket.accept()
        await websocket.send_bytes(hello)
        reader = asyncio.create_task(_receive(websocket, tunnel))
        lapsed = asyncio.create_task(until_lapsed(
            services_of(websocket).access, hub.store,
            hub.settings.stream_reauth_s, principal, ref))

        def ended(task: asyncio.Task[str]) -> None:
            if not task.cancelled() and task.exception() is None:
                tunnel.end(task.result())

        reader.add_done_callback(ended)
        lapsed.add_done_callback(ended)
        try:
            while (frame := await tunnel.next_frame()) is not None:
                await websocket.send_bytes(frame)
            reason = tunnel.ended or "closed"
            code = 1008 if reason.startswith("forbidden") else 1000
            with contextlib.suppress(Exception):
                await websocket.close(code, reason[:120])
        finally:
            for task in (reader, lapsed):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    except (WebSocketDisconnect, RuntimeError, OSError):
        reason = "client gone"
    finally:
        tunnel.end(reason if tunnel.ended is None else tunnel.ended)
        with contextlib.suppress(Exception):
            await tunnel.finished()
            await hub.audit.record(principal, "device.tunnel.end", device=str(ref),
                                   detail={"tunnel": tunnel.id, "reason": tunnel.ended or reason,
                                           "opened": tunnel.opened, "refused": tunnel.refused})


async def _session(hub: Hub, principal: Principal, ref: DeviceRef) -> TunnelSession:
    """The tunnel: here when this replica holds the device's bridge (or none does: the bridge
    may come back here), else run by the replica that holds it, its frames relayed (cluster
    mode, docs/tunnel.md)."""
    replica = await hub.held_elsewhere(ref.bridge_id)
    if replica is not None:
        return hub.hooks.tunnel(replica, principal, ref)
    return hub.tunnels.open(principal, ref)


async def _receive(websocket: WebSocket, tunnel: TunnelSession) -> str:
    """Read the client's frames until it goes; the reason the tunnel ends."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return "client gone"
        data = message.get("bytes")
        try:
            if data is None:
                raise RpcError(ErrorCode.BAD_REQUEST, "tunnel frames are binary")
            await tunnel.receive(data)
        except RpcError as exc:
            log.info("tunnel %s: %s", tunnel.id, exc.message)
            return f"bad_request: {exc.message}"
