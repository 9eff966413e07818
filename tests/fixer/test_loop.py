"""The compile → fix → compile loop, with a fake compiler (the loop's input, not our component)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from fixer.loop import compile_fix_loop, compile_fix_loop_async
from fixer.source_index import SourceCodeIndex

SAMPLE = Path(__file__).parent / "sample_project"
PATH = "/ws/app/src/androidTest/java/com/example/demo/LoopTest.kt"

NEEDS_IMPORTS = """\
package com.example.demo

class LoopTest {
    @Test
    fun t() {
        Log.d("t", "x")
    }
}
"""


class FakeKotlinc:
    """Reports every name in ``required`` as unresolved until the code imports it."""

    def __init__(self, required: Mapping[str, str], *, extra_error: str | None = None):
        self.required = dict(required)
        self.extra_error = extra_error
        self.seen: list[str] = []

    def __call__(self, code: str) -> tuple[bool, str]:
        self.seen.append(code)
        lines = []
        for name, path in self.required.items():
            if f"import {path}" not in code:
                line = next(
                    i for i, x in enumerate(code.splitlines(), 1) if re.search(rf"\b{name}\b", x)
                )
                lines.append(f"e: file://{PATH}:{line}:9 Unresolved reference '{name}'.")
        if self.extra_error and self.extra_error not in code:
            lines.append(f"e: file://{PATH}:6:9 Unresolved reference 'mystery'.")
        if not lines:
            return True, "BUILD SUCCESSFUL in 2s\n"
        return False, "\n".join(
            ["> Task :app:compileDebugAndroidTestKotlin FAILED", *lines, "BUILD FAILED in 2s"]
        )


REQUIRED = {"Test": "org.junit.Test", "Log": "android.util.Log"}


@pytest.fixture(scope="module")
def index() -> SourceCodeIndex:
    return SourceCodeIndex(SAMPLE)


def test_rules_fix_then_it_compiles(index: SourceCodeIndex) -> None:
    compiler = FakeKotlinc(REQUIRED)
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, None)
    assert result.ok and result.stop_reason == "compiled"
    assert len(compiler.seen) == 2
    first, second = result.rounds
    assert (first.round, first.ok, first.fixer, first.diff) == (1, False, None, "")
    assert {e.symbol for e in first.errors} == {"Test", "Log"}
    assert (second.round, second.ok, second.fixer, second.errors) == (2, True, "rules", [])
    assert "+import android.util.Log" in second.diff
    assert result.code == compiler.seen[-1]
    assert [r["round"] for r in result.compile_rounds] == [1, 2]
    assert set(result.compile_rounds[0]) >= {"round", "ok", "errors", "fixer"}


def test_already_compiling_code_is_compiled_once(index: SourceCodeIndex) -> None:
    compiler = FakeKotlinc({})
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, None)
    assert result.ok and len(result.rounds) == 1 and result.code == NEEDS_IMPORTS


def test_stops_when_no_fixer_can_act(index: SourceCodeIndex) -> None:
    compiler = FakeKotlinc({}, extra_error="never-present")
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, None)
    assert not result.ok and result.stop_reason == "no_fix"
    assert len(compiler.seen) == 1
    assert result.rounds[0].note == "no LLM configured"


def test_stops_on_build_config_without_fixing(index: SourceCodeIndex) -> None:
    calls: list[str] = []

    def compiler(code: str) -> tuple[bool, str]:
        calls.append(code)
        return False, "* What went wrong:\nSDK location not found.\n\nBUILD FAILED in 1s\n"

    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, None)
    assert result.stop_reason == "build_config" and len(calls) == 1
    assert result.rounds[0].failure == "build_config"


class ScriptedLlm:
    """A ChatCompleter returning canned replies (the HTTP path is tested in test_fix_llm)."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.calls: list[Sequence[Mapping[str, str]]] = []

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        self.calls.append(messages)
        return self.replies.pop(0)


def _bump(code: str, n: int) -> str:
    return code.replace("fun t()", f"fun t{n}()")


def test_stops_when_errors_repeat_unchanged(index: SourceCodeIndex) -> None:
    compiler = FakeKotlinc({}, extra_error="never-present")
    llm = ScriptedLlm(*(f"```kotlin\n{_bump(NEEDS_IMPORTS, n)}```" for n in range(5)))
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, llm)
    assert result.stop_reason == "unchanged_errors"
    assert len(compiler.seen) == 2 and len(llm.calls) == 1
    assert result.rounds[1].fixer == "llm"


def test_at_most_three_fix_rounds(index: SourceCodeIndex) -> None:
    n = 0

    def compiler(code: str) -> tuple[bool, str]:
        nonlocal n
        n += 1  # a different error each time: never "unchanged"
        return False, f"e: file://{PATH}:6:9 Unresolved reference 'missing{n}'.\n"

    llm = ScriptedLlm(*(f"```kotlin\n{_bump(NEEDS_IMPORTS, k)}```" for k in range(10)))
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, llm, max_rounds=3)
    assert result.stop_reason == "max_rounds" and not result.ok
    assert n == 4 and len(llm.calls) == 3
    assert [r.round for r in result.rounds] == [1, 2, 3, 4]
    assert [r.fixer for r in result.rounds] == [None, "llm", "llm", "llm"]


def test_rules_then_llm_then_success(index: SourceCodeIndex) -> None:
    compiler = FakeKotlinc(REQUIRED, extra_error="// mystery solved")
    solved = (
        "package com.example.demo\n\nimport android.util.Log\nimport org.junit.Test\n\n"
        'class LoopTest {\n    @Test\n    fun t() {\n        Log.d("t", "x") // mystery solved\n    }\n}\n'
    )
    llm = ScriptedLlm(f"```kotlin\n{solved}```")
    result = compile_fix_loop(NEEDS_IMPORTS, compiler, index, llm)
    assert result.ok and [r.fixer for r in result.rounds] == [None, "llm"]
    assert result.rounds[1].changes == ["import org.junit.Test", "import android.util.Log"]
    # The LLM saw the rule-fixed code and only the error no rule addressed.
    prompt = llm.calls[0][-1]["content"]
    assert "import android.util.Log" in prompt and "mystery" in prompt and "'Log'" not in prompt


def test_sync_loop_refuses_an_async_compiler(index: SourceCodeIndex) -> None:
    async def compiler(code: str) -> tuple[bool, str]:
        return True, ""

    with pytest.raises(TypeError, match="compile_fix_loop_async"):
        compile_fix_loop(NEEDS_IMPORTS, compiler, index, None)  # type: ignore[arg-type]


async def test_async_loop_with_async_compiler(index: SourceCodeIndex) -> None:
    fake = FakeKotlinc(REQUIRED)

    async def compiler(code: str) -> tuple[bool, str]:
        await asyncio.sleep(0)
        return fake(code)

    result = await compile_fix_loop_async(NEEDS_IMPORTS, compiler, index, None)
    assert result.ok and [r.fixer for r in result.rounds] == [None, "rules"]
    assert len(fake.seen) == 2


async def test_async_loop_accepts_a_sync_compiler(index: SourceCodeIndex) -> None:
    result = await compile_fix_loop_async(NEEDS_IMPORTS, FakeKotlinc(REQUIRED), index, None)
    assert result.ok and len(result.rounds) == 2
