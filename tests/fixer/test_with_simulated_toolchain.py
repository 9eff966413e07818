"""The loop against the simulated toolchain's real-format output (docs/design.md §8), no LLM."""

from __future__ import annotations

from pathlib import Path

from device_bridge.sim.toolchain import SimulatedToolchain
from fixer import SourceCodeIndex, compile_fix_loop, parse_errors

WORKSPACE = Path(__file__).resolve().parents[2] / "gradle-workspace"

DRAFT = """\
package com.droidwire.demo

@RunWith(AndroidJUnit4::class)
class DraftTest {
    @Test
    fun loadsSettings() {
        val scenario = ActivityScenario.launch(MainActivity::class.java)
        scenario.onActivity { activity ->
            val start = SystemClock.uptimeMillis()
            activity.loadSettingsFromDisk()
            Log.d("DraftTest", "elapsed=" + (SystemClock.uptimeMillis() - start))
        }
    }
}
"""


def test_rules_make_a_draft_compile_on_the_simulated_toolchain() -> None:
    sim = SimulatedToolchain()

    def compile_fn(code: str) -> tuple[bool, str]:
        result = sim.compile(WORKSPACE, code)
        return result.ok, result.output

    ok, output = compile_fn(DRAFT)
    report = parse_errors(output)
    assert not ok and report.failure == "compile"
    assert {"RunWith", "AndroidJUnit4", "Test", "ActivityScenario", "SystemClock", "Log"} <= {
        e.symbol for e in report.compile_errors
    }
    assert all(
        e.file and e.file.endswith("/DraftTest.kt") and e.line and e.column for e in report.errors
    )

    result = compile_fix_loop(DRAFT, compile_fn, SourceCodeIndex(WORKSPACE / "app" / "src"), None)
    assert result.ok and result.stop_reason == "compiled"
    assert [r.fixer for r in result.rounds] == [None, "rules"]
