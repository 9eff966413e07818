"""The real Kotlin compiler: the warm service, the check, its corpus, and the stubs' drift.

All tests share the session's one warm compiler (``kotlinc_checker``, tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from device_bridge.kotlinc import (
    API_LEVEL,
    CompilerBusy,
    CompilerError,
    KotlincChecker,
    WarmCompiler,
)
from device_bridge.kotlinc.install import base_args, stubs_dir
from device_bridge.sim import toolchain_libraries as libs
from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace_template import template_dir
from droidwire.demo import DEMO_TESTS
from fixer.errors import parse_errors
from tests.device_bridge.kotlinc.corpus import cases, diagnostics, expected, place

TEMPLATE = Path(template_dir())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the demo project to write tests into (the template stays untouched)."""
    shutil.copytree(TEMPLATE, tmp_path / "p", ignore=shutil.ignore_patterns("stubs"))
    return tmp_path / "p"


# -- the corpus ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", cases(), ids=lambda p: p.stem)
def test_kotlinc_gives_the_recorded_diagnostics(
    case: Path, kotlinc_checker: KotlincChecker, project: Path
) -> None:
    result = kotlinc_checker.check(project, place(case, project), app_dir=TEMPLATE)
    assert diagnostics(result.output) == expected(case)
    assert result.ok == (not expected(case))
    assert result.api_level == API_LEVEL and result.unchecked == []
    # What the fixer reads out of it: every error, with its position, nothing more.
    report = parse_errors(result.output)
    assert len(report.compile_errors) == len(expected(case))
    assert report.failure == ("compile" if expected(case) else "none")


# Where the simulated toolchain still judges differently from kotlinc, and why (its limits are
# deliberate: it resolves names, it does not infer types; the kotlinc check runs in front of
# it whenever the compiler is set up).
SIM_LIMITS = {
    "TypeMismatchTest": "no type inference: a Boolean into a String is not seen",
    "NullabilityTest": "no type inference: nullable receivers are not tracked",
    "OverloadTest": "no overload resolution on library signatures",
    "CoroutineMisuseTest": "no suspend-context check",
}


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.stem)
def test_the_simulated_toolchain_is_held_against_kotlinc(case: Path, project: Path) -> None:
    sim = SimulatedToolchain().compile(project, case.read_text(), test_path=place(case, project))
    kotlinc_rejects = bool(expected(case))
    if case.stem in SIM_LIMITS:
        assert sim.ok, f"{case.stem} is now caught by the simulated toolchain: drop the limit"
        assert kotlinc_rejects
        return
    assert sim.ok == (not kotlinc_rejects), sim.output
    if kotlinc_rejects:  # the same names, at the same places
        sim_unresolved = {(e.line, e.symbol) for e in parse_errors(sim.output).compile_errors
                          if e.kind == "unresolved_reference"}
        real = {(e.line, e.symbol) for e in parse_errors(
            "\n".join(f"e: file:///x/{case.name}:{b}" for b in expected(case))).compile_errors
                if e.kind == "unresolved_reference"}
        assert real <= sim_unresolved, sim.output


# -- what the stubs model, held against the API the project uses --------------------------
def test_the_app_the_helpers_and_the_examples_compile_against_the_stubs(
    kotlinc_checker: KotlincChecker, project: Path
) -> None:
    examples = TEMPLATE / "app/src/androidTestExamples/java/com/droidwire/demo/examples"
    for source in examples.glob("*.kt"):
        result = kotlinc_checker.check(project, place(source, project), app_dir=TEMPLATE)
        assert result.ok and not result.unchecked, result.output


@pytest.mark.parametrize("demo", DEMO_TESTS[::2], ids=lambda d: d.code.split("class ")[1][:20])
def test_the_demo_tests_compile(
    demo: object, kotlinc_checker: KotlincChecker, project: Path, tmp_path: Path
) -> None:
    code = demo.code  # type: ignore[attr-defined]
    cls = code.split("class ", 1)[1].split(" ", 1)[0]
    source = tmp_path / f"{cls}.kt"
    source.write_text(code)
    result = kotlinc_checker.check(project, place(source, project), app_dir=TEMPLATE)
    assert result.ok and not result.unchecked, result.output


