"""The FastAPI dependencies: who is calling (from the ``Authorization: Bearer`` header, never a
URL), and the route guards built on it (users, admins, bridges, scopes).

A request carrying a token-like query parameter is refused outright, so the mistake surfaces
at once instead of leaking the secret into access logs that happen to work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends
from fastapi.requests import HTTPConnection

from controller.auth.authorization import Principal, Scope, check_scope
from controller.auth.tokens import authenticate
from controller.services.container import services_of
from controller.store import TokenKind
from protocol.errors import ErrorCode, RpcError
from protocol.redact import QUERY_TOKEN_PARAMS

__all__ = [
    "QUERY_TOKEN_PARAMS", "Admin", "Authenticated", "BridgePrincipal", "DeviceReader",
    "RunReader", "RunWriter", "UserPrincipal", "current_admin", "current_bridge",
    "current_principal", "current_user", "require_scope",
]


async def current_principal(connection: HTTPConnection) -> Principal:
    """Authenticate an HTTP request or WebSocket handshake from its Authorization header."""
    leaked = QUERY_TOKEN_PARAMS.intersection(k.lower() for k in connection.query_params)
    if leaked:
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            "tokens go in the 'Authorization: Bearer' header, never in a URL "
            "(if that was a real token, revoke it: URLs end up in logs)",
            {"rule": "token_in_url", "parameters": sorted(leaked)},
        )
    principal = await authenticate(
        services_of(connection).store, connection.headers.get("authorization")
    )
    connection.state.principal = principal
    return principal


Authenticated = Annotated[Principal, Depends(current_principal)]


async def current_user(principal: Authenticated) -> Principal:
    """A user or admin token: bridge tokens only open the bridge endpoint."""
    if principal.kind is TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "a bridge token only connects a bridge",
            {"rule": "bridge_token"},
        )
    return principal


UserPrincipal = Annotated[Principal, Depends(current_user)]


async def current_admin(principal: UserPrincipal) -> Principal:
    if not principal.is_admin:
        raise RpcError(ErrorCode.FORBIDDEN, "admins only", {"rule": "admin_only"})
    return principal


Admin = Annotated[Principal, Depends(current_admin)]


async def current_bridge(principal: Authenticated) -> Principal:
    """A bridge token, for ``/v1/bridge``: refused (HTTP 401/403) before the WebSocket opens."""
    if principal.kind is not TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "only a bridge token can connect a bridge (create one: droidwire token create --kind bridge NAME)",
            {"rule": "not_a_bridge_token"},
        )
    return principal


BridgePrincipal = Annotated[Principal, Depends(current_bridge)]


def require_scope(scope: Scope) -> Callable[..., Any]:
    """A FastAPI dependency: the caller (a user or admin token) holding ``scope``.

    ``principal: Annotated[Principal, Depends(require_scope(Scope.RUNS_WRITE))]``
    """

    async def dependency(principal: UserPrincipal) -> Principal:
        check_scope(principal, scope)
        return principal

    return dependency




# Route dependencies for the scopes that are not about one device (device calls are scoped
# by authorize()): ``async def start_run(principal: RunWriter, …)``.
DeviceReader = Annotated[Principal, Depends(require_scope(Scope.DEVICES_READ))]
RunReader = Annotated[Principal, Depends(require_scope(Scope.RUNS_READ))]
RunWriter = Annotated[Principal, Depends(require_scope(Scope.RUNS_WRITE))]
