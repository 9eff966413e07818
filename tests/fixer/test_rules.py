"""The offline rule fixer alone: missing imports, wrong imports, package declaration."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixer import fix, fix_detailed
from fixer.errors import parse_errors
from fixer.rules import apply_rules, expected_package_from_path
from fixer.source_index import SourceCodeIndex

SAMPLE = Path(__file__).parent / "sample_project"
TEST_PATH = "/ws/app/src/androidTest/java/com/example/demo/GenTest.kt"


@pytest.fixture(scope="module")
def index() -> SourceCodeIndex:
    return SourceCodeIndex(SAMPLE)


def k2(line: int, col: int, name: str, path: str = TEST_PATH) -> str:
    return f"e: file://{path}:{line}:{col} Unresolved reference '{name}'.\n"


FRAMEWORK_TEST = """\
package com.example.demo

@RunWith(AndroidJUnit4::class)
class GenTest {
    @Before
    fun setUp() {
        StrictMode.enableDefaults()
    }

    @Test
    fun loadsConfig() {
        val scenario = ActivityScenario.launch(MainActivity::class.java)
        val ctx = ApplicationProvider.getApplicationContext<Context>()
        val start = SystemClock.uptimeMillis()
        scenario.onActivity { it.loadConfig() }
        Log.d("GenTest", "took ${SystemClock.uptimeMillis() - start}")
        assertTrue(Looper.myLooper() != null)
    }
}
"""

FRAMEWORK_OUTPUT = "".join(
    [
        "> Task :app:compileDebugAndroidTestKotlin FAILED\n",
        k2(3, 2, "RunWith"),
        k2(3, 10, "AndroidJUnit4"),
        k2(5, 6, "Before"),
        k2(7, 9, "StrictMode"),
        k2(10, 6, "Test"),
        k2(12, 24, "ActivityScenario"),
        k2(13, 19, "ApplicationProvider"),
        k2(13, 60, "Context"),
        k2(14, 21, "SystemClock"),
        k2(16, 9, "Log"),
        k2(16, 40, "SystemClock"),
        k2(17, 9, "assertTrue"),
        k2(17, 20, "Looper"),
        "\nBUILD FAILED in 4s\n",
    ]
)


def test_missing_framework_imports_without_llm(index: SourceCodeIndex) -> None:
    result = fix_detailed(FRAMEWORK_TEST, FRAMEWORK_OUTPUT, index, None)
    assert result.fixer == "rules"
    assert result.note is None, "every error was addressed by a rule"
    for path in (
        "android.content.Context",
        "android.os.Looper",
        "android.os.StrictMode",
        "android.os.SystemClock",
        "android.util.Log",
        "androidx.test.core.app.ActivityScenario",
        "androidx.test.core.app.ApplicationProvider",
        "androidx.test.ext.junit.runners.AndroidJUnit4",
        "org.junit.Assert.assertTrue",
        "org.junit.Before",
        "org.junit.Test",
        "org.junit.runner.RunWith",
    ):
        assert f"\nimport {path}\n" in result.code
    lines = result.code.splitlines()
    assert lines[0] == "package com.example.demo" and lines[1] == ""
    imports = [x for x in lines if x.startswith("import ")]
    assert imports == sorted(imports) and len(imports) == 12, "one import per name, sorted"
    assert "import com.example.demo.MainActivity" not in result.code, "same package: no import"
    assert result.diff.startswith("--- a/GenTest.kt\n+++ b/GenTest.kt\n")
    assert "+import android.util.Log" in result.diff
    # The body is untouched.
    assert result.code.endswith(FRAMEWORK_TEST.split("\n", 2)[2])


def test_fix_keeps_the_seed_signature(index: SourceCodeIndex) -> None:
    assert fix(FRAMEWORK_TEST, FRAMEWORK_OUTPUT, index, None) == (
        fix_detailed(FRAMEWORK_TEST, FRAMEWORK_OUTPUT, index, None).code
    )


def test_app_classes_and_static_functions_from_the_index(index: SourceCodeIndex) -> None:
    code = """\
package com.example.demo.tests

import org.junit.Test

