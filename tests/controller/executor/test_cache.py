"""The controller's APK cache: a test fanned out to two devices compiles once, and the same
test again compiles not at all; the second device's bridge need not build."""

from __future__ import annotations

import pytest

from controller.executor import ApkCache, CompiledTest, ExecuteRequest, SandboxExecutor, cache_key
from controller.store import Store
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from tests.adb_support import AdbServer, connected_sim
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test

pytestmark = pytest.mark.adb


async def test_one_compile_serves_every_device(
    adb_server: AdbServer, gateway: LocalGateway, store: Store
) -> None:
    with connected_sim(adb_server, profile="galaxy-a52") as second:
        # The second device hangs off a bridge that cannot build (a Raspberry Pi).
        pi = Dispatcher(policy=Policy(PolicyConfig()), devices=gateway.dispatchers["desk"].devices)
        gateway.add_bridge("pi", pi, [second.address])
        executor = SandboxExecutor(gateway, store, settings=SETTINGS)
        request = ExecuteRequest(test_code=llm_style_test("loadSettingsFromDisk()"), device="all")

        results = await executor.execute(request)
        assert {r.device["bridge"] for r in results} == {"desk", "pi"}
        assert all(r.verification_status == "CONFIRMED" for r in results)
        assert len({r.run_id for r in results}) == 2
        assert gateway.calls.count(("desk", "workspace.compile")) == 1
        installs = [t for t, m in gateway.calls if m == "device.install"]
        assert len(installs) == 4 and sum("pi~" in t for t in installs) == 2

        gateway.calls.clear()
        again = await executor.execute(request)
        assert all(r.verification_status == "CONFIRMED" for r in again)
        assert "workspace.compile" not in gateway.methods_called()
        assert executor.cache.hits >= 1 and len(executor.cache) == 1


def test_cache_is_keyed_by_project_and_code_and_bounded() -> None:
    assert cache_key(None, "a") != cache_key("shop", "a") != cache_key(None, "b")
    cache = ApkCache(max_bytes=10)
    from protocol.methods import Apk

    def entry(n: int) -> CompiledTest:
        return CompiledTest(ok=True, toolchain="simulated",
                            app_apk=Apk.from_bytes("app", "a.apk", b"x" * n),
                            test_apk=Apk.from_bytes("test", "t.apk", b"y"), code="")
    cache.put("k1", entry(4))
    cache.put("k2", entry(4))
    assert cache.get("k1") is not None and cache.get("k2") is not None
    cache.put("k3", entry(4))  # over 10 bytes: the least recently used (k1) goes
    assert cache.get("k1") is None and cache.get("k3") is not None
    cache.put("bad", CompiledTest(ok=False, toolchain=None, app_apk=None, test_apk=None, code=""))
    assert cache.get("bad") is None


async def test_prebuilt_apks_skip_the_compile(executor: SandboxExecutor, gateway: LocalGateway) -> None:
    import base64
    from pathlib import Path

    from device_bridge.sim.toolchain import SimulatedToolchain
    from device_bridge.workspace_template import template_dir

    built = SimulatedToolchain().compile(Path(template_dir()), llm_style_test("saveDraftSync()"))
    assert built.ok and built.app_apk and built.test_apk
    apks = {"app": base64.b64encode(built.app_apk).decode(),
            "test": base64.b64encode(built.test_apk).decode()}
    [result] = await executor.execute(
        ExecuteRequest.model_validate({"test_code": "prebuilt", "apks": apks})
    )
    assert result.verification_status == "CONFIRMED", result.summary
    assert "DiskWrite" in result.summary
    assert "workspace.compile" not in gateway.methods_called()
    assert result.compile_rounds == [] and result.toolchain is None
