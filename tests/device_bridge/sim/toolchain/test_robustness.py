"""Bad input never crashes the toolchain or the player: a result or a typed refusal."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from device_bridge.sim.apk import read_apk
from device_bridge.sim.player import SimInstrumentationPlayer
from device_bridge.sim.toolchain import CompileResult, SimulatedToolchain, ToolchainError

from .helpers import PROJECT, RecordingDevice, kotlin, llm_test

BASE = kotlin(llm_test("loadSettingsFromDisk"))
TOOLCHAIN = SimulatedToolchain()


def _compile_and_maybe_play(source: str) -> None:
    try:
        result = TOOLCHAIN.compile(PROJECT, source)
    except ToolchainError:
        return
    assert isinstance(result, CompileResult)
    if result.ok:
        assert result.test_apk is not None and result.app_apk is not None
        device = RecordingDevice()
        out = list(SimInstrumentationPlayer().play(
            read_apk(result.test_apk), read_apk(result.app_apk), class_filter=None,
            device=device))
        assert out[-1].startswith("INSTRUMENTATION_CODE: ")
    else:
        assert result.errors and all(e.startswith("e: file://") for e in result.errors)
        assert "BUILD FAILED" in result.output


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_tests(data: st.DataObject) -> None:
    source = BASE
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(source) - 1))
        action = data.draw(st.sampled_from(["delete", "insert", "dup"]))
        if action == "delete":
            source = source[:i] + source[i + data.draw(st.integers(1, 12)):]
        elif action == "insert":
            source = source[:i] + data.draw(st.sampled_from(
                ["{", "}", "(", ")", '"', "$", "\n", "@Test fun x() {", "throw ", "repeat(99) {",
                 "`", "/*", "import a.b.C\n", "activity.", "é", "\x00"])) + source[i:]
        else:
            j = data.draw(st.integers(i, min(len(source), i + 80)))
            source = source[:j] + source[i:j] + source[j:]
    _compile_and_maybe_play(source)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    _compile_and_maybe_play("package com.droidwire.demo\n" + text)


def test_nested_loops_are_bounded() -> None:
    body = "repeat(50) { repeat(50) { repeat(50) { repeat(50) { activity.formatTitle() } } } }"
    source = kotlin(llm_test("formatTitle", body=body))
    result = TOOLCHAIN.compile(PROJECT, source)
    assert result.ok
    [test] = read_apk(result.test_apk).tests
    assert 0 < len(test.steps) <= 2_000
