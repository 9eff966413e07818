"""Every demo method's verdict, end to end: the executor → the bridge's dispatcher → the real
adb server → the simulated device, with tests written the way an LLM writes them."""

from __future__ import annotations

import pytest

from controller.executor import ExecuteRequest, SandboxExecutor
from tests.executor.support import LocalGateway, llm_style_test

pytestmark = pytest.mark.adb


async def test_disk_read_is_confirmed(executor: SandboxExecutor, gateway: LocalGateway) -> None:
    [result] = await executor.execute(
        ExecuteRequest(test_code=llm_style_test("loadSettingsFromDisk()"))
    )
    print(result["summary"], result["compile_rounds"], result["tests"])
    assert result["verification_status"] == "CONFIRMED", result
    assert result["blocking_time_ms"] >= 300
    assert result["summary"].startswith("StrictMode violations: DiskRead")
