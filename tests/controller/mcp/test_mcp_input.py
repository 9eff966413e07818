"""Bad input at ``/mcp`` never crashes anything: malformed HTTP and JSON-RPC get 4xx, and
random tool arguments (hypothesis) get a tool error or a result, never a 5xx; the server
keeps answering afterwards."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.mcp import TOOLS
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.mcp.conftest import WAIT_S, Rig

pytestmark = pytest.mark.adb

HEADERS = {
    **bearer(ADMIN_TOKEN),
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}
EXAMPLES_PER_TOOL = 12
# Tools whose random calls would start long work (a sandbox run, a planner) are fed only
# malformed arguments: the point is the input handling, not the run.
SLOW = {"sandbox_executor", "device_act"}


def _rpc(method: str, params: Any, id_: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def _results(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a JSON or SSE response body."""
    text = text.strip()
    if text.startswith("{"):
        return [json.loads(text)]
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")
            and line[5:].strip()]


async def test_malformed_http_gets_4xx_and_the_server_lives_on(rig: Rig) -> None:
    bad: list[tuple[str, dict[str, str], bytes]] = [
        ("POST", HEADERS, b"{not json"),
        ("POST", HEADERS, b"[]"),
        ("POST", HEADERS, b'{"jsonrpc": "2.0"}'),
        ("POST", HEADERS, json.dumps(_rpc("tools/call", "not an object")).encode()),
        ("POST", HEADERS, json.dumps(_rpc("no/such/method", {})).encode()),
        ("POST", {**HEADERS, "Content-Type": "text/plain"}, b"hello"),
        ("POST", {**HEADERS, "Accept": "text/html"}, json.dumps(_rpc("ping", {})).encode()),
        ("POST", HEADERS, b"{" + b" " * (5 * 1024 * 1024) + b"}"),  # over the body limit
        ("PUT", HEADERS, b"{}"),
    ]
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        for method, headers, body in bad:
            response = await http.request(method, rig.mcp_url, headers=headers, content=body)
            if response.status_code == 200:  # a JSON-RPC error rides a 200
                assert all("error" in m for m in _results(response.text)), response.text[:300]
            else:
                assert 400 <= response.status_code < 500, (method, body[:40], response.text[:300])
        stream = await http.get(rig.mcp_url, headers=HEADERS)
        assert stream.status_code == 405  # stateless: no standalone SSE stream to hold open
        assert stream.json()["error"]["code"] == "method_not_allowed"
        assert (await http.get(rig.mcp_url)).status_code == 401  # auth comes first
        alive = await http.post(rig.mcp_url, headers=HEADERS,
                                json=_rpc("tools/call", {"name": "list_devices", "arguments": {}}))
    [message] = _results(alive.text)
    assert message["result"]["isError"] is False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8,
)


def _arguments(tool: str, device: str) -> st.SearchStrategy[Any]:
    """Arguments for ``tool``: keys from its schema (and a stray one), any JSON values, the
    real device sometimes so the calls get past resolution."""
    schema = TOOLS[tool].input_schema
    keys = [*sorted(schema.get("properties", {})), "unexpected"]
    value = _JSON | st.just(device) | st.just("echo hi")
    args = st.dictionaries(st.sampled_from(keys), value, max_size=4)
    if tool in SLOW:  # never a well-formed request: a wrong type on a required key
        args = args.map(lambda a: {**a, "test_code": 7, "instruction": 7})
    return args | _JSON  # sometimes not even an object


async def test_random_tool_arguments_never_5xx(rig: Rig) -> None:
    calls: list[tuple[str, Any]] = []
    for tool in sorted(TOOLS):

        @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None, database=None,
                  derandomize=True, suppress_health_check=list(HealthCheck))
        @given(st.tuples(st.just(tool), _arguments(tool, rig.device_id)))
        def draw(call: tuple[str, Any]) -> None:
            calls.append(call)

        draw()  # hypothesis drives sync functions: draw here, send below
    outcomes: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=4 * WAIT_S) as http:
        for n, (tool, arguments) in enumerate(calls):
            response = await http.post(
                rig.mcp_url, headers=HEADERS,
                json=_rpc("tools/call", {"name": tool, "arguments": arguments}, n),
            )
            assert response.status_code < 500, (tool, arguments, response.text[:300])
            for message in _results(response.text):
                kind = "error" if "error" in message else (
                    "tool_error" if message["result"].get("isError") else "ok")
                outcomes[kind] = outcomes.get(kind, 0) + 1
                if kind == "tool_error":  # our typed body, never a traceback
                    body = json.loads(message["result"]["content"][0]["text"])
                    assert body["error"]["code"] != "internal", (tool, arguments, body)
    assert outcomes.get("tool_error", 0) > 0 and sum(outcomes.values()) >= len(calls)
