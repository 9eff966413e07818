"""The simulated toolchain: stands in for Gradle where there is no Android SDK (docs/design.md §8).

``SimulatedToolchain().compile(project_dir, test_code)`` does what
``./gradlew assembleDebug assembleDebugAndroidTest`` would do for the demo project, in the
subset we can model honestly:

* it resolves the test's imports and references against the demo app's sources (read from
  ``project_dir``) and the usual test libraries, and prints what does not resolve as
  **real-format** Kotlin 2 compiler errors inside Gradle-like output, e.g.::

      > Task :app:compileDebugAndroidTestKotlin FAILED
      e: file:///…/MainActivityTest.kt:12:9 Unresolved reference 'ActivityScenario'.

      FAILURE: Build failed with an exception.
      …
      BUILD FAILED in 3s

  so the fixer's parser and rule-based fixes work on it exactly as on real output;
* otherwise it builds two simulated APKs (:mod:`device_bridge.sim.apk`): the app, and the test
  package whose tests carry the steps the simulated device plays back.

Every result says ``toolchain="simulated"``; nothing here pretends to be Gradle beyond the
shape of its output. A project that is not the demo app is refused (:class:`UnsupportedProject`),
and so is a test whose package lies outside the app's namespace (:class:`TestRefused`).

Exceptions::

    ToolchainError (protocol.errors.RpcError)   root; carries an ErrorCode for the wire
    ├── UnsupportedProject   project_dir is not the demo project       (unavailable)
    └── TestRefused          package outside the namespace, too large  (forbidden / bad_request)
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from device_bridge.sim.apk import SimPackage, SimTest, build_apk
from device_bridge.sim.behaviour import APP_PACKAGE, DemoApp, DemoAppError, demo_app
from device_bridge.sim.toolchain_kotlin import Problem, parse_file, syntax_problems
from device_bridge.sim.toolchain_resolve import build_scope, check_file
from device_bridge.sim.toolchain_steps import extract_tests
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "MAX_TEST_BYTES",
    "TOOLCHAIN_NAME",
    "CompileResult",
    "SimulatedToolchain",
    "TestRefused",
    "ToolchainError",
    "UnsupportedProject",
]

log = logging.getLogger("droidwire.bridge.sim.toolchain")

TOOLCHAIN_NAME = "simulated"
MAX_TEST_BYTES = 256 * 1024
TEST_SOURCE_ROOT = Path("app") / "src" / "androidTest" / "java"
_RUNNER = "androidx.test.runner.AndroidJUnitRunner"


class ToolchainError(RpcError):
    """Root of the simulated toolchain's refusals (an RpcError, so it crosses the wire typed)."""


class UnsupportedProject(ToolchainError):
    def __init__(self, project_dir: Path, why: str):
        super().__init__(
            ErrorCode.UNAVAILABLE,
            f"no Android SDK on this bridge, and the simulated toolchain only builds the demo "
            f"project ({APP_PACKAGE}); {project_dir} is not it: {why}",
            {"reason": "unsupported_project", "toolchain": TOOLCHAIN_NAME},
        )


class TestRefused(ToolchainError):
    __test__ = False  # not a pytest class

    def __init__(self, message: str, *, rule: str, code: ErrorCode = ErrorCode.FORBIDDEN):
        super().__init__(code, message, {"rule": rule})


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    output: str
    app_apk: bytes | None = None
    test_apk: bytes | None = None
    toolchain: str = TOOLCHAIN_NAME
    errors: list[str] = field(default_factory=list)  # the ``e:`` lines, for convenience
    test_classes: list[str] = field(default_factory=list)  # fully qualified
    test_path: str | None = None


@dataclass(frozen=True)
class _Diag:
    path: Path
    problem: Problem

    def line(self) -> str:
        return f"e: {self.path.as_uri()}:{self.problem.line}:{self.problem.column} {self.problem.message}"


