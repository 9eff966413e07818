"""The simulated compiler: real-format errors for what does not resolve, APKs for what does."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from device_bridge.sim.apk import read_apk
from device_bridge.sim.toolchain import (
    SimulatedToolchain,
    TestRefused,
    ToolchainError,
    UnsupportedProject,
)
from fixer.errors import parse_errors
from fixer.repair import fix_detailed
from fixer.source_index import SourceCodeIndex
from protocol.errors import ErrorCode, RpcError

from .helpers import IMPORTS, PROJECT, compile_test, kotlin, llm_test

E_LINE = re.compile(r"^e: file:///\S+/(\w+\.kt):(\d+):(\d+) (.+)$")
EXAMPLES = PROJECT / "app/src/androidTestExamples/java/com/droidwire/demo/examples"


def _errors(result) -> list[tuple[str, int, int, str]]:
    out = []
    for line in result.errors:
        m = E_LINE.match(line)
        assert m, line
        out.append((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)))
    return out


def _position(source: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, column) of the nth occurrence of needle in the dedented source."""
    text = kotlin(source)
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


# --- successful compiles

def test_our_examples_compile_and_carry_steps():
    source = (EXAMPLES / "MainActivityExamplesTest.kt").read_text()
    result = SimulatedToolchain().compile(PROJECT, source)
    assert result.ok, result.output
    assert result.toolchain == "simulated"
    assert result.test_classes == ["com.droidwire.demo.examples.MainActivityExamplesTest"]
    assert "BUILD SUCCESSFUL in" in result.output
    app = read_apk(result.app_apk)
    test = read_apk(result.test_apk)
    assert (app.kind, app.package, app.toolchain) == ("app", "com.droidwire.demo", "simulated")
    assert (test.kind, test.target_package) == ("test", "com.droidwire.demo")
    assert test.runner == "androidx.test.runner.AndroidJUnitRunner"
    called = {s["call"] for t in test.tests for s in t.steps if "call" in s}
    assert called == {"loadSettingsFromDisk", "saveDraftSync", "fetchGreetingBlocking",
                      "computeLayoutHash", "decodeThumbnail", "formatTitle", "loadAvatarAsync"}
    for t in test.tests:
        calls = [s for s in t.steps if "call" in s]
        assert [(s["thread"], s["timed"]) for s in calls] == [("main", True)]
        assert any("log" in s and s["log"]["tag"] == "DroidUnblocker" for s in t.steps)
        assert any(s.get("policy", {}).get("penalty_log") for s in t.steps)  # the rule
        assert t.source_file == "MainActivityExamplesTest.kt"


def test_compile_is_deterministic():
    source = llm_test("decodeThumbnail")
    assert compile_test(source).test_apk == compile_test(source).test_apk


@pytest.mark.parametrize(
    ("snippet", "thread"),
    [
        ("scenario.onActivity { a -> a.formatTitle() }", "main"),
        ("InstrumentationRegistry.getInstrumentation().runOnMainSync { activity.formatTitle() }",
         "main"),
        ("activity.runOnUiThread { activity.formatTitle() }", "main"),
        ("Thread { activity.formatTitle() }.start()", "background"),
        ("thread { activity.formatTitle() }", "background"),
        ("runBlocking { withContext(Dispatchers.IO) { activity.formatTitle() } }", "background"),
        ("Executors.newSingleThreadExecutor().execute { activity.formatTitle() }", "background"),
        ("activity.formatTitle()", "test"),
        ("with(activity) { formatTitle() }", "test"),
    ],
)
def test_threads_of_calls(snippet: str, thread: str):
    source = IMPORTS + f"""
import androidx.test.platform.app.InstrumentationRegistry
import java.util.concurrent.Executors
import kotlin.concurrent.thread
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

@RunWith(AndroidJUnit4::class)
class ThreadsTest {{
    @Test
    fun t() {{
        lateinit var activity: MainActivity
        ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
            scenario.onActivity {{ activity = it }}
            {snippet}
        }}
    }}
}}
"""
    result = compile_test(source)
    assert result.ok, result.output
    [test] = read_apk(result.test_apk).tests
    [call] = [s for s in test.steps if "call" in s]
    assert call["call"] == "formatTitle"
    assert call["thread"] == thread
    assert call["timed"] is False  # no DroidUnblocker line reports it


