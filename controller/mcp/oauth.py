"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for ``/mcp`` and the REST API.

droidwire's tokens are bearer tokens an owner creates (``droidwire token create``): there is
no authorization server to send a client to, and the metadata says so by listing none. What it
does give an MCP client is the shape of the 401 it met: the resource, that the token travels in
the ``Authorization`` header only, and where to read how to get one. Every 401 names this
document in ``WWW-Authenticate: Bearer resource_metadata="…"`` (RFC 9728 §5.1) with the
reason as ``error_description`` (RFC 6750 §3), so a client such as MCP Inspector shows the
401's message instead of starting an OAuth flow it cannot finish.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import HTTPConnection, Request

__all__ = ["METADATA_PATH", "router", "www_authenticate"]

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"

router = APIRouter(include_in_schema=False)


def _origin(conn: HTTPConnection) -> str:
    scheme = {"ws": "http", "wss": "https"}.get(conn.url.scheme, conn.url.scheme)
    return f"{scheme}://{conn.url.netloc}"


def _metadata(conn: HTTPConnection, resource_path: str) -> dict[str, Any]:
    return {
        "resource": _origin(conn) + resource_path,
        "authorization_servers": [],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["devices:read", "devices:use", "runs:read", "runs:write"],
        "resource_name": "droidwire",
    }


@router.get(METADATA_PATH)
async def resource_metadata(request: Request) -> dict[str, Any]:
    """The API's metadata (its resource is the controller's origin)."""
    return _metadata(request, "")


@router.get(METADATA_PATH + MCP_PATH)
async def mcp_resource_metadata(request: Request) -> dict[str, Any]:
    """``/mcp``'s metadata (RFC 9728 §3.1: the resource's path after the well-known one)."""
    return _metadata(request, MCP_PATH)


def www_authenticate(conn: HTTPConnection, message: str) -> str:
    """The ``WWW-Authenticate`` value of a 401 at ``conn``'s path."""
    path = conn.url.path.rstrip("/")
    suffix = MCP_PATH if path == MCP_PATH else ""
    description = "".join(c for c in message if c.isprintable() and c not in '"\\')[:200]
    value = f'Bearer realm="droidwire", resource_metadata="{_origin(conn)}{METADATA_PATH}{suffix}"'
    if "authorization" in conn.headers:  # RFC 6750 §3.1: no error code when none was sent
        value += ', error="invalid_token"'
    return value + f', error_description="{description}"'

