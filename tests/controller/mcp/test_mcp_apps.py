"""Apps through MCP against the real bridge and the simulated phone: install (base64), list,
launch, uninstall; a borrower without a grant gets not_found, as over REST."""

from __future__ import annotations

import base64

from device_bridge.sim.apk import SimPackage, build_apk
from tests.controller.mcp.conftest import Rig, rig  # noqa: F401 - fixture
from tests.controller.mcp.test_mcp_e2e import _data, _error

PACKAGE = "com.example.mcpapp"
APK = base64.b64encode(build_apk(SimPackage(package=PACKAGE, kind="app"))).decode()


async def test_install_list_launch_uninstall(rig: Rig) -> None:  # noqa: F811
    device = rig.device_id
    async with rig.session() as session:
        installed = _data(await session.call_tool(
            "install_app", {"device": device, "apk_base64": APK}))
        assert installed == {"package": PACKAGE, "replaced": False}
        apps = _data(await session.call_tool("list_apps", {"device": device}))["apps"]
        assert {"package": PACKAGE, "managed": True, "yours": False} in apps
        launched = _data(await session.call_tool(
            "app_action", {"device": device, "package": PACKAGE, "action": "launch"}))
        assert launched["ok"] is True
        assert rig.sim.call(lambda: PACKAGE in rig.sim.device.processes)
        _data(await session.call_tool(
            "app_action", {"device": device, "package": PACKAGE, "action": "uninstall"}))
        assert rig.sim.call(lambda: PACKAGE not in rig.sim.device.packages)
        bad = _error(await session.call_tool("install_app", {"device": device, "apk_base64": "@@"}))
        assert bad["code"] == "bad_request"
    stranger = await rig.user_token("mallory")
    async with rig.session(stranger) as session:
        refused = _error(await session.call_tool("list_apps", {"device": device}))
        assert refused["code"] == "not_found"