def test_ui_thread_test_annotation_runs_on_main():
    source = IMPORTS + """
import androidx.test.annotation.UiThreadTest

class UiThreadTestTest {
    private val activity = MainActivity()

    @Test
    @UiThreadTest
    fun onMain() {
        activity.decodeThumbnail()
    }
}
"""
    result = compile_test(source)
    assert result.ok, result.output
    [test] = read_apk(result.test_apk).tests
    [call] = [s for s in test.steps if "call" in s]
    assert (call["thread"], call["via"]) == ("main", "UiThreadTest")


# --- errors kotlinc would print

def test_missing_import_is_an_unresolved_reference_in_gradle_output():
    source = llm_test("loadSettingsFromDisk").replace(
        "import androidx.test.core.app.ActivityScenario\n", "")
    result = compile_test(source)
    assert not result.ok
    assert result.app_apk is None and result.test_apk is None
    line, col = _position(source, "ActivityScenario.launch")
    assert _errors(result) == [
        ("LoadSettingsFromDiskBlockingTest.kt", line, col, "Unresolved reference 'ActivityScenario'.")
    ]
    out = result.output.splitlines()
    task = out.index("> Task :app:compileDebugAndroidTestKotlin FAILED")
    assert out[task + 1] == result.errors[0]
    assert result.errors[0].startswith(
        "e: file://" + str(PROJECT / "app/src/androidTest/java/com/droidwire/demo"))
    assert "FAILURE: Build failed with an exception." in out
    assert re.fullmatch(r"BUILD FAILED in \d+s", next(x for x in out if x.startswith("BUILD")))


def test_fixer_parses_the_output_and_its_rules_repair_the_import():
    source = kotlin(llm_test("loadSettingsFromDisk").replace(
        "import androidx.test.core.app.ActivityScenario\n", ""))
    first = SimulatedToolchain().compile(PROJECT, source)
    report = parse_errors(first.output)
    assert report.build_failed
    [error] = report.compile_errors
    assert (error.kind, error.symbol) == ("unresolved_reference", "ActivityScenario")
    fixed = fix_detailed(source, first.output, SourceCodeIndex(PROJECT / "app/src"), None)
    assert "import androidx.test.core.app.ActivityScenario" in fixed.code
    second = SimulatedToolchain().compile(PROJECT, fixed.code)
    assert second.ok, second.output


def test_unknown_demo_method_is_unresolved_at_its_position():
    source = llm_test("loadSettingsFromDisk", body="activity.loadSettingsFromNetwork()")
    result = compile_test(source)
    line, col = _position(source, "loadSettingsFromNetwork")
    assert _errors(result) == [
        ("LoadSettingsFromDiskBlockingTest.kt", line, col,
         "Unresolved reference 'loadSettingsFromNetwork'.")
    ]


@pytest.mark.parametrize(
    ("extra_import", "symbol"),
    [
        ("import org.mockito.Mockito", "mockito"),
        ("import io.mockk.every", "io"),
        ("import kotlin.test.assertEquals", "test"),
        ("import org.junit.jupiter.api.Test", "jupiter"),
        ("import androidx.test.espresso.matcher.ViewMatchers.withFoo", "withFoo"),
        ("import com.google.common.truth.Truth.assertThat", "google"),
    ],
)
def test_imports_that_are_not_on_the_classpath(extra_import: str, symbol: str):
    source = llm_test("formatTitle").replace("import android.util.Log\n",
                                              f"import android.util.Log\n{extra_import}\n")
    result = compile_test(source)
    line, _ = _position(source, extra_import)
    errors = _errors(result)
    assert len(errors) == 1
    assert errors[0][1] == line
    assert errors[0][3] == f"Unresolved reference '{symbol}'."
    assert kotlin(source).splitlines()[line - 1][errors[0][2] - 1:].startswith(symbol)


