"""The ``kotlinc`` check: type-check a generated test with the real Kotlin compiler.

The class path (``ClassPath`` below, docs: sandbox.md "The kotlinc check"):

* **real**: the Kotlin standard library and kotlinx-coroutines-core (from the compiler's
  distribution), JUnit 4.13.2 and Hamcrest 2.2 (Debian's jars), the JDK 17 API, and the app's
  own classes, compiled by the same compiler from the project's ``src/main`` and
  ``src/androidTest`` Kotlin sources (cached by the hash of those sources);
* **stubbed**: the Android platform and androidx.test / espresso / ext-junit /
  kotlinx-coroutines-test, as signature-only stubs kept in ``gradle-workspace/stubs``
  (the surface generated tests use, modelled on API level 34, the demo's ``compileSdk``).
  With an Android SDK that has ``platforms/android-34/android.jar`` the real one comes first.

A reference the stubs cannot judge is not turned into a false error: an unresolved import of
an ``android.*`` / ``androidx.*`` class the stubs do not model (and its uses) becomes a
warning, listed in ``unchecked``, and the check says which API level it checked
(``api_level``, ``api_source``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .install import KOTLIN_VERSION, Layout, base_args
from .service import WarmCompiler

__all__ = ["API_LEVEL", "CheckResult", "KotlincChecker", "unchecked_roots"]

log = logging.getLogger("droidwire.kotlinc.check")

API_LEVEL = 34  # what the stubs model: the demo app's compileSdk
MAX_APP_CACHES = 8
_DIAG = re.compile(r"^(?P<sev>[ew]): (?P<uri>file://\S+?\.kts?):(?P<line>\d+):(?P<col>\d+) (?P<msg>.*)$")
_UNRESOLVED = re.compile(r"^Unresolved reference '(?P<name>[^']+)'\.?$")
_IMPORT = re.compile(r"^\s*import\s+(?P<path>[\w.`]+)(?:\s+as\s+(?P<alias>\w+))?\s*;?\s*$")
# Packages the stubs model only in part: an unresolved import under them is "not checked".
_PARTIAL_ROOTS = ("android.", "androidx.")


def unchecked_roots() -> tuple[str, ...]:
    return _PARTIAL_ROOTS


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    output: str  # kotlinc's messages (GradleStyle ``e:`` / ``w:`` lines) after a header
    errors: list[str] = field(default_factory=list)  # the ``e:`` lines that count
    unchecked: list[str] = field(default_factory=list)  # names the stubs could not judge
    api_level: int = API_LEVEL
    api_source: str = "stubs"  # "stubs" or "android.jar"
    warm: bool = False
    duration_ms: int = 0
    compiler: str = f"kotlinc {KOTLIN_VERSION}"

    def summary(self) -> dict[str, object]:
        """What a compile result carries about the check (``check`` in the RPC result)."""
        return {
            "compiler": self.compiler,
            "ok": self.ok,
            "api_level": self.api_level,
            "api_source": self.api_source,
            "unchecked": list(self.unchecked),
            "warm": self.warm,
            "duration_ms": self.duration_ms,
        }


class KotlincChecker:
    """Checks tests of any project whose app sources are Kotlin, with one warm compiler."""

    def __init__(
        self,
        layout: Layout,
        *,
        compiler: WarmCompiler | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.layout = layout
        self.compiler = compiler or WarmCompiler(layout)
        self.timeout_s = timeout_s
        self._android_jar = _sdk_android_jar(os.environ if env is None else env)
        self._app_lock = threading.Lock()
        self._scratch = Path(tempfile.mkdtemp(prefix="droidwire-kotlinc-"))

    def close(self) -> None:
        self.compiler.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def api_source(self) -> str:
        return "android.jar" if self._android_jar is not None else "stubs"

    # -- the class path ----------------------------------------------------------------
    def _base_classpath(self) -> list[Path]:
        platform = [self._android_jar] if self._android_jar is not None else []
        return [*platform, *self.layout.test_classpath]

    def app_classes(self, project_dir: Path, module: str = "app",
                    exclude: Path | None = None) -> Path:
        """The app's own classes (main + androidTest helpers), compiled once per content."""
        sources = _app_sources(project_dir / module, exclude)
        h = hashlib.sha256(str(self.layout.root).encode())
        for src in sources:
            h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
        out = self.layout.root / "apps" / h.hexdigest()[:20]
        with self._app_lock:
            if (out / ".ok").is_file():
                os.utime(out)
                return out
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            if sources:
                run = self.compiler.compile(
                    [*base_args(), "-module-name", "app", "-cp",
                     os.pathsep.join(map(str, self._base_classpath())), "-d", str(out),
                     *map(str, sources)],
                    timeout_s=self.timeout_s,
                )
                if run.exit_code != 0:
                    shutil.rmtree(out, ignore_errors=True)
                    from .install import SetupError

                    raise SetupError(
                        "the app's own sources do not compile with kotlinc against the stubs:\n"
                        + run.output[:4000]
                    )
            (out / ".ok").write_text("")
            _prune_apps(out.parent)
        return out

    # -- the check ---------------------------------------------------------------------
    def check(self, project_dir: Path, test_path: Path, *, module: str = "app",
              app_dir: Path | None = None, timeout_s: float | None = None) -> CheckResult:
        """Type-check ``test_path`` (already written) against ``project_dir``'s class path.

        ``app_dir``: where the app's sources are read (default ``project_dir``; a working
        copy's pristine project, so other files in the copy cannot disturb the check).
        ``timeout_s``: the caller's budget (at most the checker's own timeout); past it the
        compiler JVM is killed, so a test cannot hold it beyond the run's deadline."""
        started = time.monotonic()
        budget = self.timeout_s if timeout_s is None else max(0.0, min(self.timeout_s, timeout_s))
        apps = self.app_classes(app_dir or project_dir, module, exclude=test_path)
        out = Path(tempfile.mkdtemp(dir=self._scratch))
        try:
            run = self.compiler.compile(
                [*base_args(), "-module-name", f"{module}_androidTest", "-cp",
                 os.pathsep.join(map(str, [*self._base_classpath(), apps])), "-d", str(out),
                 str(test_path)],
                timeout_s=max(0.0, budget - (time.monotonic() - started)),
            )
        finally:
            shutil.rmtree(out, ignore_errors=True)
        source = _read(test_path)
        errors, warnings, unchecked = _judge(run.output, source)
        ok = run.exit_code == 0 or (run.exit_code == 1 and not errors and bool(unchecked))
        if run.exit_code not in (0, 1) and not errors:
            errors = [f"e: kotlinc stopped with exit code {run.exit_code}: "
                      + (run.output.strip().splitlines() or ["no output"])[0][:500]]
        header = (
            f"> droidwire: kotlinc {self.compiler.version or KOTLIN_VERSION}"
            f" ({'warm' if run.warm else 'cold'} JVM) checked {test_path.name} against"
            f" android API {API_LEVEL} ({self.api_source}), androidx.test stubs,"
            " JUnit 4.13.2, Hamcrest 2.2, kotlinx-coroutines and the app's classes"
        )
        lines = [header, *errors, *warnings]
        lines.append(
            "> droidwire: kotlinc OK" if ok
            else f"Compilation failed: kotlinc found {len(errors)} error(s)"
        )
        return CheckResult(
            ok=ok,
            output="\n".join(lines) + "\n",
            errors=errors,
            unchecked=unchecked,
            api_source=self.api_source,
            warm=run.warm,
            duration_ms=int((time.monotonic() - started) * 1000),
            compiler=f"kotlinc {self.compiler.version or KOTLIN_VERSION}",
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _app_sources(module_dir: Path, exclude: Path | None) -> list[Path]:
    skip = exclude.resolve() if exclude is not None else None
    found: list[Path] = []
    for source_set in ("main", "androidTest"):
        for lang in ("java", "kotlin"):
            root = module_dir / "src" / source_set / lang
            if root.is_dir():
                found += [p for p in root.rglob("*.kt") if p.is_file() and p.resolve() != skip]
    return sorted(found)


def _prune_apps(apps: Path) -> None:
    dirs = sorted((p for p in apps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime,
                  reverse=True)
    for old in dirs[MAX_APP_CACHES:]:
        shutil.rmtree(old, ignore_errors=True)


def _sdk_android_jar(env: Mapping[str, str]) -> Path | None:
    for var in ("ANDROID_HOME", "ANDROID_SDK_ROOT"):
        value = env.get(var)
        if value:
            jar = Path(value) / "platforms" / f"android-{API_LEVEL}" / "android.jar"
            if jar.is_file():
                return jar
    return None


def _stubbed(path: str) -> bool:
    """Whether the stubs model the class ``path`` names (or its outer class)."""
    from .install import stubs_dir

    root = stubs_dir()
    parts = path.replace("`", "").split(".")
    for end in range(len(parts), 0, -1):
        rel = Path(*parts[:end])
        if (root / "java" / rel.with_suffix(".java")).is_file():
            return True
    return False


def _judge(output: str, source: str) -> tuple[list[str], list[str], list[str]]:
    """Split kotlinc's messages into errors that count, warnings, and names not checked."""
    lines = source.splitlines()
    # (severity, line, message, the diagnostic's text with its continuation lines)
    diags: list[tuple[str, int, str, str]] = []
    for raw in output.splitlines():
        m = _DIAG.match(raw)
        if m:
            diags.append((m["sev"], int(m["line"]), m["msg"], raw))
        elif diags and raw.strip():
            sev, line, msg, text = diags[-1]
            diags[-1] = (sev, line, msg, f"{text}\n{raw}")  # a multi-line message
    # Unresolved imports into partly modelled packages: not checked, nor are their uses.
    not_modelled: dict[str, str] = {}  # simple name (or alias) → the imported path
    for sev, line, msg, _ in diags:
        if sev != "e" or not _UNRESOLVED.match(msg) or not 1 <= line <= len(lines):
            continue
        im = _IMPORT.match(lines[line - 1])
        if im is None:
            continue
        path = im["path"].replace("`", "")
        if path.startswith(_PARTIAL_ROOTS) and not path.endswith(".*") and not _stubbed(path):
            not_modelled[im["alias"] or path.rsplit(".", 1)[-1]] = path
    errors: list[str] = []
    warnings: list[str] = []
    unchecked: list[str] = []
    for sev, line, msg, text in diags:
        um = _UNRESOLVED.match(msg)
        if sev == "e" and um is not None and not_modelled:
            name = um["name"]
            on_import = 1 <= line <= len(lines) and _IMPORT.match(lines[line - 1]) is not None
            hit = not_modelled.get(name)
            if hit is None and on_import:  # the import line itself: any segment of its path
                path = _IMPORT.match(lines[line - 1])["path"].replace("`", "")  # type: ignore[index]
                hit = path if path in not_modelled.values() and name in path.split(".") else None
            if hit is not None:
                if hit not in unchecked:
                    unchecked.append(hit)
                warnings.append(
                    text.replace("e: ", "w: ", 1)
                    + f" (not checked: {hit} is not in droidwire's API {API_LEVEL} stubs)"
                )
                continue
        (errors if sev == "e" else warnings).append(text)
    return errors, warnings, unchecked
