"""The MCP server end to end, through the SDK's own client: a real controller on uvicorn, the
real bridge, the real adb server and a simulated device (fixtures in ``conftest.py``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from controller.executor import tool_schema
from controller.services import services_of
from controller.store import AuditEntry
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.executor.support import llm_style_test
from tests.controller.mcp.conftest import WAIT_S, Rig

pytestmark = pytest.mark.adb

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _data(result: types.CallToolResult) -> dict[str, Any]:
    """A tool result's JSON, checking the text block says the same as structured content."""
    [block] = [c for c in result.content if isinstance(c, types.TextContent)]
    data: dict[str, Any] = json.loads(block.text)
    assert result.structured_content == data
    return data


def _error(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    return dict(_data(result)["error"])


async def _audit(rig: Rig, action: str) -> list[AuditEntry]:
    entries = await services_of(rig.controller.app).audit.recent(limit=500)
    return [e for e in entries if e.action == action]


async def test_tools_are_listed_with_the_seeds_schema(rig: Rig) -> None:
    async with rig.session() as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        templates = (await session.list_resource_templates()).resource_templates
    assert set(listed) == {
        "sandbox_executor", "list_devices", "device_shell", "logcat_dump", "screenshot", "get_run",
        "live_frame",  # the live screen's newest frame (issue 17)
        # the agent toolkit's (issue 11)
        "device_state", "ui_elements", "marked_screenshot", "device_action", "device_act",
        "mark_done",  # the verifier (issue 19)
        # apps (issue 18)
        "list_apps", "install_app", "app_action",
    }
    sandbox = listed["sandbox_executor"].input_schema
    base = tool_schema()["function"]["parameters"]
    assert {k: v for k, v in sandbox.items() if k != "properties"} == {
        k: v for k, v in base.items() if k != "properties"}
    assert {k: sandbox["properties"][k] for k in base["properties"]} == base["properties"]
    assert sandbox["required"] == ["test_code"]
    # The tool's base arguments, and sharding (docs/mcp.md).
    assert {"test_code", "project_dir", "device", "timeout_s", "shard"} == set(
        sandbox["properties"])
    assert listed["device_shell"].input_schema["required"] == ["device"]
    assert [t.uri_template for t in templates] == ["run://{id}"]


async def test_devices_shell_logcat_and_screenshot(rig: Rig) -> None:
    async with rig.session() as session:
        devices = _data(await session.call_tool("list_devices", {}))["devices"]
        # The handle to pass as `device`: the bare serial while only one bridge has it.
        assert [d["id"] for d in devices] == [rig.sim.address]
        assert [d["qualified_id"] for d in devices] == [rig.device_id]
        assert devices[0]["state"] == "device"

        shell = _data(await session.call_tool(
            "device_shell", {"device": rig.sim.address, "argv": ["echo", "over", "mcp"]}
        ))
        assert shell == {"exit_code": 0, "stdout": "over mcp\n", "stderr": ""}

        refused = _error(await session.call_tool(
            "device_shell", {"device": rig.device_id, "command": "echo hi; reboot"}
        ))
        assert refused["code"] == "forbidden"
        assert refused["rule"]  # the policy rule that refused it, as REST gives it

        bad = _error(await session.call_tool("device_shell", {"device": rig.device_id}))
        assert bad["code"] == "bad_request"

        logcat = _data(await session.call_tool(
            "logcat_dump", {"device": rig.device_id, "lines": 50}
        ))
        assert any("over mcp" in line for line in logcat["lines"])

        shot = await session.call_tool("screenshot", {"device": rig.device_id})
        assert not shot.is_error
        [image] = [c for c in shot.content if isinstance(c, types.ImageContent)]
        assert image.mime_type == "image/png"
        assert _data(shot)["mime_type"] == "image/png" and _data(shot)["width"] > 0
        assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")

    ok = await _audit(rig, "mcp.device_shell")
    assert {(e.outcome, e.device) for e in ok} >= {("ok", rig.device_id), ("forbidden", None)}
    assert any(e.outcome == "forbidden" and e.detail.get("rule") for e in ok)
    assert {e.actor for e in ok} == {"admin"}
    assert [e.outcome for e in await _audit(rig, "mcp.screenshot")] == ["ok"]
    assert [e.outcome for e in await _audit(rig, "mcp.list_devices")] == ["ok"]
    # The device RPC itself is audited by the hub, as for REST.
    assert any(e.device == rig.device_id for e in await _audit(rig, "device.shell"))


async def test_sandbox_runs_and_their_resources(rig: Rig) -> None:
    stages: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        stages.append((done, message))

    async with rig.session() as session:
        blocking = _data(await session.call_tool(
            "sandbox_executor",
            {"test_code": llm_style_test("loadSettingsFromDisk()"), "device": rig.device_id},
            read_timeout_seconds=4 * WAIT_S,
            progress_callback=progress,
        ))
        assert blocking["verification_status"] == "CONFIRMED"
        # The run's stages arrived as progress notifications, in order, before the result.
        assert [n for n, _ in stages] == sorted(n for n, _ in stages)
        messages = [m or "" for _, m in stages]
        assert any(m.startswith("compiling") for m in messages)
        assert any(m.startswith("running") for m in messages), messages
        assert blocking["summary"].startswith("StrictMode violations: DiskRead | ")
        fast = _data(await session.call_tool(
            "sandbox_executor", {"test_code": llm_style_test("loadAvatarAsync()")},
            read_timeout_seconds=4 * WAIT_S,
        ))
        assert fast["verification_status"] == "REFUTED"

        run = _data(await session.call_tool("get_run", {"run_id": blocking["run_id"]}))
        assert run["id"] == blocking["run_id"] and run["verdict"] == "CONFIRMED"
        assert run["result"]["summary"] == blocking["summary"]
        assert run["steps"], "the step log comes with the run"

        resources = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {f"run://{blocking['run_id']}", f"run://{fast['run_id']}"} <= resources
        read = await session.read_resource(f"run://{fast['run_id']}")
        [contents] = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert contents.mime_type == "application/json"
        assert json.loads(contents.text)["verdict"] == "REFUTED"

        missing = _error(await session.call_tool("get_run", {"run_id": "nosuchrun"}))
        assert missing["code"] == "not_found"
        with pytest.raises(MCPError) as unknown:
            await session.read_resource("run://nosuchrun")
        assert unknown.value.error.code == -32002  # MCP's "resource not found"
        extra = _error(await session.call_tool(
            "sandbox_executor", {"test_code": "x", "apks": {"app": "", "test": ""}}
        ))
        assert extra["code"] == "bad_request"

    audited = await _audit(rig, "mcp.sandbox_executor")
    by_run = {e.detail.get("run_id"): e for e in audited if e.outcome == "ok"}
    assert by_run[blocking["run_id"]].detail["verdict"] == "CONFIRMED"
    assert by_run[blocking["run_id"]].device == rig.device_id


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthorized"),
        (bearer("dw_u_not-a-real-token"), 401, "unauthorized"),
        ({"Authorization": "Basic YWRtaW46YWRtaW4="}, 401, "unauthorized"),
    ],
)
async def test_bad_credentials_are_refused_before_any_session(
    rig: Rig, headers: dict[str, str], status: int, code: str
) -> None:
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        response = await http.post(
            rig.mcp_url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}
        )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "mcp-session-id" not in response.headers