def test_unimported_names_of_each_kind():
    source = """
package com.droidwire.demo

class NothingImportedTest {
    @Test
    fun t() {
        val start = SystemClock.elapsedRealtime()
        val ms = measureTimeMillis { }
        assertTrue(ms >= 0)
    }
}
"""
    messages = [e[3] for e in _errors(compile_test(source))]
    assert messages == [
        "Unresolved reference 'Test'.",
        "Unresolved reference 'SystemClock'.",
        "Unresolved reference 'measureTimeMillis'.",
        "Unresolved reference 'assertTrue'.",
    ]


def test_private_member_and_too_many_arguments():
    body = 'activity.hashUntil(10L, "x")\n                        activity.formatTitle("a", 1, 2)'
    errors = _errors(compile_test(llm_test("formatTitle", body=body)))
    assert [e[3] for e in errors] == [
        "Cannot access 'fun hashUntil(budgetMs: Long, seed: String): String': "
        "it is private in 'com.droidwire.demo.MainActivity'.",
        "Too many arguments for 'fun formatTitle(name: String = ..., unread: Int = ...): String'.",
    ]


def test_syntax_error():
    source = llm_test("formatTitle").rstrip().rstrip("}")
    errors = _errors(compile_test(source))
    assert [e[3] for e in errors] == ["Syntax error: Expecting '}'."]


def test_valid_llm_style_tests_have_no_false_errors():
    source = IMPORTS + """
import android.content.Context
import androidx.lifecycle.Lifecycle
import androidx.test.core.app.ApplicationProvider
import androidx.test.espresso.Espresso.onView
import androidx.test.espresso.assertion.ViewAssertions.matches
import androidx.test.espresso.matcher.ViewMatchers.isDisplayed
import androidx.test.espresso.matcher.ViewMatchers.isRoot
import androidx.test.ext.junit.rules.ActivityScenarioRule
import androidx.test.filters.LargeTest
import org.hamcrest.Matchers.lessThan
import org.hamcrest.MatcherAssert.assertThat
import org.junit.After
import org.junit.Before
import org.junit.Rule
import java.io.File
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit

/** KDoc with `code` and a {brace}. */
@LargeTest
@RunWith(AndroidJUnit4::class)
class MainActivityStrictModeTest {

    @get:Rule
    val activityRule = ActivityScenarioRule(MainActivity::class.java)

    private lateinit var context: Context
    private var oldPolicy: StrictMode.ThreadPolicy? = null

    @Before
    fun setUp() {
        context = ApplicationProvider.getApplicationContext()
        oldPolicy = StrictMode.getThreadPolicy()
    }

    @After
    fun tearDown() {
        oldPolicy?.let { StrictMode.setThreadPolicy(it) }
    }

    private fun measureOnMain(label: String, block: (MainActivity) -> Unit): Long {
        var elapsed = -1L
        activityRule.scenario.moveToState(Lifecycle.State.RESUMED)
        activityRule.scenario.onActivity { activity ->
            val start = System.nanoTime()
            block(activity)
            elapsed = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start)
            Log.i("DroidUnblocker", "elapsed=${elapsed}ms")
        }
        Log.d(TAG, "$label took $elapsed ms")
        return elapsed
    }

    @Test
    fun avatarLoadsOffTheMainThread() {
        val latch = CountDownLatch(1)
        val ms = measureOnMain("avatar") { it.loadAvatarAsync { bytes -> latch.countDown() } }
        latch.await(2, TimeUnit.SECONDS)
        assertThat(ms, lessThan(16L))
        onView(isRoot()).check(matches(isDisplayed()))
        val file = File(context.filesDir, "x")
        val title = "ok: ${file.name.length}"
        assertTrue(title.isNotEmpty())
    }

    companion object {
        private const val TAG = "MainActivityStrictModeTest"
    }
}
"""
    result = compile_test(source)
    assert result.ok, result.output
    [test] = read_apk(result.test_apk).tests
    [check] = [s for s in test.steps if "assert" in s]  # assertThat(ms, lessThan(16L))
    assert (check["assert"]["op"], check["assert"]["value"], check["style"]) == ("<", 16.0,
                                                                                   "hamcrest")
    [call] = [s for s in test.steps if "call" in s]
    assert (call["call"], call["thread"], call["timed"]) == ("loadAvatarAsync", "main", True)


