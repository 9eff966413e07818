"""``/openapi.json`` declares typed error bodies, and schemathesis fuzzes every operation in it
through the ASGI app (lifespan running: store, hub, executor) with a valid admin token.

The fuzz asserts what the issue asks — no input gets a 5xx — and more of schemathesis'
checks where the schema makes a promise (documented statuses, the bodies' shapes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from controller.api.errors import ErrorBody
from controller.app import create_app
from controller.config import ControllerConfig
from tests.controller.conftest import ADMIN_TOKEN, Api, bearer

# Examples per operation (every operation in the schema), plus the schema's own examples and its boundaries.
FUZZ_EXAMPLES = 15


async def test_openapi_declares_the_error_bodies(api: Api) -> None:
    response = await api.client.get("/openapi.json")  # unauthenticated, like /healthz
    assert response.status_code == 200
    schema = response.json()
    schemas = schema["components"]["schemas"]
    assert schemas["ErrorBody"]["required"] == ["error"]
    assert set(schemas["ErrorDetail"]["required"]) == {"code", "message"}
    assert "HTTPValidationError" not in schemas  # a validation error is 400, not 422
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    operations = [
        (path, method, op)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
    ]
    assert len(operations) >= 16
    for path, method, op in operations:
        responses = op["responses"]
        assert "422" not in responses, (method, path)
        if not path.startswith("/v1/"):
            assert "401" not in responses
            continue
        assert op["security"] == [{"bearer": []}]
        for status in ("400", "401", "403", "404", "500"):
            assert responses[status]["content"]["application/json"]["schema"] == ref, (
                method, path, status)
        assert ("504" in responses) == ("{device}" in path or path == "/v1/sandbox/execute")
    assert schema["paths"]["/healthz"]["get"]["responses"]["503"]["description"]


async def test_real_errors_match_the_declared_body(api: Api) -> None:
    """The shapes the app really sends validate against :class:`ErrorBody`."""
    answers = [
        await api.client.get("/v1/devices"),  # 401
        await api.client.get("/v1/runs", params={"limit": "x"}, headers=bearer(ADMIN_TOKEN)),
        await api.client.get("/v1/runs/nope", headers=bearer(ADMIN_TOKEN)),
        await api.client.get("/v1/devices?token=abc", headers=bearer(ADMIN_TOKEN)),
    ]
    assert [r.status_code for r in answers] == [401, 400, 404, 400]
    bodies = [ErrorBody.model_validate(r.json()) for r in answers]
    assert bodies[1].error.errors and bodies[1].error.errors[0].loc[-1] == "limit"
    assert bodies[3].error.rule == "token_in_url"


# --- the fuzz ------------------------------------------------------------------------------


class _AppPerLifespan:
    """The ASGI app the fuzz drives: a fresh controller app for each lifespan start, on one
    database. (Schemathesis' pytest plugin stops the lifespan after each test and starts it
    again; a controller app's lifespan runs once, as under uvicorn.)"""

    def __init__(self) -> None:
        self.db_url = ""
        self.app: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self.app is None:
            assert self.db_url, "the fuzz_app fixture sets the database first"
            self.app = create_app(ControllerConfig(db_url=self.db_url, bootstrap_token=ADMIN_TOKEN))
        await self.app(scope, receive, send)


_DRIVEN = _AppPerLifespan()
# The schema as the app serves it (no lifespan needed to generate it).
schema = schemathesis.openapi.from_dict(
    create_app(ControllerConfig(db_url="sqlite:///unused.db")).openapi()
)
schema.app = _DRIVEN  # requests go through the ASGI app, as from_asgi() would arrange


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_AppPerLifespan]:
    _DRIVEN.db_url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'controller.db'}"
    try:
        yield _DRIVEN
    finally:
        shutdown_lifespans()  # schemathesis runs the app's lifespan on its own loop


@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same inputs every run: CI failures reproduce
    database=None,
)
def test_fuzz_every_operation_without_a_5xx(case: Any, fuzz_app: _AppPerLifespan) -> None:
    del fuzz_app  # its database is in place
    response = case.call(headers=bearer(ADMIN_TOKEN))
    # A 5xx is a bug: say which request and what came back.
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            ignored_auth,  # a success is repeated without the token: it must be refused
            negative_data_rejection,  # input the schema forbids is refused with a 4xx
        ],
    )
    if response.status_code >= 400:
        ErrorBody.model_validate(response.json())  # every error has the declared shape