class AppTest {
    @Test
    fun t() {
        val client = NetworkClient("h")
        write(context, "x")
        val n = topLevelHelper(2)
        val body = fetchBlocking("/")
        val name = newIntentName(3)
        val mode = Mode.FAST
    }
}
"""
    path = "/ws/app/src/androidTest/java/com/example/demo/tests/AppTest.kt"
    out = "".join(
        [
            k2(8, 22, "NetworkClient", path),
            k2(9, 9, "write", path),
            k2(10, 17, "topLevelHelper", path),
            k2(11, 20, "fetchBlocking", path),
            k2(12, 20, "newIntentName", path),
            k2(13, 20, "Mode", path),
        ]
    )
    result = fix_detailed(code, out, index, None)
    assert result.fixer == "rules"
    for path_ in (
        "com.example.demo.NetworkClient",
        "com.example.demo.util.ConfigStore.write",
        "com.example.demo.topLevelHelper",
        "com.example.demo.NetworkClient.fetchBlocking",
        "com.example.demo.MainActivity.Companion.newIntentName",
        "com.example.demo.util.Mode",
    ):
        assert f"import {path_}\n" in result.code
    assert result.code.startswith("package com.example.demo.tests\n\nimport ")


def test_ambiguous_or_unknown_names_are_left_alone(tmp_path: Path) -> None:
    for pkg in ("a", "b"):
        (tmp_path / f"{pkg}.kt").write_text(
            f"package {pkg}\n\nclass Twin {{\n    fun go() {{}}\n}}\n"
        )
    index = SourceCodeIndex(tmp_path)
    code = "package t\n\nclass T {\n    fun x() {\n        Twin().go()\n        Mystery.call()\n    }\n}\n"
    out = k2(5, 9, "Twin", "/p/src/test/java/t/T.kt") + k2(
        6, 9, "Mystery", "/p/src/test/java/t/T.kt"
    )
    result = fix_detailed(code, out, index, None)
    assert result.fixer == "none" and result.code == code
    assert result.note == "no LLM configured"


def test_java_imports_and_static_imports(index: SourceCodeIndex) -> None:
    code = """\
package com.example.demo;

