"""What an MCP tool is: the :class:`Caller` it works for, the :class:`Outcome` it answers
with, the :class:`ToolSpec` that declares it, and the one argument validator every tool goes
through (:func:`check_arguments`).

A tool is declared once (:mod:`controller.mcp.catalogue`): its input schema, its output schema
(every tool has one: the ``structuredContent`` of a successful call is checked against it,
:func:`check_output`) and its annotations (read-only, destructive, idempotent hints). Arguments
are checked against the input schema by JSON Schema (draft 2020-12) before the tool runs, the
same way for every tool: ``"10"`` is not an integer and ``123`` is not a string, anywhere. A
refusal is ``bad_request`` with ``{"errors": [{"loc", "msg"}]}`` naming each argument that is
wrong and why (an ``action`` outside its enum lists the allowed values).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from controller.auth.authorization import Principal, Scope
from controller.executor.results import RunResult
from controller.executor.steps import ProgressListener
from controller.hub import Hub
from controller.services.container import services_of
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "DEVICE_PROP",
    "MAX_ERRORS",
    "Caller",
    "Outcome",
    "ToolFn",
    "ToolSpec",
    "check_arguments",
    "check_output",
    "object_schema",
    "parse",
]

log = logging.getLogger("droidwire.controller.mcp")

MAX_ERRORS = 16  # problems listed in one refusal

#: The ``device`` argument of every device tool.
DEVICE_PROP: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 400,
    "description": "A device: its id as list_devices shows it (the bare serial while only one "
    "bridge has it, else BRIDGE~SERIAL).",
}


def object_schema(
    properties: Mapping[str, Any], required: list[str] | None = None, *, closed: bool = True
) -> dict[str, Any]:
    """A JSON object schema; ``closed``: no other properties (input schemas are closed)."""
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


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
        """The app's hub (``unavailable`` when the controller is not running)."""
        return services_of(self.app).hub

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
    runs: list[RunResult] = field(default_factory=list)


ToolFn = Callable[[Caller, dict[str, Any]], Awaitable[Outcome]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool. The hints are MCP's tool annotations: ``read_only`` (changes nothing),
    ``destructive`` (may change or lose state the caller did not create: meaningful only when
    not read-only), ``idempotent`` (calling it again with the same arguments changes nothing
    more), ``open_world`` (reaches beyond droidwire: a device is droidwire's world)."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    fn: ToolFn
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)
        Draft202012Validator.check_schema(self.output_schema)
        if self.output_schema.get("type") != "object":
            raise ValueError(f"{self.name}: an output schema is an object schema")


def _validator_for(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(schema)


def _problems(error: SchemaError) -> list[dict[str, Any]]:
    loc = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set((error.schema or {}).get("properties", {}))
        return [{"loc": [*loc, str(key)], "msg": "unknown argument"}
                for key in sorted(map(str, error.instance)) if key not in known]
    return [_problem(error, loc)]


def _problem(error: SchemaError, loc: list[str]) -> dict[str, Any]:
    if error.validator == "required":
        # "'device' is a required property": the missing argument is the location.
        missing = error.message.split("'")[1] if error.message.count("'") >= 2 else ""
        loc = [*loc, missing] if missing else loc
        return {"loc": loc, "msg": "required"}
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return {"loc": loc, "msg": f"{error.instance!r} is not one of {allowed}"[:300]}
    if error.validator == "type":
        return {"loc": loc, "msg": f"must be of type {error.validator_value}, "
                f"not {_JSON_TYPES.get(type(error.instance), 'a value of another type')}"}
    return {"loc": loc, "msg": error.message[:300]}


def check_arguments(spec: ToolSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` checked against ``spec.input_schema``; ``bad_request`` with detail if wrong."""
    errors = sorted(
        _validator_for(spec.input_schema).iter_errors(dict(args)),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    if not errors:
        return dict(args)
    problems = [p for e in errors for p in _problems(e)][:MAX_ERRORS]
    first = problems[0]
    where = ".".join(first["loc"]) or "arguments"
    raise RpcError(
        ErrorCode.BAD_REQUEST,
        f"invalid arguments: {where}: {first['msg']}"[:400],
        {"errors": problems},
    )


def check_output(spec: ToolSpec, data: Any) -> list[str]:
    """What in a result's structured content breaks ``spec.output_schema`` (empty: nothing)."""
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:200]}"
        for e in _validator_for(spec.output_schema).iter_errors(data)
    ][:MAX_ERRORS]


_M = TypeVar("_M", bound=BaseModel)
_JSON_TYPES: dict[type, str] = {
    str: "string", int: "integer", float: "number", bool: "boolean", list: "array",
    dict: "object", type(None): "null",
}


def parse(model: type[_M], args: Mapping[str, Any]) -> _M:
    """``args`` (already checked against the tool's schema) as a model; a constraint the
    schema does not express is refused the same way, ``bad_request`` with the problems."""
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        problems = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in exc.errors()[:MAX_ERRORS]
        ]
        raise RpcError(ErrorCode.BAD_REQUEST, "invalid arguments", {"errors": problems}) from None
