"""What an MCP tool is: the :class:`Caller` it works for, the :class:`Outcome` it answers
with, and the :class:`ToolSpec` that names it. The tools themselves are in
:mod:`controller.mcp.tools` and :mod:`controller.mcp.agent_tools`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request

from controller.auth.authorization import Principal, Scope
from controller.executor.steps import ProgressListener
from controller.hub import Hub
from protocol.errors import ErrorCode, RpcError

__all__ = ["Caller", "Outcome", "ToolFn", "ToolSpec"]


@dataclass
class Caller:
    """Who calls (authenticated for this HTTP request) and through which app."""

    principal: Principal
    request: Request  # the HTTP request that carried the MCP message
    # Where a long tool reports its stages (MCP progress notifications), if anywhere.
    progress: ProgressListener | None = None

    @property
    def app(self) -> FastAPI:
        app: FastAPI = self.request.app
        return app

    @property
    def hub(self) -> Hub:
        hub: Hub | None = getattr(self.app.state, "hub", None)
        if hub is None:
            raise RpcError(ErrorCode.UNAVAILABLE, "the bridge hub is not running")
        return hub

    def require(self, scope: Scope) -> None:
        if not self.principal.allows(scope):
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"this token lacks the {scope.value!r} scope",
                {"rule": "missing_scope", "scope": scope.value},
            )


@dataclass
class Outcome:
    """A tool's answer: structured data (a JSON object), an image, and the devices it used."""

    data: dict[str, Any] | None = None
    image_png: bytes | None = None
    image_type: str = "image/png"  # image_png's media type (a live frame may be a JPEG)
    devices: list[str] = field(default_factory=list)
    # Extra audit entries' details (the sandbox: one per run).
    runs: list[dict[str, Any]] = field(default_factory=list)


ToolFn = Callable[[Caller, dict[str, Any]], Awaitable[Outcome]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    fn: ToolFn
    read_only: bool = False