def _stub_import_lines() -> list[str]:
    """An import for each androidx.test / coroutines-test name the project's library table
    (device_bridge.sim.toolchain_libraries) says generated tests use."""
    lines = []
    for package, names in sorted(libs.PACKAGES.items()):
        if not package.startswith(("androidx.test", "kotlinx.coroutines.test")):
            continue
        lines += [f"import {package}.{n}" for n in sorted(names) if n.isidentifier()]
    return lines


# Names of the library table that the stubs leave out on purpose: each is reported as "not
# checked" (a warning), never as an error. The list is the stubs' documented gap
# (docs/sandbox.md); the test below fails when the two drift apart in either direction.
UNSTUBBED = frozenset(
    """
    androidx.test.core.app.DeviceCapture androidx.test.core.app.takeScreenshot
    androidx.test.espresso.DataInteraction androidx.test.espresso.IdlingRegistry
    androidx.test.espresso.IdlingResource androidx.test.espresso.PerformException
    androidx.test.espresso.Root androidx.test.espresso.Espresso.onData
    androidx.test.espresso.Espresso.openActionBarOverflowOrOptionsMenu
    androidx.test.espresso.action.GeneralClickAction androidx.test.espresso.action.Press
    androidx.test.espresso.action.Tap androidx.test.espresso.action.ViewActions.pressKey
    androidx.test.espresso.assertion.ViewAssertions.selectedDescendantsMatch
    androidx.test.espresso.matcher.RootMatchers androidx.test.rule.ActivityTestRule
    androidx.test.rule.ServiceTestRule androidx.test.rule.UiThreadTestRule
    androidx.test.runner.AndroidJUnit4 androidx.test.runner.lifecycle.ActivityLifecycleMonitor
    androidx.test.runner.lifecycle.ActivityLifecycleMonitorRegistry
    androidx.test.runner.lifecycle.Stage androidx.test.filters.Suppress
    androidx.test.annotation.Beta androidx.test.InstrumentationRegistry
    """.split()
)


def test_stubs_and_the_library_table_do_not_drift_apart(
    kotlinc_checker: KotlincChecker, project: Path, tmp_path: Path
) -> None:
    imports = _stub_import_lines()
    source = tmp_path / "ImportsTest.kt"
    source.write_text("package com.droidwire.demo.test\n\n" + "\n".join(imports) + "\n")
    result = kotlinc_checker.check(project, place(source, project), app_dir=TEMPLATE)
    lines = source.read_text().splitlines()
    failing = set()
    for err in parse_errors(result.output).errors:
        if err.line is not None and lines[err.line - 1].startswith("import "):
            failing.add(lines[err.line - 1].removeprefix("import "))
    listed = {i.removeprefix("import ") for i in imports}
    assert failing & listed == UNSTUBBED & listed, (
        f"stubbed now (drop from UNSTUBBED): {sorted((UNSTUBBED & listed) - failing)}; "
        f"missing from the stubs (stub them or list them): {sorted(failing - UNSTUBBED)}"
    )


def test_an_api_the_stubs_do_not_model_is_not_checked_not_an_error(
    kotlinc_checker: KotlincChecker, project: Path, tmp_path: Path
) -> None:
    source = tmp_path / "NetworkTest.kt"
    source.write_text(
        "package com.droidwire.demo.test\n\nimport android.net.ConnectivityManager\n"
        "import org.junit.Test\n\nclass NetworkTest {\n    @Test\n    fun t() {\n"
        "        val cm: ConnectivityManager? = null\n        println(cm)\n    }\n}\n"
    )
    result = kotlinc_checker.check(project, place(source, project), app_dir=TEMPLATE)
    assert result.ok, result.output
    assert result.unchecked == ["android.net.ConnectivityManager"]
    assert f"not in droidwire's API {API_LEVEL} stubs" in result.output
    assert parse_errors(result.output).compile_errors == []


