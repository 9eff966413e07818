"""``/v1/bridge``: where bridges dial in (docs/design.md §3) — the ASGI endpoint.

``droidwire controller`` serves this path with websockets' own server connection instead
(:mod:`controller.hub.wsserver`, routed by :class:`controller.ws_protocol.RoutingProtocol`),
with the same checks; this endpoint serves it when the app runs on a server without that
protocol class (another ASGI server, Starlette's test client).

The bridge token is checked before the WebSocket is accepted (HTTP 401 for a missing,
unknown or revoked token, 403 for a token that is not a bridge's), and so is the subprotocol
(400 without ``droidwire.v1``): a refused bridge never gets an open socket, so it never
mistakes a refusal for a connection that merely dropped. The bridge's identity is its
token's; nothing it says in ``hello`` changes it.

The endpoint is a plain ASGI app that :class:`controller.app.ControllerApp` calls for this
one path **before** its middleware stack and router: an idle bridge holds its connection for
hours, and every layer it passes through (error and exception middleware, FastAPI's routing,
dependency solving and exit stacks) keeps a coroutine frame and a few containers alive for
as long — about 12 KB per bridge, a quarter of the controller's memory per idle bridge
(docs/benchmarks.md). What those layers did for this route is done here: the same
authentication functions (:func:`controller.auth.current_principal`,
:func:`~controller.auth.current_bridge`), and a refusal answered by the app's own exception
handlers, as an HTTP response through the ASGI denial-response extension. Any other error
before ``accept`` reaches the server, which answers HTTP 500. HTTP metrics never counted
WebSockets, so nothing is lost there.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from controller.auth.http import current_bridge, current_principal
from controller.auth.tokens import Unauthenticated
from controller.services.container import services_of
from protocol.envelope import SUBPROTOCOL
from protocol.errors import ErrorCode, RpcError

__all__ = ["BRIDGE_PATH", "bridge_endpoint"]

BRIDGE_PATH = "/v1/bridge"


async def bridge_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    """The ``/v1/bridge`` WebSocket (``scope["app"]`` is the controller's app)."""
    websocket = WebSocket(scope, receive, send)
    try:
        principal = await current_bridge(await current_principal(websocket))
        hub = services_of(websocket).hub
        if SUBPROTOCOL not in scope.get("subprotocols", []):
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"the bridge endpoint speaks the {SUBPROTOCOL} subprotocol only",
                {"rule": "subprotocol"},
            )
    except (RpcError, Unauthenticated) as exc:
        await _refuse(websocket, exc)
        return
    await websocket.accept(subprotocol=SUBPROTOCOL)
    await hub.serve(websocket, principal)


async def _refuse(websocket: WebSocket, exc: Exception) -> None:
    """Answer ``exc`` as the app's exception handler for it would on any WebSocket route."""
    handlers = websocket.app.exception_handlers
    handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
    if handler is None:
        raise exc
    response = await handler(websocket, exc)
    if response is not None:
        await response(websocket.scope, websocket.receive, websocket.send)
