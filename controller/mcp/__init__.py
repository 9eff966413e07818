"""The MCP server (streamable HTTP at exactly ``/mcp``, docs/design.md §9): tools for agents.

Modules: :mod:`controller.mcp.server` (:class:`McpService`, the SDK server and its session
manager; :class:`McpEndpoint`, the authenticated ASGI route) and :mod:`controller.mcp.tools`
(the tools — ``sandbox_executor``, ``list_devices``, ``device_shell``, ``logcat_dump``,
``screenshot``, ``get_run`` — and the ``run://{id}`` resources).
"""

from __future__ import annotations

from controller.mcp.catalogue import TOOLS
from controller.mcp.server import MCP_PATH, McpEndpoint, McpService

__all__ = ["MCP_PATH", "TOOLS", "McpEndpoint", "McpService"]