async def test_bridge_tokens_and_tokens_in_urls_are_refused(rig: Rig) -> None:
    bridge_token = await rig.controller.bridge_token("other-bridge")
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        as_bridge = await http.post(
            rig.mcp_url, json=INITIALIZE, headers={**MCP_HEADERS, **bearer(bridge_token)}
        )
        in_url = await http.post(
            rig.mcp_url + "?token=x", json=INITIALIZE,
            headers={**MCP_HEADERS, **bearer(ADMIN_TOKEN)},
        )
        # Exactly /mcp answers (no redirect), with a real MCP response for a good token.
        good = await http.post(
            rig.mcp_url, json=INITIALIZE, headers={**MCP_HEADERS, **bearer(ADMIN_TOKEN)}
        )
    assert as_bridge.status_code == 403
    assert as_bridge.json()["error"]["rule"] == "bridge_token"
    assert in_url.status_code == 400
    assert in_url.json()["error"]["rule"] == "token_in_url"
    assert good.status_code == 200, good.text
    assert "serverInfo" in good.text


async def test_the_sdk_client_with_a_wrong_token_gets_no_session(rig: Rig) -> None:
    with pytest.raises(ExceptionGroup) as caught:  # the SDK's task groups wrap the error
        async with rig.session("dw_u_wrong") as session:
            await session.list_tools()
    assert caught.group_contains(MCPError, match="error response")


