"""Where a test's source file goes, and every way of reaching elsewhere being refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_bridge.workspace.placement import (
    blank_comments_and_strings,
    place_test,
    read_namespace,
)
from protocol.errors import ErrorCode, RpcError

NS = "com.droidwire.demo"

LLM_STYLE = '''
package com.droidwire.demo

import android.os.StrictMode
import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import org.junit.Test
import org.junit.runner.RunWith

// class CommentedOut { }
/* a /* nested */ class InBlockComment { } */
private fun helper(): String = "class NotAClass { ${"}"} "

@RunWith(AndroidJUnit4::class)
class MainActivityBlockingTest {
    private fun timed(block: () -> Unit): Long {
        val start = SystemClock.elapsedRealtime()
        block()
        return SystemClock.elapsedRealtime() - start
    }

    @Test
    fun loadSettings_blocksMainThread() {
        StrictMode.setThreadPolicy(StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build())
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val ms = timed { activity.loadSettingsFromDisk() }
                Log.i("DroidUnblocker", "elapsed=${ms}ms")
                val raw = """class RawString { } ${'$'}"""
                val c = '{'
            }
        }
    }
}
'''


def code(
    package: str | None = NS, cls: str = "DiskReadTest", body: str = "@Test fun t() {}"
) -> str:
    head = f"package {package}\n\n" if package is not None else ""
    return f"{head}import org.junit.Test\n\nclass {cls} {{\n    {body}\n}}\n"


def refused(test_code: str, namespace: str = NS) -> RpcError:
    with pytest.raises(RpcError) as info:
        place_test(test_code, namespace)
    return info.value


def test_llm_style_test_is_placed_by_its_package_and_class() -> None:
    placement = place_test(LLM_STYLE, NS)
    assert placement.package == NS
    assert placement.class_name == "MainActivityBlockingTest"
    assert placement.classes == ("MainActivityBlockingTest",)
    assert placement.qualified_class == "com.droidwire.demo.MainActivityBlockingTest"
    assert placement.relative_parts == ("com", "droidwire", "demo", "MainActivityBlockingTest.kt")


def test_blanking_keeps_length_and_lines_and_hides_literals() -> None:
    blanked = blank_comments_and_strings(LLM_STYLE)
    assert len(blanked) == len(LLM_STYLE)
    assert blanked.count("\n") == LLM_STYLE.count("\n")
    for hidden in ("CommentedOut", "InBlockComment", "NotAClass", "RawString", "DroidUnblocker"):
        assert hidden not in blanked
    assert "class MainActivityBlockingTest" in blanked
    assert blanked.count("{") == blanked.count("}")


def test_primary_class_is_the_one_with_tests() -> None:
    src = f"package {NS}\nclass Helpers {{ fun x() = 1 }}\nclass RealTest {{\n @Test fun a() {{}}\n}}\n"
    placement = place_test(src, NS)
    assert placement.class_name == "RealTest"
    assert placement.classes == ("Helpers", "RealTest")


def test_subpackage_of_the_namespace_is_accepted() -> None:
    placement = place_test(code(package=f"{NS}.generated"), NS)
    assert placement.relative_parts[:-1] == ("com", "droidwire", "demo", "generated")


@pytest.mark.parametrize(
    ("test_code", "code_", "rule"),
    [
        # a class named so that it would land on a build file
        (code(cls="build.gradle.kts"), ErrorCode.FORBIDDEN, "build_file"),
        (code(cls="settings.gradle"), ErrorCode.FORBIDDEN, "build_file"),
        (code(cls="gradlew"), ErrorCode.FORBIDDEN, "build_file"),
        (code(cls="AndroidManifest.xml"), ErrorCode.FORBIDDEN, "build_file"),
        # paths that escape the androidTest source set
        (code(cls="../../../build.gradle"), ErrorCode.FORBIDDEN, "path_escape"),
        (code(cls="/etc/passwd"), ErrorCode.FORBIDDEN, "path_escape"),
        (code(package=f"{NS}/../../../.."), ErrorCode.FORBIDDEN, "path_escape"),
        (code(package="com.droidwire.demo..x"), ErrorCode.FORBIDDEN, "path_escape"),
        (code(package="..com.droidwire.demo"), ErrorCode.FORBIDDEN, "path_escape"),
        (code(package="com\\droidwire\\demo"), ErrorCode.FORBIDDEN, "path_escape"),
        # outside the app's namespace
        (code(package="com.example.other"), ErrorCode.FORBIDDEN, "package_outside_namespace"),
        (
            code(package="com.droidwire.demonstration"),
            ErrorCode.FORBIDDEN,
            "package_outside_namespace",
        ),
        (code(package="com.droidwire"), ErrorCode.FORBIDDEN, "package_outside_namespace"),
        # malformed
        (code(package=None), ErrorCode.BAD_REQUEST, "package_missing"),
        (f"package {NS}\nfun main() {{}}\n", ErrorCode.BAD_REQUEST, "no_class"),
        (code(cls="`My Test`"), ErrorCode.BAD_REQUEST, "identifier"),
        (code(cls="Tést"), ErrorCode.BAD_REQUEST, "identifier"),
        (code(package="com.droidwire.demo.in"), ErrorCode.BAD_REQUEST, "identifier"),
        ("", ErrorCode.BAD_REQUEST, "empty"),
        (code() + "\x00", ErrorCode.BAD_REQUEST, "nul"),
        (code() + "//" + "x" * 600_000, ErrorCode.BAD_REQUEST, "too_large"),
    ],
)
def test_refusals(test_code: str, code_: ErrorCode, rule: str) -> None:
    err = refused(test_code)
    assert err.code is code_
    assert err.data is not None and err.data["rule"] == rule


def test_second_class_with_a_bad_name_is_refused_too() -> None:
    src = code() + "\nclass build.gradle.kts\n"
    assert refused(src).code is ErrorCode.FORBIDDEN


def test_namespace_from_kotlin_dsl_ignoring_block_comments(tmp_path: Path) -> None:
    (tmp_path / "build.gradle.kts").write_text(
        '/*\nnamespace = "com.old"\n*/\n// namespace = "com.commented"\n'
        'android {\n    namespace = "com.droidwire.demo"\n}\n'
    )
    assert read_namespace(tmp_path) == "com.droidwire.demo"


def test_namespace_from_groovy_dsl(tmp_path: Path) -> None:
    (tmp_path / "build.gradle").write_text("android {\n    namespace 'org.sample.app'\n}\n")
    assert read_namespace(tmp_path) == "org.sample.app"


def test_namespace_falls_back_to_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "build.gradle.kts").write_text("android {}\n")
    manifest = tmp_path / "src" / "main" / "AndroidManifest.xml"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        '<?xml version="1.0"?>\n<!-- <manifest package="com.wrong"> -->\n'
        '<manifest xmlns:android="http://schemas.android.com/apk/res/android"\n'
        '    package="net.legacy.app">\n</manifest>\n'
    )
    assert read_namespace(tmp_path) == "net.legacy.app"


def test_no_namespace_anywhere(tmp_path: Path) -> None:
    assert read_namespace(tmp_path) is None