def test_every_stub_source_is_compiled_into_the_class_path(
    kotlinc_checker: KotlincChecker,
) -> None:
    layout = kotlinc_checker.layout
    for java in (stubs_dir() / "java").rglob("*.java"):
        rel = java.relative_to(stubs_dir() / "java").with_suffix(".class")
        assert (layout.stubs_java / rel).is_file(), rel


# -- the warm service -----------------------------------------------------------------------
def test_the_warm_compiler_is_restarted_when_it_dies_or_times_out(
    kotlinc_checker: KotlincChecker, tmp_path: Path
) -> None:
    """Each JVM start costs seconds: the restarts are shown with ``-version`` (a request the
    compiler answers without compiling), the compiles on the first JVM."""
    compiler = WarmCompiler(kotlinc_checker.layout, max_heap_mb=512)
    source = tmp_path / "A.kt"
    source.write_text("fun a(): Int = 1\n")
    args = [*base_args(), "-d", str(tmp_path / "out"), str(source)]
    try:
        first = compiler.compile(args)
        assert first.exit_code == 0 and not first.warm and compiler.starts == 1
        source.write_text("fun a(): Int = \"one\"\n")
        bad = compiler.compile(args)
        assert bad.warm and bad.exit_code == 1  # the same JVM, the real compiler's verdict
        assert "mismatch" in bad.output and "'kotlin.String'" in bad.output, bad.output
        pid = compiler.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # it dies: the next request starts a new one
        again = compiler.compile(["-version"])
        assert again.exit_code == 0 and "kotlinc-jvm 2.0.21" in again.output
        assert compiler.starts == 2 and compiler.pid() not in (None, pid)
        # past its timeout: the JVM is killed, the next request gets a fresh one
        with pytest.raises(CompilerError, match="timed out"):
            compiler.compile(args, timeout_s=0.01)
        assert compiler.pid() is None
        assert compiler.compile(["-version"]).exit_code == 0 and compiler.starts == 3
        with pytest.raises(ValueError):
            compiler.compile(["-d", "x\ny"])
    finally:
        compiler.close()
    assert compiler.pid() is None


def test_the_jvm_is_renewed_after_restart_after_compiles(kotlinc_checker: KotlincChecker) -> None:
    compiler = WarmCompiler(kotlinc_checker.layout, max_heap_mb=256, restart_after=1)
    try:
        assert compiler.compile(["-version"]).exit_code == 0
        assert compiler.compile(["-version"]).exit_code == 0
        assert compiler.starts == 2
    finally:
        compiler.close()


def test_a_full_queue_is_refused_not_grown(kotlinc_checker: KotlincChecker) -> None:
    compiler = WarmCompiler(kotlinc_checker.layout, max_waiting=0)
    compiler._waiting = 1  # one compile running, nobody else may wait behind it
    try:
        with pytest.raises(CompilerBusy):
            compiler.compile(["-version"])
    finally:
        compiler.close()


# Scope functions and Any's members in the table, not Activity's own.
_KOTLIN_NAMES = {"let", "also", "apply", "run", "takeIf", "takeUnless", "to", "toString",
                 "hashCode", "equals", "javaClass"}


def test_every_activity_member_the_project_knows_is_in_the_stubs(
    kotlinc_checker: KotlincChecker, project: Path, tmp_path: Path
) -> None:
    """What the simulated toolchain accepts on an activity (its ACTIVITY_MEMBERS) must not be
    a false 'Unresolved reference' for kotlinc: the stubs declare each of them."""
    names = sorted(libs.ACTIVITY_MEMBERS - _KOTLIN_NAMES)
    body = "\n".join(f"        activity.{name}" for name in names)
    source = tmp_path / "MembersTest.kt"
    source.write_text(
        "package com.droidwire.demo.test\n\nimport com.droidwire.demo.MainActivity\n\n"
        f"fun probe(activity: MainActivity) {{\n    run {{\n{body}\n    }}\n}}\n"
    )
    result = kotlinc_checker.check(project, place(source, project), app_dir=TEMPLATE)
    unresolved = sorted(e.symbol or "" for e in parse_errors(result.output).compile_errors
                        if e.kind == "unresolved_reference")
    assert unresolved == [], result.output