# --- refusals

@pytest.mark.parametrize(
    "header",
    ["package com.example.evil", "package com.droidwire.demox", ""],
)
def test_package_outside_the_namespace_is_refused(header: str):
    source = llm_test("formatTitle").replace("package com.droidwire.demo", header, 1)
    with pytest.raises(TestRefused) as info:
        compile_test(source)
    assert isinstance(info.value, RpcError) and isinstance(info.value, ToolchainError)
    assert info.value.code is ErrorCode.FORBIDDEN
    assert "com.droidwire.demo" in info.value.message
    assert info.value.data == {"rule": "namespace"}


def test_subpackage_is_accepted():
    source = llm_test("formatTitle").replace(
        "package com.droidwire.demo\n", "package com.droidwire.demo.perf\n\nimport com.droidwire.demo.MainActivity\n", 1)
    result = compile_test(source)
    assert result.ok, result.output
    assert result.test_classes == ["com.droidwire.demo.perf.FormatTitleBlockingTest"]
    assert "/com/droidwire/demo/perf/FormatTitleBlockingTest.kt" in (result.test_path or "")


def test_oversized_test_is_refused():
    with pytest.raises(TestRefused) as info:
        compile_test(llm_test("formatTitle") + "// " + "x" * 300_000)
    assert info.value.code is ErrorCode.BAD_REQUEST


def test_another_project_is_unsupported(tmp_path: Path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "build.gradle.kts").write_text('android { namespace = "org.other" }\n')
    with pytest.raises(UnsupportedProject) as info:
        SimulatedToolchain().compile(tmp_path, llm_test("formatTitle"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "simulated" in info.value.message
    with pytest.raises(UnsupportedProject):
        SimulatedToolchain().compile(tmp_path / "missing", llm_test("formatTitle"))


# --- the method set comes from the Kotlin sources

def test_demo_methods_are_read_from_the_sources(tmp_path: Path):
    project = tmp_path / "ws"
    shutil.copytree(PROJECT, project)
    activity = project / "app/src/main/java/com/droidwire/demo/MainActivity.kt"
    text = activity.read_text()
    text = text.replace("    /** Formats the title bar text: fast, no I/O. */\n", "")
    text = re.sub(r"    fun formatTitle\([^)]*\): String =\n.*\n", "", text)
    text = text.replace("    private fun hashUntil(",
                        "    fun warmCaches() {\n    }\n\n    private fun hashUntil(")
    activity.write_text(text)
    toolchain = SimulatedToolchain()
    gone = toolchain.compile(project, llm_test("formatTitle"))
    assert [e[3] for e in _errors(gone)] == ["Unresolved reference 'formatTitle'."]
    added = toolchain.compile(project, llm_test("warmCaches"))
    assert added.ok, added.output
    [test] = read_apk(added.test_apk).tests
    assert [s["call"] for s in test.steps if "call" in s] == ["warmCaches"]


def test_a_scenario_typed_with_the_activity_is_not_the_activity():
    source = IMPORTS + """
import androidx.lifecycle.Lifecycle
import org.junit.After
import org.junit.Before

@RunWith(AndroidJUnit4::class)
class ScenarioFieldTest {
    private lateinit var scenario: ActivityScenario<MainActivity>
    private var activity: MainActivity? = null

    @Before
    fun launch() {
        scenario = ActivityScenario.launch(MainActivity::class.java)
        scenario.moveToState(Lifecycle.State.RESUMED)
        scenario.onActivity { activity = it }
    }

    @After
    fun close() = scenario.close()

    @Test
    fun draft() {
        scenario.onActivity { it.saveDraftSync("x") }
        activity?.missingMethod()
    }
}
"""
    errors = _errors(compile_test(source))
    assert [e[3] for e in errors] == ["Unresolved reference 'missingMethod'."]
