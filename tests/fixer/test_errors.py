"""Compiler-output parsing: one fixture of our own per variation, then the shared corpus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixer.errors import classify_message, parse_errors
from tests.conftest import require_or_skip

# --------------------------------------------------------------------------------------
# Kotlin location shapes


def test_kotlin_17_paren_format_absolute_path() -> None:
    report = parse_errors(
        "> Task :feature-login:compileDebugAndroidTestKotlin FAILED\n"
        "e: /home/ci/proj/feature-login/src/androidTest/java/org/acme/LoginTest.kt: (41, 13): "
        "Unresolved reference: onScreen\n"
    )
    (e,) = report.errors
    assert (e.file, e.line, e.column) == (
        "/home/ci/proj/feature-login/src/androidTest/java/org/acme/LoginTest.kt",
        41,
        13,
    )
    assert (e.severity, e.kind, e.symbol) == ("error", "unresolved_reference", "onScreen")
    assert e.message == "Unresolved reference: onScreen"
    assert report.failed_tasks == [":feature-login:compileDebugAndroidTestKotlin"]
    assert report.build_failed and report.failure == "compile"


def test_kotlin_paren_format_windows_backslashes_and_parens_in_message() -> None:
    report = parse_errors(
        r"e: D:\work\Shop App\app\src\main\java\com\shop\Cart.kt: (9, 21): Only safe (?.) or "
        r"non-null asserted (!!.) calls are allowed on a nullable receiver of type Item?"
    )
    (e,) = report.errors
    assert e.file == r"D:\work\Shop App\app\src\main\java\com\shop\Cart.kt"
    assert (e.line, e.column, e.kind) == (9, 21, "nullability")
    assert e.message.endswith("receiver of type Item?")


def test_kotlin_19_file_uri_unix_and_windows_drive() -> None:
    report = parse_errors(
        "e: file:///srv/build/app/src/test/java/a/b/CTest.kt:7:3 Unresolved reference: mockk\n"
        "e: file:///D:/dev/Proj/app/src/main/kotlin/a/Main.kt:12:44 Unresolved reference: Gson\n"
    )
    first, second = report.errors
    assert (first.file, first.line, first.column, first.symbol) == (
        "/srv/build/app/src/test/java/a/b/CTest.kt",
        7,
        3,
        "mockk",
    )
    assert (second.file, second.line, second.column, second.symbol) == (
        "D:/dev/Proj/app/src/main/kotlin/a/Main.kt",
        12,
        44,
        "Gson",
    )


def test_k2_unresolved_reference_quoted_with_period() -> None:
    (e,) = parse_errors(
        "e: file:///p/app/src/androidTest/java/x/ExampleTest.kt:12:5 Unresolved reference 'bar'."
    ).errors
    assert (e.line, e.column, e.kind, e.symbol) == (12, 5, "unresolved_reference", "bar")
    assert e.message == "Unresolved reference 'bar'."


def test_k2_argument_type_mismatch_with_identical_names() -> None:
    (e,) = parse_errors(
        "e: file:///p/Repo.kt:30:18 Argument type mismatch: actual type is 'kotlin.String?', "
        "but 'kotlin.String' was expected."
    ).errors
    assert e.kind == "type_mismatch" and e.symbol is None
    assert e.message.startswith("Argument type mismatch: actual type is 'kotlin.String?'")


def test_k1_type_mismatch_platform_type() -> None:
    (e,) = parse_errors(
        "e: /r/app/src/main/java/q/Upload.kt: (88, 12): Type mismatch: inferred type is Uri but String! was expected"
    ).errors
    assert e.kind == "type_mismatch"


def test_kotlinc_cli_format_with_severity_after_location() -> None:
    report = parse_errors(
        "src/Foo.kt:3:9: error: unresolved reference 'helper'.\n"
        "src/Foo.kt:5:1: warning: parameter 'x' is never used\n"
    )
    err, warn = report.errors
    assert (err.severity, err.kind, err.symbol, err.line) == (
        "error",
        "unresolved_reference",
        "helper",
        3,
    )
    assert (warn.severity, warn.line) == ("warning", 5)


def test_message_on_the_next_line() -> None:
    report = parse_errors(
        "/tmp/w/app/src/androidTest/java/d/GenTest.kt:14:9\n"
        "Unresolved reference: measureBlocking\n"
        "\n"
        "BUILD FAILED in 3s\n"
    )
    (e,) = report.errors
    assert (e.line, e.column, e.symbol) == (14, 9, "measureBlocking")


def test_message_wrapped_over_two_lines() -> None:
    (e,) = parse_errors(
        "e: file:///w/T.kt:20:13 None of the following candidates is applicable because of\n"
        "receiver type mismatch: public fun Context.open(): Unit\n"
    ).errors
    assert e.kind == "wrong_arguments"
    assert e.message.endswith("public fun Context.open(): Unit")


def test_relative_and_elided_paths() -> None:
    report = parse_errors(
        "e: feature/src/androidTest/java/z/ZTest.kt: (3, 8): Unresolved reference: espresso\n"
        "e: .../app/src/androidTest/java/z/YTest.kt: (10, 2): Unresolved reference: Screen\n"
        "e: /***/app/src/androidTest/java/z/XTest.kt: (11, 4): Unresolved reference: Page\n"
    )
    assert [e.file for e in report.errors] == [
        "feature/src/androidTest/java/z/ZTest.kt",
        ".../app/src/androidTest/java/z/YTest.kt",
        "/***/app/src/androidTest/java/z/XTest.kt",
    ]
    assert [e.symbol for e in report.errors] == ["espresso", "Screen", "Page"]


def test_missing_e_prefix_and_backtick_wrapper() -> None:
    (e,) = parse_errors(
        "`/.../app/src/androidTest/java/k/MyTests.kt: (5, 17): Unresolved reference: HomeScreen\n"
        "\n"
        "Runtime JAR files in the classpath should have the same version.\n"
        "    /.../kotlin-stdlib-1.6.10.jar (version 1.6)`\n"
    ).errors
    assert (e.severity, e.line, e.column, e.symbol) == ("error", 5, 17, "HomeScreen")


def test_warnings_are_reported_as_warnings_and_do_not_fail_the_build() -> None:
    report = parse_errors(
        "- w: file:///a/b/Foo.kt:3:5 Variable 'unused' is never used\n"
        "w: Runtime JAR files in the classpath should have the same version.\n"
        "     /x/kotlin-stdlib-1.6.10.jar (version 1.6)\n"
        "BUILD SUCCESSFUL in 12s\n"
    )
    assert [e.severity for e in report.errors] == ["warning", "warning"]
    assert report.errors[0].line == 3 and report.errors[1].file is None
    assert report.build_failed is False and report.failure == "none"


def test_wrapper_indentation_and_truncated_last_line() -> None:
    report = parse_errors(
        "        e: file:///u/.cache/lib-1.0/src/main/kotlin/l/Server.kt:10:16 Unresolved reference: empty\n"
        "        e: file:///u/.cache/lib-1.0/src/main/kotlin/l/Server.kt:15:16 Unresolved reference: empty\n"
        "        e: fi"
    )
    assert [(e.line, e.column) for e in report.errors] == [(10, 16), (15, 16)]
    assert report.failure == "compile"


def test_truncated_location_at_the_end_is_not_an_error() -> None:
    report = parse_errors(
        "e: file:///h/src/main/java/f/Impl.kt:63:60 Unresolved reference 'x'.\n"
        "e: file:///h/src/main/java/f/feat"
    )
    assert len(report.errors) == 1


def test_simulated_toolchain_line() -> None:
    report = parse_errors(
        "> Task :app:compileDebugAndroidTestKotlin FAILED\n"
        "e: file:///tmp/droidwire/ws/app/src/androidTest/java/com/droidwire/demo/ExampleTest.kt:12:5 "
        "Unresolved reference 'bar'.\n"
        "\n"
        "FAILURE: Build failed with an exception.\n"
    )
    (e,) = report.errors
    assert e.file == "/tmp/droidwire/ws/app/src/androidTest/java/com/droidwire/demo/ExampleTest.kt"
    assert (e.line, e.column, e.symbol) == (12, 5, "bar")
    assert report.failed_tasks == [":app:compileDebugAndroidTestKotlin"]


def test_ansi_colours_and_ci_workflow_commands() -> None:
    report = parse_errors(
        "\x1b[31me: file:///a/B.kt:3:4 Unresolved reference: x\x1b[0m\n"
        "##[error]e: file:///a/C.kt:5:6 Unresolved reference 'y'.\n"
    )
    assert [(e.file, e.line, e.symbol) for e in report.errors] == [
        ("/a/B.kt", 3, "x"),
        ("/a/C.kt", 5, "y"),
    ]


def test_android_studio_messages_window() -> None:
    report = parse_errors(
        "/home/u/p/app/src/main/java/com/x/MainActivity.kt\n"
        "Error:(12, 5) Unresolved reference: bar\n"
        "Warning:(14, 9) Variable 'v' is never used\n"
        "/home/u/p/app/src/main/java/com/x/Other.java\n"
        "Error:(3, 8) error: cannot find symbol class Foo\n"
    )
    got = [
        (e.file.rsplit("/", 1)[-1] if e.file else None, e.line, e.column, e.severity, e.symbol)
        for e in report.errors
    ]
    assert got == [
        ("MainActivity.kt", 12, 5, "error", "bar"),
        ("MainActivity.kt", 14, 9, "warning", None),
        ("Other.java", 3, 8, "error", "Foo"),
    ]


def test_file_without_position() -> None:
    (w,) = parse_errors(
        "w: file:///ws/app/src/androidTest/java/d/NoTests.kt: no @Test methods found\n"
    ).errors
    assert (w.file, w.line, w.severity, w.message) == (
        "/ws/app/src/androidTest/java/d/NoTests.kt",
        None,
        "warning",
        "no @Test methods found",
    )


def test_unlocated_dependency_errors_are_build_config() -> None:
    report = parse_errors(
        "e: Incompatible classes were found in dependencies. Remove them from the classpath\n"
        "BUILD FAILED in 3s\n"
    )
    assert report.build_failed and report.failure == "build_config"


# --------------------------------------------------------------------------------------
# javac


JAVAC = """\
/w/app/src/androidTest/java/org/x/LoginTest.java:22: error: cannot find symbol
    @Rule public ActivityScenarioRule<LoginActivity> rule = new ActivityScenarioRule<>(LoginActivity.class);
                                      ^
  symbol:   class LoginActivity
  location: class LoginTest
