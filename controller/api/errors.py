"""Typed error bodies in the OpenAPI schema (docs/design.md §9: ``/openapi.json``).

Every error the controller answers has one shape, built by :func:`error_body`::

    {"error": {"code": "forbidden", "message": "…", "rule": "…", …}}

:class:`ErrorBody` is that shape as a pydantic model. :data:`ERROR_RESPONSES` declares it for
every status an API call can end with, given to ``FastAPI(responses=…)`` so every route
carries it; :func:`install_openapi` then tidies the generated schema:

* FastAPI's automatic ``422`` (and its ``HTTPValidationError``) goes: a malformed request is
  ``400 bad_request`` here, with ``errors: [{"loc", "msg"}]`` (the app's validation handler).
* Unauthenticated operations (``/healthz``) do not list 401/403; only device calls and the
  sandbox list ``429 busy`` and ``504 timeout``, which only a device RPC produces.
* ``/v1`` operations declare the ``Authorization: Bearer`` security scheme.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field

from protocol.errors import ErrorCode

__all__ = ["ERROR_RESPONSES", "ErrorBody", "ErrorDetail", "error_body", "install_openapi"]


class ValidationProblem(BaseModel):
    loc: list[str] = Field(description="where in the request: body, query, path, and the field")
    msg: str


class ErrorDetail(BaseModel):
    """What went wrong. ``code`` is machine-readable; more fields may be added per error."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(
        description="One of: "
        + ", ".join(sorted({c.value for c in ErrorCode} | {"unauthorized", "method_not_allowed",
                                                          "too_large"})),
        examples=["forbidden"],
    )
    message: str = Field(description="For humans; never contains a secret.")
    rule: str | None = Field(
        default=None,
        description="forbidden: the rule that refused (a bridge policy rule, "
        "missing_scope, borrower_cannot_lend, token_in_url, …)",
    )
    errors: list[ValidationProblem] | None = Field(
        default=None, description="bad_request from validation: one entry per problem"
    )
    candidates: list[str] | None = Field(
        default=None, description="conflict on an ambiguous serial: the BRIDGE~SERIAL ids"
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed request (bad_request), or a token in the URL (rule token_in_url)",
    401: "No, malformed, unknown or revoked Bearer token (unauthorized)",
    403: "Authenticated but not allowed (forbidden, with the rule)",
    404: "No such thing, or not visible to the caller (not_found)",
    409: "Conflict: an ambiguous device (with candidates), a device offline, a name taken",
    429: "The device is busy, or a run would pass the user's quota (busy, with quota and limit)",
    500: "A controller bug (internal); details stay in the controller's log",
    503: "A component is unavailable: the hub, a bridge (unavailable)",
    504: "The device or bridge did not answer in time (timeout)",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DESCRIPTIONS.items()
}
# Only a device RPC can end busy or timed out.
_DEVICE_ONLY = ("429", "504")
_AUTH_ONLY = ("401", "403")
SECURITY_SCHEME = "bearer"


def _calls_a_device(path: str) -> bool:
    return "{device}" in path or path == "/v1/sandbox/execute"


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (``/openapi.json``) return the tidied schema (see module doc)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _tidy(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _tidy(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token (droidwire token create); never in a URL.",
    }
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses: dict[str, Any] = operation.get("responses", {})
            responses.pop("422", None)
            if not _calls_a_device(path):
                for status in _DEVICE_ONLY:
                    responses.pop(status, None)
            if path.startswith("/v1/"):
                operation["security"] = [{SECURITY_SCHEME: []}]
            else:  # /healthz: unauthenticated, and its 503 is its own status body
                for status in (*_AUTH_ONLY, "400", "404", "409"):
                    responses.pop(status, None)
                if "503" in responses:
                    responses["503"] = {
                        "description": "Not healthy (the database is unreachable)",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return schema


def error_body(code: str, message: str, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", …data}}``; data never overrides code or message."""
    body: dict[str, Any] = {"code": code, "message": message}
    for key, value in (data or {}).items():
        body.setdefault(key, value)
    return {"error": jsonable_encoder(body)}
