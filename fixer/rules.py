"""Offline rule fixes: deterministic repairs tried before any LLM, and alone without one.

Rules, in order:

1. **Package declaration.** When the expected package is known (given by the caller, or read
   off the error's path ``src/<set>/(java|kotlin)/<package dirs>/File.kt``) and the test
   declares none, or declares another one while its unresolved names live in the expected
   package, the declaration is corrected.
2. **Imports.** An unresolved name is imported when exactly one declaration answers it: a
   class of the app (source index), a static-callable method of exactly one class or object
   of the app (Kotlin imports object / companion members and Java statics by name), or an
   entry of ``COMMON_IMPORTS`` (Android, AndroidX Test, JUnit 4, Espresso, UiAutomator,
   Kotlin coroutines). An import line that names something unresolvable is rewritten to the
   one known location of its last segment, or to its AndroidX name (``MIGRATIONS``:
   ``android.support.test…`` → ``androidx.test…``).

Ambiguous names (two candidates) are left for the LLM: a wrong import is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from fixer.errors import CompileError
from fixer.prompt import declared_names, package_of
from fixer.source_index import SourceCodeIndex

__all__ = [
    "COMMON_IMPORTS",
    "MIGRATIONS",
    "RuleResult",
    "apply_rules",
    "expected_package_from_path",
    "migrate",
]

# Simple name → fully-qualified name, for the names generated instrumented tests use most.
# Lower-case names are static members (``import static`` in Java).
COMMON_IMPORTS: dict[str, str] = {
    # JUnit 4
    "Test": "org.junit.Test",
    "Before": "org.junit.Before",
    "After": "org.junit.After",
    "BeforeClass": "org.junit.BeforeClass",
    "AfterClass": "org.junit.AfterClass",
    "Rule": "org.junit.Rule",
    "ClassRule": "org.junit.ClassRule",
    "Ignore": "org.junit.Ignore",
    "Assert": "org.junit.Assert",
    "Assume": "org.junit.Assume",
    "AssumptionViolatedException": "org.junit.AssumptionViolatedException",
    "RunWith": "org.junit.runner.RunWith",
    "RuleChain": "org.junit.rules.RuleChain",
    "TestRule": "org.junit.rules.TestRule",
    "Timeout": "org.junit.rules.Timeout",
    "TemporaryFolder": "org.junit.rules.TemporaryFolder",
    "assertEquals": "org.junit.Assert.assertEquals",
    "assertNotEquals": "org.junit.Assert.assertNotEquals",
    "assertTrue": "org.junit.Assert.assertTrue",
    "assertFalse": "org.junit.Assert.assertFalse",
    "assertNull": "org.junit.Assert.assertNull",
    "assertNotNull": "org.junit.Assert.assertNotNull",
    "assertSame": "org.junit.Assert.assertSame",
    "assertArrayEquals": "org.junit.Assert.assertArrayEquals",
    "fail": "org.junit.Assert.fail",
    "assumeTrue": "org.junit.Assume.assumeTrue",
    "assertThat": "org.hamcrest.MatcherAssert.assertThat",
    # AndroidX Test
    "AndroidJUnit4": "androidx.test.ext.junit.runners.AndroidJUnit4",
    "ActivityScenario": "androidx.test.core.app.ActivityScenario",
    "ActivityScenarioRule": "androidx.test.ext.junit.rules.ActivityScenarioRule",
    "ApplicationProvider": "androidx.test.core.app.ApplicationProvider",
    "InstrumentationRegistry": "androidx.test.platform.app.InstrumentationRegistry",
    "ActivityTestRule": "androidx.test.rule.ActivityTestRule",
    "GrantPermissionRule": "androidx.test.rule.GrantPermissionRule",
    "UiThreadTest": "androidx.test.annotation.UiThreadTest",
    "SmallTest": "androidx.test.filters.SmallTest",
    "MediumTest": "androidx.test.filters.MediumTest",
    "LargeTest": "androidx.test.filters.LargeTest",
    "SdkSuppress": "androidx.test.filters.SdkSuppress",
    "FlakyTest": "androidx.test.filters.FlakyTest",
    # Espresso
    "Espresso": "androidx.test.espresso.Espresso",
    "IdlingRegistry": "androidx.test.espresso.IdlingRegistry",
    "ViewMatchers": "androidx.test.espresso.matcher.ViewMatchers",
    "ViewActions": "androidx.test.espresso.action.ViewActions",
    "ViewAssertions": "androidx.test.espresso.assertion.ViewAssertions",
    "onView": "androidx.test.espresso.Espresso.onView",
    "pressBack": "androidx.test.espresso.Espresso.pressBack",
    "withId": "androidx.test.espresso.matcher.ViewMatchers.withId",
    "withText": "androidx.test.espresso.matcher.ViewMatchers.withText",
    "isDisplayed": "androidx.test.espresso.matcher.ViewMatchers.isDisplayed",
    "click": "androidx.test.espresso.action.ViewActions.click",
    "typeText": "androidx.test.espresso.action.ViewActions.typeText",
    "matches": "androidx.test.espresso.assertion.ViewAssertions.matches",
    # UiAutomator
    "UiDevice": "androidx.test.uiautomator.UiDevice",
    "By": "androidx.test.uiautomator.By",
    "Until": "androidx.test.uiautomator.Until",
    # Android framework
    "SystemClock": "android.os.SystemClock",
    "StrictMode": "android.os.StrictMode",
    "Looper": "android.os.Looper",
    "Handler": "android.os.Handler",
    "Bundle": "android.os.Bundle",
    "Build": "android.os.Build",
    "Trace": "android.os.Trace",
    "Log": "android.util.Log",
    "Context": "android.content.Context",
    "Intent": "android.content.Intent",
    "SharedPreferences": "android.content.SharedPreferences",
    "Activity": "android.app.Activity",
    "Instrumentation": "android.app.Instrumentation",
    "View": "android.view.View",
    "TextView": "android.widget.TextView",
    # Java
    "File": "java.io.File",
    "IOException": "java.io.IOException",
    "URL": "java.net.URL",
    "HttpURLConnection": "java.net.HttpURLConnection",
    "TimeUnit": "java.util.concurrent.TimeUnit",
    "CountDownLatch": "java.util.concurrent.CountDownLatch",
    "Executors": "java.util.concurrent.Executors",
    "AtomicBoolean": "java.util.concurrent.atomic.AtomicBoolean",
    "AtomicInteger": "java.util.concurrent.atomic.AtomicInteger",
    "AtomicLong": "java.util.concurrent.atomic.AtomicLong",
    # Kotlin coroutines
    "runBlocking": "kotlinx.coroutines.runBlocking",
    "delay": "kotlinx.coroutines.delay",
    "withContext": "kotlinx.coroutines.withContext",
    "Dispatchers": "kotlinx.coroutines.Dispatchers",
    "runTest": "kotlinx.coroutines.test.runTest",
}

# Package moves generated tests still trip over (support library → AndroidX), most specific
# first. Applied to an import line the compiler rejected when no exact entry resolves it.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("android.support.test.runner.AndroidJUnit4", "androidx.test.ext.junit.runners.AndroidJUnit4"),
    (
        "android.support.test.InstrumentationRegistry",
        "androidx.test.platform.app.InstrumentationRegistry",
    ),
    ("android.support.test.espresso.", "androidx.test.espresso."),
    ("android.support.test.uiautomator.", "androidx.test.uiautomator."),
    ("android.support.test.rule.", "androidx.test.rule."),
    ("android.support.test.filters.", "androidx.test.filters."),
    ("android.support.test.annotation.", "androidx.test.annotation."),
    ("android.support.test.runner.", "androidx.test.runner."),
    ("android.support.test.", "androidx.test."),
    ("android.support.annotation.", "androidx.annotation."),
    ("android.support.v7.app.", "androidx.appcompat.app."),
    ("android.support.v4.app.", "androidx.fragment.app."),
    ("android.support.v7.widget.RecyclerView", "androidx.recyclerview.widget.RecyclerView"),
)


def migrate(path: str) -> str | None:
    """The AndroidX name of a support-library import, if it has one."""
    for old, new in MIGRATIONS:
        if path == old or (old.endswith(".") and path.startswith(old)):
            return new + path[len(old) :] if old.endswith(".") else new
    return None


_IMPORT_LINE = re.compile(
    r"^(?P<indent>[ \t]*)import[ \t]+(?P<static>static[ \t]+)?(?P<path>[\w.`]+(?:\.\*)?)"
    r"(?P<alias>[ \t]+as[ \t]+\w+)?[ \t]*;?[ \t]*$"
)
_PACKAGE_LINE = re.compile(r"^[ \t]*package[ \t]+[\w.`]+[ \t]*;?[ \t]*$")
_SOURCE_ROOT = re.compile(
    r"(?:^|/)src/[\w-]+/(?:java|kotlin)/(?P<dirs>(?:[\w]+/)*)[\w-]+\.(?:kt|java)$"
)
_VALID_PACKAGE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


@dataclass(slots=True)
class RuleResult:
    code: str
    changes: list[str] = field(default_factory=list)
    # Indices (into the errors given) that a rule addressed.
    resolved: set[int] = field(default_factory=set)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def expected_package_from_path(path: str | None) -> str | None:
    """``…/src/androidTest/java/com/x/FooTest.kt`` → ``com.x``."""
    if not path:
        return None
    m = _SOURCE_ROOT.search(path.replace("\\", "/"))
    if not m or not m.group("dirs"):
        return None
    package = m.group("dirs").strip("/").replace("/", ".")
    return package if _VALID_PACKAGE.match(package) else None


def _is_java(code: str, errors: Sequence[CompileError]) -> bool:
    files = [e.file for e in errors if e.file]
    if files:
        return files[0].lower().endswith(".java")
    return bool(re.search(r"^\s*package\s+[\w.]+\s*;", code, re.MULTILINE)) or (
        "fun " not in code and ";" in code and "public class" in code
    )


class _Editor:
    """Line-level edits of one source file."""

    def __init__(self, code: str, java: bool):
        self.lines = code.split("\n")
        self.java = java

    @property
    def code(self) -> str:
        return "\n".join(self.lines)

    def imports(self) -> dict[str, int]:
        """Imported path → line index."""
        out: dict[str, int] = {}
        for i, line in enumerate(self.lines):
            m = _IMPORT_LINE.match(line)
            if m:
                out[m.group("path").replace("`", "")] = i
        return out

    def import_text(self, path: str) -> str:
        static = self.java and _is_member(path)
        if self.java:
            return f"import {'static ' if static else ''}{path};"
        return f"import {path}"

    def add_import(self, path: str) -> None:
        existing = self.imports()
        if path in existing:
            return
        if existing:
            at = max(existing.values()) + 1
        else:
            pkg = next((i for i, x in enumerate(self.lines) if _PACKAGE_LINE.match(x)), None)
            if pkg is None:
                self.lines[0:0] = [self.import_text(path), ""]
                return
            at = pkg + 1
            self.lines.insert(at, "")
            at += 1
            if at < len(self.lines) and self.lines[at].strip():
                self.lines.insert(at, "")
        self.lines.insert(at, self.import_text(path))

    def replace_line(self, index: int, text: str) -> None:
        self.lines[index] = text

    def set_package(self, package: str) -> int:
        """Set the package declaration; returns how many lines were inserted."""
        text = f"package {package}{';' if self.java else ''}"
        for i, line in enumerate(self.lines):
            if _PACKAGE_LINE.match(line):
                self.lines[i] = text
                return 0
        self.lines[0:0] = [text, ""]
        return 2


def _is_member(path: str) -> bool:
    parts = path.split(".")
    return len(parts) >= 2 and parts[-1][:1].islower() and parts[-2][:1].isupper()


_PRIVATE = re.compile(r"\bprivate\b")


def _resolve(
    name: str, index: SourceCodeIndex | None, own_package: str | None
) -> tuple[str | None, bool]:
    """Where ``name`` lives: (qualified import path or None, in own package)."""
    if index is not None:
        classes = index.find_class(name) if "." not in name else []
        top = [c for c in classes if "." not in c.name]  # nested classes need their outer
        qualified = sorted({c.qualified_name for c in top})
        if own_package and any(c.package == own_package for c in top):
            return None, True
        if len(qualified) == 1:
            return qualified[0], False
        if len(qualified) > 1:
            return None, False  # ambiguous: leave it to the LLM
        if not classes:
            # A private member cannot be imported from another file.
            methods = [
                m for m in index.lookup(name) if not _PRIVATE.search(m.signature.split("(", 1)[0])
            ]
            paths = sorted({m.import_path for m in methods if m.import_path})
            if own_package and any(m.owner is None and m.package == own_package for m in methods):
                return None, True
            if len(paths) == 1:
                return paths[0], False
    return COMMON_IMPORTS.get(name), False


def apply_rules(
    code: str,
    errors: Sequence[CompileError],
    index: SourceCodeIndex | None = None,
    *,
    expected_package: str | None = None,
) -> RuleResult:
    """Apply every rule that fits; the result lists the changes and the errors addressed."""
    java = _is_java(code, errors)
    editor = _Editor(code, java)
    result = RuleResult(code=code)
    compile_errors = [(i, e) for i, e in enumerate(errors) if e.severity == "error"]

    # 1. Package declaration.
    current = package_of(code)
    target = expected_package or next(
        (p for p in (expected_package_from_path(e.file) for _, e in compile_errors) if p), None
    )
    unresolved = [
        (i, e) for i, e in compile_errors if e.kind == "unresolved_reference" and e.symbol
    ]
    shift = 0  # lines inserted above the original text: error line numbers move down
    if target and target != current:
        on_package = [i for i, e in compile_errors if _on_package_line(editor, e)]
        in_target = [
            i
            for i, e in unresolved
            if index is not None
            and e.symbol
            and any(c.package == target for c in index.find_class(e.symbol))
        ]
        if current is None or in_target or on_package:
            shift = editor.set_package(target)
            result.changes.append(f"package {current or '(none)'} → {target}")
            result.resolved.update(in_target)
            result.resolved.update(on_package)
            current = target

    # 2a. Wrong imports, rewritten in place (no line moves, so error lines stay valid).
    import_errors: set[int] = set()
    for i, e in unresolved:
        line_index = (e.line - 1 + shift) if e.line is not None else -1
        if not 0 <= line_index < len(editor.lines):
            continue
        m = _IMPORT_LINE.match(editor.lines[line_index])
        if m is None:
            continue
        import_errors.add(i)
        old_path = m.group("path").replace("`", "")
        new_path = None
        if not old_path.endswith(".*"):
            new_path, _ = _resolve(old_path.rsplit(".", 1)[-1], index, current)
        if new_path is None:
            new_path = migrate(old_path)
        if new_path and new_path != old_path:
            editor.replace_line(line_index, m.group("indent") + editor.import_text(new_path))
            result.changes.append(f"import {old_path} → {new_path}")
            result.resolved.add(i)
        elif new_path == old_path:
            result.resolved.add(i)  # an earlier error on this line already fixed it

    # 2b. Missing imports.
    local = set(declared_names(code))
    added: dict[str, str] = {}
    new_imports: list[str] = []
    for i, e in unresolved:
        if i in import_errors:
            continue
        symbol = e.symbol or ""
        name = symbol.split(".")[0] if "." in symbol and symbol[:1].isupper() else symbol
        if "." in name or name in local:
            continue
        if name in added:
            result.resolved.add(i)
            continue
        path, own = _resolve(name, index, current)
        if own or path is None:
            continue
        existing = editor.imports()
        if path in existing:
            continue  # imported and still unresolved: a missing dependency, not ours to fix
        # Another import of the same simple name points elsewhere: replace it.
        clash = next(
            (p for p in existing if p.rsplit(".", 1)[-1] == name and not p.endswith(".*")), None
        )
        if clash is not None:
            editor.replace_line(existing[clash], editor.import_text(path))
            result.changes.append(f"import {clash} → {path}")
        else:
            new_imports.append(path)
            result.changes.append(f"import {path}")
        added[name] = path
        result.resolved.add(i)
    for path in sorted(new_imports):
        editor.add_import(path)

    result.code = editor.code
    return result


def _on_package_line(editor: _Editor, error: CompileError) -> bool:
    if error.line is None or not 1 <= error.line <= len(editor.lines):
        return False
    return bool(_PACKAGE_LINE.match(editor.lines[error.line - 1]))
