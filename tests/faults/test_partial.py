"""Process faults, continued: a device lost in the middle of an instrumentation run.

The sandbox executor runs a two-test class through the bridge's real dispatcher, the real adb
server and a simulated device; right after the first test reports its result, the device
hangs and is then stopped (adb sees it go offline). The run must end — no exception, no hang —
with the first test's result kept, and be stored.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.executor import ExecuteRequest, SandboxExecutor
from controller.store import Store
from device_bridge.adb import AdbDevices
from device_bridge.policy import Policy, PolicyConfig
from device_bridge.rpc import Dispatcher
from tests.adb_support import AdbServer, connected_sim
from tests.conftest import TIME_SCALE
from tests.controller.executor.conftest import SETTINGS as EXECUTOR_SETTINGS
from tests.controller.executor.conftest import build_service
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.faults.figures import record
from tests.faults.timing import WAIT_S

pytestmark = pytest.mark.adb

AREA = "process faults"


def _hang_after_first_test(device: Any, first_done: threading.Event) -> None:
    """Wrap the device's instrumentation: after the first test's result, it hangs."""
    original = device.instrument

    async def instrument(component: str, *, class_filter: str | None) -> AsyncIterator[
            tuple[int, str]]:
        async for fd, text in original(component, class_filter=class_filter):
            yield fd, text
            if "INSTRUMENTATION_STATUS_CODE: 0" in text and not first_done.is_set():
                first_done.set()
                await asyncio.Event().wait()  # the device stops answering mid-run

    device.instrument = instrument


class _Seen:
    """Wraps the bridge's instrumentation stream: ``received`` is set once the first test's
    result reached the bridge (so stopping the device cannot race the bytes in flight)."""

    def __init__(self, inner: Any, received: asyncio.Event) -> None:
        self._inner = inner
        self._received = received

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[Any]:
        async for batch in self._inner:
            if any("INSTRUMENTATION_STATUS_CODE: 0" in line for line in batch.lines):
                self._received.set()
            yield batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_device_lost_mid_instrumentation_keeps_the_finished_test(
    tmp_path: Path, adb_server: AdbServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_done = threading.Event()
    received = asyncio.Event()
    original_stream = AdbDevices.instrument_stream

    async def instrument_stream(self: AdbDevices, *args: Any, **kwargs: Any) -> Any:
        return _Seen(await original_stream(self, *args, **kwargs), received)

    monkeypatch.setattr(AdbDevices, "instrument_stream", instrument_stream)
    with connected_sim(adb_server) as sim:
        sim.call(lambda: _hang_after_first_test(sim.device, first_done))
        adb = AdbDevices(port=adb_server.port, call_timeout_s=30.0 * TIME_SCALE, flush_s=0.025)
        store = Store(f"sqlite:///{tmp_path / 'controller.db'}")
        await store.migrate()
        try:
            gateway = LocalGateway()
            gateway.add_bridge("desk", Dispatcher(policy=Policy(PolicyConfig()), devices=adb,
                                                  build=build_service(tmp_path / "ws")),
                               [sim.address])
            executor = SandboxExecutor(gateway, store, settings=EXECUTOR_SETTINGS)
            run = asyncio.create_task(executor.execute(
                ExecuteRequest(test_code=llm_style_test("loadSettingsFromDisk()"))))
            await asyncio.wait_for(received.wait(), WAIT_S * 2)
            assert first_done.is_set()
            await asyncio.to_thread(sim.sim.stop_device)
            [result] = await asyncio.wait_for(run, WAIT_S * 4)
        finally:
            await adb.aclose()
            await store.close()
    tests = result.tests
    kept = [t for t in tests if t["status"] == "passed"]
    record(AREA, "device stopped mid-instrumentation: finished tests kept",
           f"{len(kept)} of {len(tests)} reported")
    record(AREA, f"  run ended {result.verification_status} ({result.reason_code})",
           result.summary[:60])
    record(AREA, "  finished tests lost", 0 if kept else 1, must_be_zero=True)
    assert kept, {k: getattr(result, k) for k in ("tests", "summary", "reason_code", "issues")}
    assert result.run_id