/w/app/src/androidTest/java/org/x/LoginTest.java:30: error: cannot find symbol
        helper.tapTwice();
              ^
  symbol: method tapTwice()
  location: variable helper of type Helper
/w/app/src/androidTest/java/org/x/LoginTest.java:3: error: package org.junit.jupiter.api does not exist
import org.junit.jupiter.api.Test;
                            ^
/w/app/src/androidTest/java/org/x/LoginTest.java:40: warning: [deprecation] getColor(int) in Resources has been deprecated
Note: Some input files use unchecked or unsafe operations.
3 errors
1 warning

FAILURE: Build failed with an exception.

* What went wrong:
Execution failed for task ':app:compileDebugAndroidTestJavaWithJavac'.
> Compilation failed; see the compiler error output for details.

* Try:
Run with --stacktrace option to get the stack trace.

BUILD FAILED
Total time: 4.145 secs
"""


def test_javac_symbol_location_and_caret_column() -> None:
    report = parse_errors(JAVAC)
    e1, e2, e3, w = report.errors
    assert (e1.line, e1.column, e1.kind, e1.symbol, e1.location) == (
        22,
        39,
        "unresolved_reference",
        "LoginActivity",
        "class LoginTest",
    )
    assert e1.message == "cannot find symbol"
    assert (e2.line, e2.column, e2.symbol) == (30, 15, "tapTwice")
    assert (e3.kind, e3.symbol, e3.column) == ("unresolved_reference", "org.junit.jupiter.api", 29)
    assert w.severity == "warning"
    assert report.failed_tasks == [":app:compileDebugAndroidTestJavaWithJavac"]
    assert report.what_went_wrong == [
        "Execution failed for task ':app:compileDebugAndroidTestJavaWithJavac'.",
        "Compilation failed; see the compiler error output for details.",
    ]
    assert report.build_failed and report.failure == "compile"


def test_javac_with_ci_timestamps_and_orphan_tail() -> None:
    stamp = "2024-01-02T03:04:05.1234567Z "
    text = "".join(
        stamp + line + "\n"
        for line in [
            "        Foo f = new Foo(Bar.class);",  # the tail of an error cut off above
            "                        ^",
            "  symbol:   class Bar",
            "  location: class QTest",
            "/ci/app/src/androidTestShots/java/q/QTest.java:29: error: cannot find symbol",
            "        intent.putExtra(Target.KEY, 1);",
            "                        ^",
            "  symbol:   variable Target",
            "  location: class QTest",
            "Task :app:compileShotsAndroidTestJavaWithJavac in app Finished",
        ]
    )
    report = parse_errors(text)
    (e,) = report.errors
    assert (e.file, e.line, e.column, e.symbol) == (
        "/ci/app/src/androidTestShots/java/q/QTest.java",
        29,
        25,
        "Target",
    )
    assert report.failed_tasks == [":app:compileShotsAndroidTestJavaWithJavac"]


# --------------------------------------------------------------------------------------
# kapt: one diagnostic is a located first line plus every ``e:`` line that belongs to it
# (real samples from the project's corpus, tests/corpus/)

OWN_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "samples"


def test_kapt_dagger_chain_under_the_e_prefix_is_one_error() -> None:
    text = (OWN_CORPUS / "kapt_01_kwmt_dagger_japanese_e_prefixed_chain.txt").read_text("utf-8")
    (e,) = parse_errors(text).errors
    assert e.file is not None and e.file.endswith("di/components/AppComponent.java")
    assert (e.line, e.column, e.severity) == (6, 17, "error")  # localized "エラー:" is an error
    assert e.message.startswith("[dagger.android.AndroidInjector.inject(T)] java.util.Map<")
    assert e.detail[-3:] == (
        "net.kwmt27.codesearch.presentation.view.MainActivity is injected at",
        "dagger.android.AndroidInjector.inject(arg0)",
        "java.lang.IllegalStateException: failed to analyze: "
        "org.jetbrains.kotlin.kapt3.diagnostic.KaptError: Error while annotation processing",
    )


def test_javac_through_kapt_echo_caret_symbol_location_are_the_errors_own() -> None:
    text = (OWN_CORPUS / "kapt_02_mironov_kapt_bugs_javac_through_kapt_cannot_find_symbol.txt")
    report = parse_errors(text.read_text("utf-8"))
    assert [(e.line, e.column, e.symbol, e.location) for e in report.errors] == [
        (6, 15, "MainFragmentBinding", "class MainFragment"),
        (11, 37, "MainFragmentBinding", "class MainFragment"),
        (15, 37, "MainFragmentBinding", "class MainFragment"),
    ]


def test_prefixed_lines_after_a_kotlin_diagnostic_stay_separate_unless_indented() -> None:
    report = parse_errors(
        "e: file:///a/B.kt:3:4 Unresolved reference 'x'.\n"
        "e: java.lang.OutOfMemoryError: Java heap space\n"
        "w: Runtime JAR files in the classpath should have the same version.\n"
    )
    assert [(e.file, e.severity) for e in report.errors] == [
        ("/a/B.kt", "error"), (None, "error"), (None, "warning")]


def test_a_fresh_unlocated_error_under_the_prefix_is_not_a_continuation() -> None:
    report = parse_errors(
        "e: /w/stubs/A.java:4: error: cannot find symbol\n"
        "e:   symbol:   class Foo\n"
        "e: error: Could not load module <Error module>\n"
    )
    assert [(e.file, e.symbol) for e in report.errors] == [
        ("/w/stubs/A.java", "Foo"), (None, None)]


def test_unprefixed_dagger_chain_is_detail_of_the_javac_error() -> None:
    report = parse_errors(
        "/w/BindsProvider.java:10: error: [Dagger/MissingBinding] com.example.Injectable cannot "
        "be provided without an @Provides-annotated method.\n"
        "interface BindsProvider {\n"
        "^\n"
        "      com.example.Injectable is injected at\n"
        "          com.example.BindsProvider.inject(com.example.Injectable)\n"
        "2 errors\n"
    )
    (e,) = report.errors
    assert (e.line, e.column) == (10, 1)
    assert e.detail == ("com.example.Injectable is injected at",
                        "com.example.BindsProvider.inject(com.example.Injectable)")


# --------------------------------------------------------------------------------------
# Gradle structure and failure classes


def test_gradle4_task_after_errors_and_flavored_module_names() -> None:
    report = parse_errors(
        "e: /p/core.net-x/src/test/java/A.kt: (1, 1): Expecting a top level declaration\n"
        ":core.net-x:compileAarch64BetaUnitTestKotlin FAILED\n"
        "\n"
        "FAILURE: Build completed with 2 failures.\n"
        "\n"
        "1: Task failed with an exception.\n"
        "-----------\n"
        "* What went wrong:\n"
        "Execution failed for task ':core.net-x:compileAarch64BetaUnitTestKotlin'.\n"
        "> Compilation error. See log for more details\n"
    )
    assert report.errors[0].kind == "syntax"
    assert report.failed_tasks == [":core.net-x:compileAarch64BetaUnitTestKotlin"]
    assert report.failure == "compile"


@pytest.mark.parametrize(
    "what",
    [
        "Could not resolve all files for configuration ':app:debugAndroidTestRuntimeClasspath'.\n"
        "> Could not find androidx.test.ext:junit:9.9.9.",
        "SDK location not found. Define a valid SDK location with an ANDROID_HOME environment "
        "variable or by setting the sdk.dir path in your project's local properties file.",
        "Gradle build daemon disappeared unexpectedly (it may have been killed or may have crashed)",
        "A problem occurred configuring project ':app'.\n> Failed to find Platform SDK with path: platforms;android-35",
    ],
)
def test_build_config_failures(what: str) -> None:
    report = parse_errors(
        "FAILURE: Build failed with an exception.\n\n* What went wrong:\n"
        + what
        + "\n\n* Try:\n> Run with --stacktrace option to get the stack trace.\n\nBUILD FAILED in 2s\n"
    )
    assert report.errors == []
    assert report.build_failed is True
    assert report.failure == "build_config"


def test_build_script_errors_are_build_config() -> None:
    report = parse_errors(
        "e: file:///p/app/build.gradle.kts:14:5: Unresolved reference: kapt\n"
        "FAILURE: Build failed with an exception.\n"
        "* What went wrong:\nScript compilation error:\n"
        "BUILD FAILED in 1s\n"
    )
    assert report.errors[0].line == 14
    assert report.failure == "build_config"


def test_flutter_wrapper_and_workaction_cause() -> None:
    report = parse_errors(
        "Running Gradle task 'assembleDebug'...\n"
        "e: file:///C:/src/app/android/app/src/main/kotlin/m/MainActivity.kt:3:8 Unresolved reference: io\n"
        "\n"
        "FAILURE: Build failed with an exception.\n\n"
        "* What went wrong:\n"
        "Execution failed for task ':app:compileDebugKotlin'.\n"
        "> A failure occurred while executing org.jetbrains.kotlin.compilerRunner.GradleCompilerRunnerWithWorkers$GradleKotlinCompilerWorkAction\n"
        "   > Compilation error. See log for more details\n\n"
        "* Try:\n> Run with --stacktrace option to get the stack trace.\n\n"
        "BUILD FAILED in 9s\n"
        "Error: Gradle task assembleDebug failed with exit code 1\n"
    )
    assert [e.symbol for e in report.errors] == ["io"]
    assert report.failed_tasks == [":app:compileDebugKotlin"]
    assert report.what_went_wrong[-1] == "Compilation error. See log for more details"
    assert report.failure == "compile"


def test_clean_output_and_garbage_never_raise() -> None:
    assert parse_errors("").to_dict() == {
        "errors": [],
        "build_failed": False,
        "failure": "none",
        "failed_tasks": [],
        "what_went_wrong": [],
    }
    junk = "\x00\x01 e: : (,): \n:::: \n file:///:1:2\n" * 50 + "é" * 1000
    parse_errors(junk)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("No value passed for parameter 'name'", "wrong_arguments"),
        ("Too many arguments for public fun f(): Unit", "wrong_arguments"),
        ("method run in class Task cannot be applied to given types;", "wrong_arguments"),
        ("Cannot access 'secret': it is private in 'Vault'", "visibility"),
        ("secret() has private access in Vault", "visibility"),
        ("Expecting ')'", "syntax"),
        ("';' expected", "syntax"),
        ("incompatible types: String cannot be converted to int", "type_mismatch"),
        ("Null can not be a value of a non-null type String", "nullability"),
        ("Something nobody has seen before", "other"),
    ],
)
def test_classify_message(message: str, kind: str) -> None:
    assert classify_message(message)[0] == kind


# --------------------------------------------------------------------------------------
# The shared corpus (../shared/corpus next to the clone): facts read off each sample by hand.

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

# file → (failed task or None, [(line, column or None, kind, symbol or None)], path or prefix)
CORPUS_FACTS: dict[str, tuple[str | None, list[tuple[int, int | None, str, str | None]], str]] = {
    "gradle_compile_01_okhttp8178_k19_fileuri_androidtest.txt": (
        ":android-test:compileDebugAndroidTestKotlin",
        [(24, 15, "unresolved_reference", "test")],
        "/Users/runner/work/okhttp/okhttp/okhttp-brotli/src/test/java/okhttp3/brotli/BrotliInterceptorTest.kt",
    ),
    "gradle_compile_03_okhttp5697_relative_path_androidtest.txt": (
        ":android-test:compileDebugAndroidTestKotlin",
        [(164, 9, "unresolved_reference", "AssumptionViolatedException")],
        "okhttp/android-test/src/androidTest/java/okhttp/android/test/OkHttpTest.kt",
    ),
    "gradle_compile_05_kaspresso346_elided_path_runtime_jar_warning.txt": (
        None,
        [(27, 45, "unresolved_reference", "SampleScreen")],
        ".../app/src/androidTest/java/com/ke_app/android/OtherTests.kt",
    ),
    "gradle_compile_07_flutter159712_windows_fileuri_workaction.txt": (
        ":app:compileDebugKotlin",
        [(3, 8, "unresolved_reference", "io"), (5, 21, "unresolved_reference", "FlutterActivity")],
        "C:/Users/dcbrh/AndroidStudioProjects/Soundsplore_MobileApp/android/app/src/main/kotlin/com/soundsplore/soundsplore/MainActivity.kt",
    ),
    "gradle_compile_09_opennotescanner274_windows_type_mismatch_nullsafety.txt": (
        ":app:compileGplayDebugKotlin",
        [
            (200, 46, "type_mismatch", None),
            (65, 34, "type_mismatch", None),
            (71, 42, "nullability", None),
            (78, 34, "type_mismatch", None),
            (84, 48, "nullability", None),
            (86, 55, "nullability", None),
            (87, 28, "nullability", None),
        ],
        "C:\\OpenNoteScanner\\app\\src\\main\\java\\com\\todobom\\opennotescanner\\",
    ),
    "gradle_compile_11_openfoodfacts3920_platform_type_bang.txt": (
        ":app:compileOffPlaystoreScreenshotsKotlin",
        [
            (264, 48, "type_mismatch", None),
            (96, 32, "type_mismatch", None),
            (795, 20, "type_mismatch", None),
        ],
        "/home/runner/work/openfoodfacts-androidapp/openfoodfacts-androidapp/app/src/main/java/openfoodfacts/github/scrachx/openfood/features/product/",
    ),
    "gradle_compile_13_detox1163_javac_androidtest_caret.txt": (
        ":app:compileDebugAndroidTestJavaWithJavac",
        [
            (18, 29, "unresolved_reference", "MainActivity"),
            (18, 82, "unresolved_reference", "MainActivity"),
        ],
        "/home/user/Desktop/Test/android/app/src/androidTest/java/com/example/DetoxTest.java",
    ),
    "gradle_compile_15_openfoodfacts3555_gha_timestamps_javac_androidtest.txt": (
        ":app:compileOffScreenshotsAndroidTestJavaWithJavac",
        [(29, None, "unresolved_reference", "ProductBrowsingListActivity")],
        "/home/runner/work/openfoodfacts-androidapp/openfoodfacts-androidapp/app/src/androidTestScreenshots/java/openfoodfacts/github/scrachx/openfood/TakeScreenshotIncompleteProductsTest.java",
    ),
    "gradle_compile_17_patrol1676_indented_flutter_k19.txt": (
        None,
        [(n, 16, "unresolved_reference", "empty") for n in (73, 78, 83, 88, 93, 98, 103, 108)],
        "/Users/rus/.pub-cache/hosted/pub.dev/patrol-2.2.4/android/src/main/kotlin/pl/leancode/patrol/AutomatorServer.kt",
    ),
    "gradle_compile_19_occtax313_k2_argument_type_mismatch.txt": (
        ":occtax:compileDebugKotlin",
        [
            (63, 60, "unresolved_reference", "defaultValue"),
            (85, 37, "type_mismatch", None),
            (86, 45, "type_mismatch", None),
        ],
        "/home/plabruyere/dev/clicnat_mobile_factory/clicnat_mobile/occtax/src/main/java/fr/geonature/occtax/features/nomenclature/repository/AdditionalFieldRepositoryImpl.kt",
    ),
}


def _corpus_files() -> list[Path]:
    require_or_skip(CORPUS.is_dir(), f"shared corpus not found at {CORPUS}")
    return sorted(CORPUS.glob("gradle_compile_*.txt"))


def test_corpus_samples_yield_their_facts() -> None:
    files = _corpus_files()
    assert files, "the corpus has no gradle_compile samples"
    index_tsv = (CORPUS / "INDEX.tsv").read_text(encoding="utf-8")
    for path in files:
        report = parse_errors(path.read_text(encoding="utf-8", errors="replace"))
        assert report.build_failed, path.name
        assert report.failure == "compile", path.name
        # Facts stated in INDEX.tsv itself: the failed task.
        row = next((r for r in index_tsv.splitlines() if r.startswith(path.name)), "")
        task = re.search(r"failed_task=(:[\w:.-]+)", row)
        if task:
            assert task.group(1) in report.failed_tasks, path.name
        facts = CORPUS_FACTS.get(path.name)
        if facts is None:  # a sample added after these facts were written: no crash, some error
            assert report.compile_errors or report.failed_tasks, path.name
            continue
        failed_task, expected, file_part = facts
        if failed_task:
            assert report.failed_tasks == [failed_task], path.name
        got = report.compile_errors
        assert len(got) == len(expected), path.name
        for error, (line, column, kind, symbol) in zip(got, expected, strict=True):
            assert (error.line, error.kind, error.symbol) == (line, kind, symbol), path.name
            if column is not None:
                assert error.column == column, path.name
            # The path as printed (``file://`` removed): the whole path, or a common prefix.
            assert error.file is not None and error.file.startswith(file_part), path.name
            if file_part.endswith((".kt", ".java")):
                assert error.file == file_part, path.name


def test_corpus_kotlin_messages_are_kept_verbatim() -> None:
    _corpus_files()
    report = parse_errors(
        (CORPUS / "gradle_compile_01_okhttp8178_k19_fileuri_androidtest.txt").read_text()
    )
    assert report.errors[0].message == "Unresolved reference: test"
    report = parse_errors(
        (CORPUS / "gradle_compile_19_occtax313_k2_argument_type_mismatch.txt").read_text()
    )
    assert report.errors[0].message == "Unresolved reference 'defaultValue'."


_FRAGMENTS = [
    "e: ",
    "w: ",
    "file:///",
    "C:\\a\\",
    "/x/Foo.kt",
    "Foo.java",
    ":12",
    ":5 ",
    ": (3, 4): ",
    "Unresolved reference: ",
    "Unresolved reference '",
    "error: ",
    "cannot find symbol",
    "  symbol:   class ",
    "  location: class ",
    "    ^",
    "> Task :app:compileDebugKotlin FAILED",
    "* What went wrong:",
    "BUILD FAILED in 1s",
    "\n",
    "\t",
    "`",
    "2024-01-01T00:00:00.1234567Z ",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=40))
def test_any_text_parses_into_the_contract_shape(parts: list[str]) -> None:
    data = parse_errors("".join(parts)).to_dict()
    assert data["failure"] in ("compile", "build_config", "none")
    assert isinstance(data["build_failed"], bool)
    for e in data["errors"]:
        assert e["severity"] in ("error", "warning")
        assert e["kind"] in (
            "unresolved_reference",
            "type_mismatch",
            "nullability",
            "wrong_arguments",
            "syntax",
            "visibility",
            "other",
        )
        assert e["line"] is None or e["line"] >= 0
        assert e["symbol"] is None or e["kind"] == "unresolved_reference"
    if data["failure"] != "none":
        assert data["build_failed"]


def test_jvm_target_mismatch_is_build_config_real_sample() -> None:
    # A compile task failing on configuration, not on code (tests/corpus/, file_saver#83).
    text = (OWN_CORPUS / "gradle_config_01_filesaver83_jvm_target_compatibility.txt")
    report = parse_errors(text.read_text("utf-8"))
    assert report.compile_errors == [] and report.failure == "build_config"


def test_percent_escaped_file_uri_is_decoded_real_sample() -> None:
    text = (OWN_CORPUS / "gradle_k2_03_installedapps68_percent_encoded_uri_daemon.txt")
    first, daemon = parse_errors(text.read_text("utf-8")).errors
    assert first.file is not None and first.file.startswith("C:/Users/Adil Ashfaq/AppData/")
    assert (daemon.file, daemon.message) == (None, "Daemon compilation failed: null")


def test_ksp_without_providers_is_build_config_real_sample() -> None:
    text = (OWN_CORPUS / "ksp_01_ksp2224_no_providers.txt").read_text("utf-8")
    assert parse_errors(text).failure == "build_config"


def test_javac_in_a_chinese_locale_real_sample() -> None:
    text = (OWN_CORPUS / "javac_01_squaredagger564_chinese_locale_symbol_location_chain.txt")
    first, dagger = parse_errors(text.read_text("utf-8")).errors
    assert (first.line, first.column, first.kind, first.symbol) == (
        12, 42, "unresolved_reference", "DaggerAppComponent")
    assert first.location == "程序包 com.edward.wanandroid.di.component"
    assert dagger.detail[-1] == "dagger.android.AndroidInjector.inject(arg0)"


def test_what_went_wrong_alone_means_the_build_failed_real_sample() -> None:
    text = OWN_CORPUS / "gradle_config_03_streetcomplete5281_plugin_request_no_build_failed_line.txt"
    report = parse_errors(text.read_text("utf-8"))
    assert report.build_failed and report.failure == "build_config"


def test_kotlinc2_candidate_lists_are_kept_whole_one_candidate_a_line() -> None:
    """K2's ``None of the following candidates is applicable:`` lists every overload on its
    own line (here the six of JUnit's three-argument assertEquals, as kotlinc 2.0.21 prints
    them); the fixer and the LLM need all of them, and the next error must stay separate."""
    candidates = [
        "static fun assertEquals(p0: String!, p1: Any!, p2: Any!): Unit",
        "static fun assertEquals(p0: String!, p1: Long, p2: Long): Unit",
        "static fun assertEquals(p0: String!, p1: Double, p2: Double): Unit",
        "static fun assertEquals(p0: Double, p1: Double, p2: Double): Unit",
        "static fun assertEquals(p0: Float, p1: Float, p2: Float): Unit",
        "static fun assertEquals(p0: String!, p1: (Array<Any!>..Array<out Any!>?),"
        " p2: (Array<Any!>..Array<out Any!>?)): Unit",
    ]
    report = parse_errors(
        "e: file:///w/T.kt:22:13 None of the following candidates is applicable:\n"
        + "".join(c + "\n" for c in candidates)
        + "e: file:///w/T.kt:29:34 Unresolved reference 'Log'.\n"
    )
    first, second = report.errors
    assert first.kind == "wrong_arguments"
    assert first.message.splitlines() == [
        "None of the following candidates is applicable:", *candidates
    ]
    assert (second.line, second.symbol) == (29, "Log")


def test_a_quote_left_open_by_kotlinc2s_contract_dump_continues_the_message() -> None:
    """kotlinc 2.0.21 on ``withContext`` called outside a coroutine (recorded)."""
    (e, nxt) = parse_errors(
        "e: file:///w/T.kt:23:17 Suspend function 'suspend fun <T> withContext(context: "
        "CoroutineContext, block: suspend CoroutineScope.() -> T): T\n"
        "    [R|Contract description]\n"
        "     <\n"
        "        CallsInPlace(block, EXACTLY_ONCE)\n"
        "    >' should be called only from a coroutine or another suspend function.\n"
        "e: file:///w/T.kt:30:1 Unresolved reference 'Log'.\n"
    ).errors
    assert e.message.endswith("should be called only from a coroutine or another suspend function.")
    assert (nxt.line, nxt.symbol) == (30, "Log")


def test_an_apostrophe_does_not_swallow_the_lines_after_it() -> None:
    (e,) = parse_errors(
        "e: file:///w/T.kt:3:1 Can't be called in this context by implicit receiver.\n"
        "FAILURE: Build failed with an exception.\n"
    ).errors
    assert e.message == "Can't be called in this context by implicit receiver."
