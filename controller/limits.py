"""Request body limits, enforced before a body is read (docs/security.md, "Bounds and secrets").

A pure ASGI middleware, outermost in the stack: it runs before routing, before authentication
and before any handler reads the body. A request whose ``Content-Length`` is over its route's
limit is answered ``413`` at once, its body never read; a body without one (chunked) is counted
as it streams through: at the limit the client gets the same ``413`` at once, and the
handler sees the client gone (whatever it answers is dropped). After a ``413`` up to
:data:`DRAIN_BYTES` more are read and dropped (never kept), so a client that sends its whole
body before reading gets the answer; past that the connection is closed. The
bridge WebSocket does not pass here (it has its own frame cap); WebSockets never have bodies.

Limits, per route: ``max_body_bytes`` for every request, ``max_upload_bytes`` for the routes
that take prebuilt APKs (:data:`UPLOAD_PATHS`), ``max_transfer_bytes`` for the app and file
transfers that their handlers stream to the bridge chunk by chunk, never buffered
(:data:`controller.api.manage.TRANSFER_ROUTES`) — the larger limits only for a caller whose
token (or dashboard session) is valid: a stranger's body is never read past
``max_body_bytes``, whatever the route.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DRAIN_BYTES", "UPLOAD_PATHS", "BodyLimit"]

#: Routes whose body may be as large as ``max_upload_bytes`` (prebuilt APKs, base64).
UPLOAD_PATHS = frozenset({"/v1/sandbox/execute"})
#: What is read and dropped after a 413, so that a client still sending gets the answer.
DRAIN_BYTES = 8 * 1024 * 1024


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_upload_bytes: int,
        max_transfer_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes
        self.max_transfer_bytes = max_upload_bytes if max_transfer_bytes is None else max_transfer_bytes

    async def limit_for(self, scope: Scope) -> int:
        """The route's limit; the upload limit only for an authenticated caller (one indexed
        read of the token), so a stranger's body is never read past ``max_body_bytes``."""
        from controller.api.manage import TRANSFER_ROUTES

        path = scope.get("path", "").rstrip("/")
        if path in UPLOAD_PATHS:
            larger = self.max_upload_bytes
        elif TRANSFER_ROUTES.match(path):
            larger = self.max_transfer_bytes
        else:
            return self.max_body_bytes
        return larger if await _authenticated(scope) else self.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared <= self.max_body_bytes:
            await self.app(scope, receive, send)  # the common case: nothing to count
            return
        limit = await self.limit_for(scope)
        if declared is not None and declared > limit:
            await _too_large(send, limit)
            await _drain(receive)
            return
        seen = 0
        started = answered = False

        async def counted() -> Message:
            nonlocal seen, answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # Answer now, and tell the app the client is gone: it stops reading,
                    # and whatever it still sends is dropped.
                    answered = True
                    if not started:
                        await _too_large(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            if answered:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted, watch)
        if answered:
            await _drain(receive)


async def _drain(receive: Receive) -> None:
    """Read and drop what the client still sends, up to :data:`DRAIN_BYTES`: a client that
    sends its whole body before reading the answer (most do) then gets the ``413`` instead of
    a reset connection. Past that the server closes the connection; nothing is kept."""
    drained = 0
    while drained <= DRAIN_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(send: Send, limit: int) -> None:
    body: dict[str, Any] = {"error": {
        "code": "bad_request",
        "message": f"the request body is larger than this route's limit of {limit} bytes",
        "rule": "body_too_large",
        "limit": limit,
    }}
    data = json.dumps(body).encode()
    await send({
        "type": "http.response.start", "status": 413,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode())],
    })
    await send({"type": "http.response.body", "body": data})


async def _authenticated(scope: Scope) -> bool:
    """Whether the request carries a valid token (one indexed read) or dashboard session."""
    from starlette.requests import HTTPConnection

    from controller.auth.tokens import authenticate
    from controller.services.container import services_of
    from controller.web.sessions import session_principal
    from protocol.errors import RpcError

    try:
        store = services_of(scope.get("app")).store
    except RpcError:  # not running
        return False
    authorization = dict(scope.get("headers", [])).get(b"authorization")
    try:
        if authorization is not None:
            await authenticate(store, authorization.decode("latin-1"))
            return True
        return await session_principal(HTTPConnection(scope)) is not None
    except Exception:  # unknown, revoked, malformed: the route answers 401 itself
        return False