class SimulatedToolchain:
    """Compiles a test against the demo project without Gradle (one verb: :meth:`compile`)."""

    name = TOOLCHAIN_NAME

    def compile(
        self,
        project_dir: str | Path,
        test_code: str,
        *,
        test_path: str | Path | None = None,
    ) -> CompileResult:
        project = Path(project_dir).resolve()
        if len(test_code.encode("utf-8", errors="replace")) > MAX_TEST_BYTES:
            raise TestRefused(
                f"test source exceeds {MAX_TEST_BYTES} bytes", rule="size",
                code=ErrorCode.BAD_REQUEST,
            )
        app = _demo_app(project)
        file = parse_file(test_code)
        package = _package_of(test_code)
        if package != app.package and not (package or "").startswith(app.package + "."):
            shown = f"'{package}'" if package else "the default package (no package line)"
            raise TestRefused(
                f"test package {shown} is outside the app's namespace '{app.package}'; "
                f"declare `package {app.package}` (or a sub-package of it)",
                rule="namespace",
            )
        assert package is not None  # refused above otherwise
        class_names = re.findall(r"^\s*(?:@\S+\s+)*(?:\w+\s+)*class\s+([A-Za-z_]\w*)",
                                 test_code, flags=re.M)
        file_name = f"{class_names[0] if class_names else 'GeneratedTest'}.kt"
        path = (
            Path(test_path).resolve() if test_path is not None
            else project / TEST_SOURCE_ROOT / Path(*package.split(".")) / file_name
        )
        seed = int.from_bytes(hashlib.sha256(test_code.encode()).digest()[:2], "big")

        problems = syntax_problems(test_code)
        if not problems:
            scope = build_scope(file, app)
            problems = check_file(file, app, scope)
        if problems:
            log.debug("simulated compile of %s failed: %d error(s)", path.name, len(problems))
            diags = [_Diag(path, p) for p in problems]
            return CompileResult(
                ok=False, output=_failed_output(diags, seed), errors=[d.line() for d in diags],
                test_path=str(path),
            )
        tests = [
            SimTest(class_name=f"{package}.{cls}", method=method, steps=steps, ignored=ignored,
                    source_file=path.name)
            for cls, method, ignored, steps in extract_tests(file, scope, app)
        ]
        log.debug("simulated compile of %s: %d test(s)", path.name, len(tests))
        source_hash = hashlib.sha256(f"{app.source_hash}\0{test_code}".encode()).hexdigest()[:16]
        app_pkg = SimPackage(package=app.package, kind="app", source_hash=app.source_hash)
        test_pkg = SimPackage(
            package=f"{app.package}.test", kind="test", target_package=app.package,
            runner=_RUNNER, tests=tests, source_hash=source_hash,
        )
        return CompileResult(
            ok=True,
            output=_success_output(seed, warnings=[] if tests else [
                f"w: {path.as_uri()}: no @Test methods found"]),
            app_apk=build_apk(app_pkg),
            test_apk=build_apk(test_pkg),
            test_classes=sorted({t.class_name for t in tests}),
            test_path=str(path),
        )


def _demo_app(project: Path) -> DemoApp:
    gradle = project / "app" / "build.gradle.kts"
    try:
        build_text = gradle.read_text(encoding="utf-8")
    except OSError as exc:
        raise UnsupportedProject(
            project, f"cannot read app/build.gradle.kts ({exc.strerror})"
        ) from exc
    if not re.search(rf'namespace\s*=\s*"{re.escape(APP_PACKAGE)}"', build_text):
        raise UnsupportedProject(project, f'app/build.gradle.kts does not declare namespace "{APP_PACKAGE}"')
    try:
        return demo_app(project)
    except DemoAppError as exc:
        raise UnsupportedProject(project, str(exc)) from exc


def _package_of(source: str) -> str | None:
    # the first non-comment statement; kotlinc allows annotations (@file:…) before it
    m = re.search(r"^\s*package\s+([A-Za-z_][\w.]*)", _strip_comments(source), flags=re.M)
    return m.group(1) if m else None


def _strip_comments(source: str) -> str:
    return re.sub(r"/\*[\s\S]*?\*/|//[^\n]*", "", source)


_UP_TO_DATE = [
    ":app:preBuild", ":app:preDebugBuild", ":app:mergeDebugJniLibFolders",
    ":app:checkDebugAarMetadata", ":app:processDebugManifest", ":app:compileDebugKotlin",
    ":app:compileDebugJavaWithJavac", ":app:dexBuilderDebug", ":app:packageDebug",
    ":app:assembleDebug", ":app:preDebugAndroidTestBuild",
    ":app:processDebugAndroidTestManifest",
]


def _header() -> list[str]:
    return [f"> Task {task} UP-TO-DATE" for task in _UP_TO_DATE]


def _failed_output(diags: list[_Diag], seed: int) -> str:
    lines = [
        *_header(),
        "> Task :app:compileDebugAndroidTestKotlin FAILED",
        *(d.line() for d in diags),
        "",
        "FAILURE: Build failed with an exception.",
        "",
        "* What went wrong:",
        "Execution failed for task ':app:compileDebugAndroidTestKotlin'.",
        "> A failure occurred while executing "
        "org.jetbrains.kotlin.compilerRunner.GradleCompilerRunnerWithWorkers$GradleKotlinCompilerWorkAction",
        "   > Compilation error. See log for more details",
        "",
        "* Try:",
        "> Run with --stacktrace option to get the stack trace.",
        "> Run with --info or --debug option to get more log output.",
        "> Run with --scan to get full insights.",
        "> Get more help at https://help.gradle.org.",
        "",
        f"BUILD FAILED in {2 + seed % 3}s",
        "34 actionable tasks: 2 executed, 32 up-to-date",
        "",
    ]
    return "\n".join(lines)


def _success_output(seed: int, warnings: list[str]) -> str:
    lines = [
        *_header(),
        "> Task :app:compileDebugAndroidTestKotlin",
        *warnings,
        "> Task :app:dexBuilderDebugAndroidTest",
        "> Task :app:packageDebugAndroidTest",
        "> Task :app:assembleDebugAndroidTest",
        "",
        f"BUILD SUCCESSFUL in {4 + seed % 4}s",
        "62 actionable tasks: 4 executed, 58 up-to-date",
        "",
    ]
    return "\n".join(lines)
