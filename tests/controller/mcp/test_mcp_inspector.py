"""MCP Inspector's CLI (the reference client of the MCP project, in Node) against ``/mcp``:
``tools/list`` and ``tools/call`` with a Bearer header, and a wrong token's 401 reported as
the 401's own message (with ``--stored-auth-only``, as a script or CI job runs it: off a
terminal the CLI would otherwise want to start an interactive OAuth flow on any 401).

The CLI is ``@modelcontextprotocol/inspector`` at :data:`VERSION`, installed with npm once
into droidwire's cache folder (``<cache>/mcp-inspector/VERSION``). Without node/npm or the
npm registry the test is skipped, except in CI, where it fails.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from device_bridge.kotlinc.install import cache_dir
from tests.conftest import TIME_SCALE, require_or_skip
from tests.controller.conftest import ADMIN_TOKEN
from tests.controller.mcp.conftest import Rig

pytestmark = pytest.mark.adb

VERSION = "2.12.0"
PACKAGE = f"@modelcontextprotocol/inspector@{VERSION}"
INSTALL_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 120.0 * TIME_SCALE


def _inspector() -> Path:
    home = cache_dir() / "mcp-inspector" / VERSION
    binary = home / "node_modules" / ".bin" / "mcp-inspector"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    require_or_skip(npm is not None and shutil.which("node") is not None,
                    "node and npm are needed for MCP Inspector's CLI")
    assert npm is not None
    home.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(home), PACKAGE],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        done = None
    require_or_skip(done is not None and done.returncode == 0 and binary.exists(),
                    f"npm could not install {PACKAGE}: "
                    f"{(done.stderr[-500:] if done is not None else 'timed out')}")
    return binary


@pytest.fixture(scope="module")
def inspector() -> Path:
    return _inspector()


async def _cli(inspector: Path, url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(inspector), "--cli", url, "--transport", "http",
            "--header", f"Authorization: Bearer {token}", *args]
    return await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S,
        check=False, stdin=subprocess.DEVNULL,
    )


async def test_inspector_lists_and_calls_tools(rig: Rig, inspector: Path) -> None:
    listed = await _cli(inspector, rig.mcp_url, ADMIN_TOKEN, "--method", "tools/list")
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert {"list_devices", "device_shell", "device_state"} <= set(tools)
    assert all(t.get("outputSchema", {}).get("type") == "object" for t in tools.values())
    assert tools["device_shell"]["annotations"]["destructiveHint"] is True

    called = await _cli(inspector, rig.mcp_url, ADMIN_TOKEN, "--method", "tools/call",
                        "--tool-name", "device_shell", "--tool-arg", f"device={rig.sim.address}",
                        "--tool-arg", "command=echo inspected")
    assert called.returncode == 0, called.stdout[-2000:] + called.stderr[-2000:]
    result = json.loads(called.stdout)
    assert result["structuredContent"] == {"exit_code": 0, "stdout": "inspected\n", "stderr": ""}

    devices = await _cli(inspector, rig.mcp_url, ADMIN_TOKEN, "--method", "tools/call",
                         "--tool-name", "list_devices")
    assert devices.returncode == 0, devices.stdout[-2000:] + devices.stderr[-2000:]
    assert [d["id"] for d in json.loads(devices.stdout)["structuredContent"]["devices"]] == [
        rig.sim.address]


async def test_inspector_reports_the_401s_message(rig: Rig, inspector: Path) -> None:
    refused = await _cli(inspector, rig.mcp_url, "dw_u_not-a-token", "--stored-auth-only",
                         "--method", "tools/list")
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    # Off a terminal, --stored-auth-only (docs/mcp.md): the reason is the 401's own.
    assert "TTY" not in said, said[-2000:]
    assert "invalid or revoked token" in said, said[-2000:]