async def test_a_borrower_sees_and_uses_only_what_is_lent(rig: Rig) -> None:
    bob = await rig.user_token("bob")
    async with rig.session(bob) as session:
        assert _data(await session.call_tool("list_devices", {}))["devices"] == []
        for tool, args in [
            ("device_shell", {"device": rig.device_id, "command": "echo hi"}),
            ("device_shell", {"device": rig.sim.address, "command": "echo hi"}),
            ("logcat_dump", {"device": rig.device_id}),
            ("screenshot", {"device": rig.device_id}),
        ]:
            assert _error(await session.call_tool(tool, args))["code"] == "not_found", tool
        run = _data(await session.call_tool(
            "sandbox_executor", {"test_code": llm_style_test("loadAvatarAsync()"),
                                 "device": rig.device_id},
            read_timeout_seconds=4 * WAIT_S,
        ))
        assert run["verification_status"] == "PENDING"
        assert run["reason_code"] == "no_device"

        grant = await rig.controller.http.post(
            "/v1/grants", json={"device": rig.device_id, "user": "bob"}
        )
        assert grant.status_code == 201, grant.text
        devices = _data(await session.call_tool("list_devices", {}))["devices"]
        assert [d["qualified_id"] for d in devices] == [rig.device_id]
        shell = _data(await session.call_tool(
            "device_shell", {"device": rig.device_id, "command": "echo lent"}
        ))
        assert shell["stdout"] == "lent\n"

        revoked = await rig.controller.http.delete(f"/v1/grants/{grant.json()['id']}")
        assert revoked.status_code in (200, 204), revoked.text
        again = await session.call_tool("device_shell", {"device": rig.device_id,
                                                         "command": "echo hi"})
        assert _error(again)["code"] == "not_found"  # at once, same session

    async with rig.session() as admin:
        admin_run = _data(await admin.call_tool(
            "sandbox_executor", {"test_code": llm_style_test("loadAvatarAsync()")},
            read_timeout_seconds=4 * WAIT_S,
        ))
    async with rig.session(bob) as session:
        # Someone else's run is not disclosed, as a tool or as a resource.
        hidden = await session.call_tool("get_run", {"run_id": admin_run["run_id"]})
        assert _error(hidden)["code"] == "not_found"
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert f"run://{admin_run['run_id']}" not in listed
    refusals = [e for e in await _audit(rig, "mcp.device_shell") if e.actor == "bob"]
    assert [e.outcome for e in refusals].count("not_found") >= 2


async def test_scopes_limit_what_a_token_can_do_over_mcp(rig: Rig) -> None:
    response = await rig.controller.http.post(
        "/v1/tokens", json={"kind": "user", "name": "admin", "scopes": ["devices:read"]}
    )
    assert response.status_code == 201, response.text
    reader = response.json()["token"]
    async with rig.session(reader) as session:
        devices = _data(await session.call_tool("list_devices", {}))["devices"]
        assert [d["qualified_id"] for d in devices] == [rig.device_id]
        shell = _error(await session.call_tool(
            "device_shell", {"device": rig.device_id, "command": "echo hi"}
        ))
        assert (shell["code"], shell["rule"]) == ("forbidden", "missing_scope")
        run = _error(await session.call_tool("sandbox_executor", {"test_code": "x"}))
        assert (run["code"], run["rule"]) == ("forbidden", "missing_scope")


async def test_unknown_tools_and_a_revoked_token(rig: Rig) -> None:
    created = await rig.controller.http.post("/v1/tokens", json={"kind": "user", "name": "carol"})
    assert created.status_code == 201, created.text
    carol, token_id = created.json()["token"], created.json()["id"]
    async with rig.session(carol) as session:
        # An unknown tool is a protocol error (JSON-RPC -32602), not a tool's failure.
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("format_phone", {})
        assert unknown.value.error.code == -32602
        assert "format_phone" in unknown.value.error.message
    assert (await rig.controller.http.delete(f"/v1/tokens/{token_id}")).status_code == 204
    async with httpx2.AsyncClient(timeout=WAIT_S) as http:
        after = await http.post(
            rig.mcp_url, json=INITIALIZE, headers={**MCP_HEADERS, **bearer(carol)}
        )
    assert after.status_code == 401
