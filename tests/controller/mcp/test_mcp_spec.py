"""MCP as the spec says (issue 19): every tool declares an output schema and annotations, and
every successful result's ``structuredContent`` matches it (the SDK's client checks it on each
``call_tool``, and so does this test); an unknown tool is JSON-RPC -32602; arguments are
checked by one JSON Schema validator for every tool, with the detail of what is wrong;
``/mcp/`` answers as ``/mcp`` does; a 401 names RFC 9728 metadata."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import jsonschema
import pytest
from mcp.shared.exceptions import MCPError

from controller.agent import RulePlanner, Verifier
from device_bridge.sim.apk import SimPackage, build_apk
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.executor.support import llm_style_test
from tests.controller.mcp.conftest import WAIT_S, Rig
from tests.controller.mcp.test_mcp_e2e import INITIALIZE, MCP_HEADERS, _data, _error

pytestmark = pytest.mark.adb

PACKAGE = "com.example.spec"
APK = base64.b64encode(build_apk(SimPackage(package=PACKAGE, kind="app"))).decode()
DESTRUCTIVE = {"device_shell", "device_action", "device_act", "sandbox_executor",
               "install_app", "app_action"}


async def test_every_tool_declares_output_schema_and_annotations(rig: Rig) -> None:
    async with rig.session() as session:
        tools = (await session.list_tools()).tools
    assert len(tools) >= 16
    for tool in tools:
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is not None, tool.name
        assert hints.destructive_hint is not None and hints.open_world_hint is not None
        assert hints.destructive_hint == (tool.name in DESTRUCTIVE), tool.name
        assert hints.read_only_hint == (tool.name not in DESTRUCTIVE), tool.name
        assert tool.title


async def test_every_tool_result_matches_its_output_schema(rig: Rig) -> None:
    """Each tool called with good arguments (live_frame's success, which needs a viewer, is
    in test_mcp_live_frame.py, through the same validating client)."""
    rig.controller.app.state.agent_planner = RulePlanner()
    rig.controller.app.state.agent_verifier = Verifier(None)  # no model here: "unverified"
    device = rig.sim.address
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_devices", {}),
        ("device_shell", {"device": device, "command": "echo spec"}),
        ("logcat_dump", {"device": device, "lines": 20}),
        ("screenshot", {"device": device}),
        ("device_state", {"device": device}),
        ("ui_elements", {"device": device}),
        ("marked_screenshot", {"device": device}),
        ("marked_screenshot", {"device": device, "marks": False}),
        ("device_action", {"device": device, "action": "key", "key": "HOME"}),
        ("device_act", {"device": device, "instruction": "go home"}),
        ("mark_done", {"device": device, "goal": "the home screen", "summary": "went home"}),
        ("install_app", {"device": device, "apk_base64": APK}),
        ("list_apps", {"device": device}),
        ("app_action", {"device": device, "package": PACKAGE, "action": "launch"}),
        ("app_action", {"device": device, "package": PACKAGE, "action": "uninstall"}),
        ("sandbox_executor", {"test_code": llm_style_test("fastPath()"), "device": device}),
    ]
    called: set[str] = set()
    async with rig.session() as session:
        schemas = {t.name: t.output_schema for t in (await session.list_tools()).tools}
        for name, args in calls:
            result = await session.call_tool(name, args)  # the SDK validates it too
            assert not result.is_error, (name, result.content)
            assert result.structured_content is not None, name
            jsonschema.validate(result.structured_content, schemas[name])
            called.add(name)
        run_id = _data(result)["run_id"]
        run = await session.call_tool("get_run", {"run_id": run_id})
        jsonschema.validate(run.structured_content, schemas["get_run"])
        called.add("get_run")
    assert called | {"live_frame"} == set(schemas)


async def test_an_unknown_tool_is_a_protocol_error(rig: Rig) -> None:
    async with rig.session() as session:
        with pytest.raises(MCPError) as caught:
            await session.call_tool("no_such_tool", {})
    assert caught.value.error.code == -32602
    assert "no_such_tool" in caught.value.error.message


@pytest.mark.parametrize(
    ("tool", "args", "loc", "words"),
    [
        ("logcat_dump", {"lines": "10"}, ["lines"], "integer"),
        ("device_shell", {"command": 123}, ["command"], "string"),
        ("device_shell", {"argv": "echo hi"}, ["argv"], "array"),
        ("device_action", {"action": "fly"}, ["action"], "'tap'"),
        ("device_action", {"action": "tap", "index": "3"}, ["index"], "integer"),
        ("marked_screenshot", {"marks": "yes"}, ["marks"], "boolean"),
        ("app_action", {"package": "a.b", "action": "explode"}, ["action"], "'launch'"),
        ("logcat_dump", {"lines": 10, "follow": True}, ["follow"], "unknown"),
        ("logcat_dump", {"lines": 0}, ["lines"], "minimum"),
    ],
    ids=["lines-str", "command-int", "argv-str", "action-enum", "index-str", "marks-str",
         "app-action-enum", "unknown-arg", "lines-zero"],
)
async def test_one_validator_refuses_wrong_types_alike_with_detail(
    rig: Rig, tool: str, args: dict[str, Any], loc: list[str], words: str
) -> None:
    async with rig.session() as session:
        error = _error(await session.call_tool(tool, {"device": rig.device_id, **args}))
    assert error["code"] == "bad_request"
    problems = error["errors"]
    assert any(p["loc"] == loc and words in p["msg"] for p in problems), problems
    assert ".".join(loc) in error["message"]


async def test_mcp_with_a_slash_is_served_not_redirected(rig: Rig) -> None:
    async with httpx.AsyncClient(timeout=WAIT_S, follow_redirects=False) as http:
        slash = await http.post(rig.mcp_url + "/", json=INITIALIZE,
                                headers={**MCP_HEADERS, **bearer(ADMIN_TOKEN)})
    assert slash.status_code == 200, slash.text
    assert "serverInfo" in slash.text


async def test_a_401_names_protected_resource_metadata(rig: Rig) -> None:
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        refused = await http.post(rig.mcp_url, json=INITIALIZE,
                                  headers={**MCP_HEADERS, **bearer("dw_u_wrong")})
        challenge = refused.headers["www-authenticate"]
        assert refused.status_code == 401
        assert challenge.startswith("Bearer ")
        assert 'error="invalid_token"' in challenge
        assert f'error_description="{refused.json()["error"]["message"]}"' in challenge
        url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        assert url == f"{rig.controller.url}/.well-known/oauth-protected-resource/mcp"
        metadata = (await http.get(url)).json()  # no token needed
        missing = await http.post(rig.mcp_url, json=INITIALIZE, headers=MCP_HEADERS)
    assert metadata["resource"] == rig.mcp_url
    assert metadata["bearer_methods_supported"] == ["header"]
    assert metadata["authorization_servers"] == []
    assert "error=" not in missing.headers["www-authenticate"]  # RFC 6750: none was sent
    assert "resource_metadata=" in missing.headers["www-authenticate"]