public class JTest {
    @Test
    public void t() {
        assertEquals(443, new NetworkClient("h").port());
    }
}
"""
    path = "/ws/app/src/androidTest/java/com/example/demo/JTest.java"
    out = (
        f"{path}:4: error: cannot find symbol\n    @Test\n     ^\n  symbol:   class Test\n  location: class JTest\n"
        f"{path}:6: error: cannot find symbol\n        assertEquals(443, x);\n        ^\n"
        "  symbol:   method assertEquals(int,int)\n  location: class JTest\n2 errors\n"
    )
    result = apply_rules(code, parse_errors(out).errors, index)
    assert "\nimport org.junit.Test;\n" in result.code
    assert "\nimport static org.junit.Assert.assertEquals;\n" in result.code
    assert result.resolved == {0, 1}


def test_wrong_import_is_repointed() -> None:
    code = (
        "package x\n\n"
        "import android.support.test.InstrumentationRegistry\n"
        "import org.junit.Test\n\n"
        "class T {\n    @Test\n    fun t() {\n"
        "        InstrumentationRegistry.getInstrumentation()\n    }\n}\n"
    )
    out = (
        "e: /p/src/androidTest/java/x/T.kt: (3, 16): Unresolved reference: support\n"
        "e: /p/src/androidTest/java/x/T.kt: (9, 9): Unresolved reference: InstrumentationRegistry\n"
    )
    result = fix_detailed(code, out, None, None)
    assert result.fixer == "rules"
    assert "import androidx.test.platform.app.InstrumentationRegistry\n" in result.code
    assert "android.support" not in result.code
    assert result.code.count("InstrumentationRegistry\n") == 1, "not imported twice"
    assert result.changes == [
        "import android.support.test.InstrumentationRegistry → androidx.test.platform.app.InstrumentationRegistry"
    ]


def test_imported_but_still_unresolved_is_not_touched() -> None:
    code = "package x\n\nimport org.junit.Test\n\nclass T {\n    @Test\n    fun t() {}\n}\n"
    out = "e: /p/src/test/java/x/T.kt: (6, 6): Unresolved reference: Test\n"
    result = fix_detailed(code, out, None, None)
    assert result.fixer == "none" and result.code == code


def test_missing_package_declaration_is_added() -> None:
    code = "class T {\n    @Test\n    fun t() {}\n}\n"
    out = "e: file:///ws/app/src/androidTest/java/com/example/demo/T.kt:2:6 Unresolved reference 'Test'.\n"
    result = fix_detailed(code, out, None, None)
    assert result.code.startswith("package com.example.demo\n\nimport org.junit.Test\n\nclass T {")
    assert result.changes[0] == "package (none) → com.example.demo"


def test_wrong_package_is_corrected_when_the_app_lives_in_the_expected_one(
    index: SourceCodeIndex,
) -> None:
    code = (
        "package com.wrong.place\n\nimport org.junit.Test\n\n"
        "class T {\n    @Test\n    fun t() {\n        val a: MainActivity? = null\n    }\n}\n"
    )
    out = "e: file:///ws/app/src/androidTest/java/com/example/demo/T.kt:8:16 Unresolved reference 'MainActivity'.\n"
    result = fix_detailed(code, out, index, None)
    assert result.fixer == "rules"
    assert result.code.startswith("package com.example.demo\n")
    assert "import com.example.demo.MainActivity" not in result.code


def test_explicit_expected_package_wins() -> None:
    code = "package a.b\n\nclass T {\n    fun t() = Foo()\n}\n"
    out = "e: T.kt:4:15 Unresolved reference: Foo\n"
    result = apply_rules(code, parse_errors(out).errors, None, expected_package="a.b")
    assert not result.changed


def test_build_config_failures_are_not_touched(index: SourceCodeIndex) -> None:
    out = (
        "FAILURE: Build failed with an exception.\n\n* What went wrong:\n"
        "Could not resolve all files for configuration ':app:debugAndroidTestCompileClasspath'.\n"
        "\nBUILD FAILED in 1s\n"
    )
    result = fix_detailed(FRAMEWORK_TEST, out, index, None)
    assert (result.fixer, result.failure, result.code) == ("none", "build_config", FRAMEWORK_TEST)


@pytest.mark.parametrize(
    ("path", "package"),
    [
        ("/w/app/src/androidTest/java/com/x/y/FooTest.kt", "com.x.y"),
        (r"C:\w\app\src\androidTest\kotlin\org\q\FooTest.kt", "org.q"),
        ("/w/app/src/androidTest/java/FooTest.kt", None),
        ("/w/FooTest.kt", None),
        (None, None),
    ],
)
def test_expected_package_from_path(path: str | None, package: str | None) -> None:
    assert expected_package_from_path(path) == package


def test_errors_in_other_files_are_not_the_tests(index: SourceCodeIndex) -> None:
    app_file = "/ws/app/src/main/java/com/example/demo/MainActivity.kt"
    out = k2(3, 1, "Test", app_file) + k2(16, 9, "Log")
    result = fix_detailed(FRAMEWORK_TEST, out, index, None)
    assert result.changes == ["import android.util.Log"]

    only_app = fix_detailed(FRAMEWORK_TEST, k2(3, 1, "Test", app_file), index, None)
    assert (only_app.fixer, only_app.note) == ("none", "errors are outside the test")


def test_explicit_test_path_selects_the_errors(index: SourceCodeIndex) -> None:
    out = k2(16, 9, "Log", "/ws/app/src/androidTest/java/com/example/demo/Generated.kt") + k2(
        7, 9, "StrictMode"
    )
    result = fix_detailed(
        FRAMEWORK_TEST, out, index, None, test_path="app/src/androidTest/GenTest.kt"
    )
    assert result.changes == ["import android.os.StrictMode"]


def test_support_library_imports_migrate_to_androidx() -> None:
    code = (
        "package x\n\n"
        "import android.support.test.espresso.Espresso.onView\n"
        "import android.support.test.espresso.contrib.RecyclerViewActions\n"
        "import android.support.test.runner.AndroidJUnit4\n"
        "import org.junit.runner.RunWith\n\n"
        "@RunWith(AndroidJUnit4::class)\nclass T\n"
    )
    out = (
        "e: /p/src/androidTest/java/x/T.kt: (3, 16): Unresolved reference: support\n"
        "e: /p/src/androidTest/java/x/T.kt: (4, 16): Unresolved reference: support\n"
        "e: /p/src/androidTest/java/x/T.kt: (5, 16): Unresolved reference: support\n"
    )
    result = fix_detailed(code, out, None, None)
    assert result.fixer == "rules" and result.note is None
    assert "import androidx.test.espresso.Espresso.onView\n" in result.code
    assert "import androidx.test.espresso.contrib.RecyclerViewActions\n" in result.code
    assert "import androidx.test.ext.junit.runners.AndroidJUnit4\n" in result.code
    assert "android.support" not in result.code


def test_index_may_be_given_as_a_project_directory() -> None:
    code = 'package t\n\nclass T {\n    fun x() = NetworkClient("h")\n}\n'
    out = k2(4, 15, "NetworkClient", "/p/src/test/java/t/T.kt")
    assert "import com.example.demo.NetworkClient\n" in fix(code, out, str(SAMPLE), None)
