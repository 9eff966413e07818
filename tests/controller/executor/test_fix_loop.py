"""The compile → fix → recompile loop inside a sandbox run: the rule fixer, an LLM over real
HTTP (the scripted OpenAI-compatible server), and a draft that never compiles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.executor import ExecuteRequest, SandboxExecutor
from controller.store import Store
from fixer import LlmClient, LlmSettings
from tests.conftest import TIME_SCALE
from tests.controller.executor.conftest import SETTINGS
from tests.controller.executor.support import LocalGateway, llm_style_test
from tests.llm_server import LlmServer

pytestmark = pytest.mark.adb


@pytest.fixture
def llm_server() -> Iterator[LlmServer]:
    with LlmServer() as server:
        yield server


def llm_client(server: LlmServer) -> LlmClient:
    return LlmClient(LlmSettings(model="gpt-test", base_url=server.base_url, api_key="test",
                                 max_attempts=1, timeout_s=20.0 * TIME_SCALE))


def fenced(code: str) -> str:
    return f"Here is the fixed test:\n```kotlin\n{code}```\n"


async def test_missing_import_is_fixed_by_the_rules(
    executor: SandboxExecutor, gateway: LocalGateway
) -> None:
    draft = llm_style_test("loadSettingsFromDisk()").replace("import android.util.Log\n", "")
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.verification_status == "CONFIRMED", result.summary
    rounds = result.compile_rounds
    assert [(r["round"], r["ok"], r["fixer"]) for r in rounds] == [(1, False, None), (2, True, "rules")]
    assert {e["symbol"] for e in rounds[0]["errors"]} == {"Log"}  # both Log calls
    # Paths relative to the project: the bridge host's working copy is not the caller's business.
    assert {e["file"] for e in rounds[0]["errors"]} == {
        "app/src/androidTest/java/com/droidwire/demo/test/GeneratedBlockingTest.kt"
    }
    assert "+import android.util.Log" in rounds[1]["diff"]
    assert gateway.methods_called().count("workspace.compile") == 2


async def test_llm_fixes_what_the_rules_cannot(
    gateway: LocalGateway, store: Store, llm_server: LlmServer
) -> None:
    good = llm_style_test("decodeThumbnail()")
    draft = good.replace("activity.decodeThumbnail()", "activity.decodeThumbnail(true)")
    llm_server.enqueue(fenced(good))
    executor = SandboxExecutor(gateway, store, settings=SETTINGS, llm=llm_client(llm_server))
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.verification_status == "PARTIAL", result.summary
    assert [r["fixer"] for r in result.compile_rounds] == [None, "llm"]
    [request] = llm_server.completions
    prompt = request.json["messages"][-1]["content"]
    assert "Too many arguments" in prompt
    # The method's body came from the build bridge through source.lookup.
    assert "source.lookup" in gateway.methods_called()
    assert "fun decodeThumbnail(): String" in prompt and "hashUntil(" in prompt


async def test_compile_failed_after_three_fix_rounds(
    gateway: LocalGateway, store: Store, llm_server: LlmServer
) -> None:
    good = llm_style_test("formatTitle(\"inbox\", 3)")
    drafts = [good.replace("activity.formatTitle(", f"activity.formatTitle{i}(") for i in range(4)]
    llm_server.enqueue(*(fenced(d) for d in drafts[1:]))
    executor = SandboxExecutor(gateway, store, settings=SETTINGS, llm=llm_client(llm_server))
    [result] = await executor.execute(ExecuteRequest(test_code=drafts[0]))
    assert result.verification_status == "PENDING"
    assert result.reason_code == "compile_failed"
    assert result.summary.startswith("Sandbox unavailable: compile_failed")
    assert [r["round"] for r in result.compile_rounds] == [1, 2, 3, 4]
    assert [r["fixer"] for r in result.compile_rounds] == [None, "llm", "llm", "llm"]
    assert not any(r["ok"] for r in result.compile_rounds)
    methods = gateway.methods_called()
    assert methods.count("workspace.compile") == 4
    assert not any(m.startswith("device.") for m in methods)  # nothing ran on the device


async def test_no_fix_without_an_llm_stops_early(
    executor: SandboxExecutor, gateway: LocalGateway, store: Store
) -> None:
    from sqlalchemy import select

    from controller.store import RunStep

    draft = llm_style_test("decodeThumbnail(true)")  # wrong arguments: no rule fixes that
    [result] = await executor.execute(ExecuteRequest(test_code=draft))
    assert result.reason_code == "compile_failed"
    assert "no fix found" in result.summary
    assert len(result.compile_rounds) == 1
    assert gateway.methods_called().count("workspace.compile") == 1
    async with store.session() as session:
        steps = (await session.execute(
            select(RunStep).where(RunStep.run_id == result.run_id).order_by(RunStep.seq)
        )).scalars().all()
    [fix] = [s for s in steps if s.kind == "fix"]
    assert fix.status == "failed" and "no LLM" in fix.detail["note"]
