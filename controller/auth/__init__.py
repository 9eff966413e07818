"""Who is calling, and may they do this: tokens, principals and the one authorization check.

Modules: :mod:`controller.auth.tokens` (issuing, hashing, looking up, rotating and revoking
tokens), :mod:`controller.auth.authorization` (actions, scopes, principals, grants and
:func:`authorize`, THE authorization check), :mod:`controller.auth.http` (the FastAPI
dependencies: the caller from its ``Authorization: Bearer`` header, and route guards). This
package's names below are its public surface.

Exception tree::

    Unauthenticated       no, malformed, unknown or revoked credentials (HTTP 401)
    protocol.errors.RpcError(FORBIDDEN | NOT_FOUND | CONFLICT | BAD_REQUEST)
                          authenticated but not allowed, or a bad token request
"""

from __future__ import annotations

from controller.auth.authorization import (
    ACTION_SCOPE,
    ALL_SCOPES,
    Action,
    Clock,
    DeviceRef,
    Principal,
    Scope,
    authorize,
    effective_scopes,
    live_grant_filter,
    may,
    now,
    use_clock,
    visible_devices,
)
from controller.auth.http import (
    QUERY_TOKEN_PARAMS,
    Admin,
    Authenticated,
    BridgePrincipal,
    DeviceReader,
    RunReader,
    RunWriter,
    UserPrincipal,
    current_admin,
    current_bridge,
    current_principal,
    current_user,
    require_scope,
)
from controller.auth.tokens import (
    ADMIN_USER,
    NAME_PATTERN,
    TOKEN_PREFIXES,
    IssuedToken,
    TokenRecord,
    Unauthenticated,
    authenticate,
    create_token,
    ensure_bootstrap_admin,
    generate_token,
    hash_token,
    is_row_id,
    list_tokens,
    parse_bearer,
    principal_for,
    revoke_token,
    rotate_token,
)

__all__ = [
    "ACTION_SCOPE",
    "ADMIN_USER",
    "ALL_SCOPES",
    "NAME_PATTERN",
    "QUERY_TOKEN_PARAMS",
    "TOKEN_PREFIXES",
    "Action",
    "Admin",
    "Authenticated",
    "BridgePrincipal",
    "Clock",
    "DeviceReader",
    "DeviceRef",
    "IssuedToken",
    "Principal",
    "RunReader",
    "RunWriter",
    "Scope",
    "TokenRecord",
    "Unauthenticated",
    "UserPrincipal",
    "authenticate",
    "authorize",
    "create_token",
    "current_admin",
    "current_bridge",
    "current_principal",
    "current_user",
    "effective_scopes",
    "ensure_bootstrap_admin",
    "generate_token",
    "hash_token",
    "is_row_id",
    "list_tokens",
    "live_grant_filter",
    "may",
    "now",
    "parse_bearer",
    "principal_for",
    "require_scope",
    "revoke_token",
    "rotate_token",
    "use_clock",
    "visible_devices",
]
