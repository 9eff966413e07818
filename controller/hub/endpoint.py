"""``/v1/bridge``: where bridges dial in (DESIGN.md §3).

The bridge token is checked before the WebSocket is accepted (``BridgePrincipal``: HTTP 401
for a missing, unknown or revoked token, 403 for a token that is not a bridge's), and so is
the subprotocol (400 without ``droidwire.v1``): a refused bridge never gets an open socket,
so it never mistakes a refusal for a connection that merely dropped. The bridge's identity is
its token's; nothing it says in ``hello`` changes it.
"""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from controller.auth import BridgePrincipal
from controller.hub.hub import Hub
from protocol.envelope import SUBPROTOCOL
from protocol.errors import ErrorCode, RpcError

__all__ = ["BRIDGE_PATH", "router"]

BRIDGE_PATH = "/v1/bridge"

router = APIRouter(tags=["bridges"])


@router.websocket(BRIDGE_PATH)
async def bridge_endpoint(websocket: WebSocket, principal: BridgePrincipal) -> None:
    if SUBPROTOCOL not in websocket.scope.get("subprotocols", []):
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            f"the bridge endpoint speaks the {SUBPROTOCOL} subprotocol only",
            {"rule": "subprotocol"},
        )
    hub: Hub = websocket.app.state.hub
    await websocket.accept(subprotocol=SUBPROTOCOL)
    await hub.serve(websocket, principal)
