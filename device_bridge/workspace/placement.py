"""Where a test's source file goes, decided from the test code alone — and what is refused.

The only file the bridge ever writes into a workspace is the test source (docs/design.md §6). Its
path is *derived*, never taken from the caller:

    <module>/src/androidTest/<java|kotlin>/<package as dirs>/<TestClass>.kt

``package`` is the test's ``package`` declaration and must lie inside the app's namespace
(``com.droidwire.demo`` or below it); ``TestClass`` is the test's top-level class. Both must be
plain ASCII Kotlin identifiers, so no spelling of a name can reach outside the androidTest
source set or land on a build file: a name that tries (``..``, ``/``, ``build.gradle.kts``)
is refused with ``forbidden``; one that is merely malformed with ``bad_request``.

The Kotlin reading is deliberately small: comments and string literals are blanked out
(templates ``${…}`` included), then ``package`` and top-level ``class`` declarations are read
at brace depth 0. It works on drafts that do not compile, which is what the compile–fix loop
hands us.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ErrorCode, RpcError

__all__ = [
    "MAX_TEST_CODE_BYTES",
    "RESERVED_FILE_NAMES",
    "TestPlacement",
    "blank_comments_and_strings",
    "place_test",
    "read_namespace",
]

MAX_TEST_CODE_BYTES = 512 * 1024

# Files a test must never land on, whatever the mapping from names to paths becomes.
RESERVED_FILE_NAMES = frozenset(
    {
        "build.gradle",
        "build.gradle.kts",
        "settings.gradle",
        "settings.gradle.kts",
        "gradle.properties",
        "local.properties",
        "gradlew",
        "gradlew.bat",
        "AndroidManifest.xml",
        "proguard-rules.pro",
        "libs.versions.toml",
    }
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_KEYWORDS = frozenset(
    "as break class continue do else false for fun if in interface is null object package "
    "return super this throw true try typealias typeof val var when while".split()
)
_TOKEN_AFTER_PACKAGE = re.compile(r"\s*([^\s;]+)")
_TOKEN_AFTER_CLASS = re.compile(r"\s*([^\s(){}:<]+)")


@dataclass(frozen=True)
class TestPlacement:
    """The derived location of a test source file, relative to the module's androidTest dir."""

    package: str
    class_name: str  # the primary test class (simple name)
    classes: tuple[str, ...]  # every top-level class, in source order

    @property
    def qualified_class(self) -> str:
        return f"{self.package}.{self.class_name}"

    @property
    def relative_parts(self) -> tuple[str, ...]:
        """Path parts under ``src/androidTest/<lang>/``: package dirs, then the file name."""
        return (*self.package.split("."), f"{self.class_name}.kt")


def _refuse(code: ErrorCode, message: str, rule: str, **extra: object) -> RpcError:
    return RpcError(code, message, {"rule": rule, **extra})


def blank_comments_and_strings(src: str) -> str:
    """``src`` with comments and string/char literals replaced by spaces (newlines kept).

    Handles nested block comments, raw strings and string templates (``"${a + "}"}"``).
    """
    out = list(src)
    n = len(src)
    i = 0
    # Stack of contexts: "code" (top level or inside a ${…} template, with its brace depth),
    # "str" (a "…" literal) and "raw" (a """…""" literal).
    stack: list[list[object]] = [["code", 0]]

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        kind = stack[-1][0]
        c = src[i]
        if kind == "code":
            if src.startswith("//", i):
                j = src.find("\n", i)
                j = n if j < 0 else j
                blank(i, j)
                i = j
            elif src.startswith("/*", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    if src.startswith("/*", j):
                        depth, j = depth + 1, j + 2
                    elif src.startswith("*/", j):
                        depth, j = depth - 1, j + 2
                    else:
                        j += 1
                blank(i, j)
                i = j
            elif src.startswith('"""', i):
                stack.append(["raw", i])
                blank(i, i + 3)
                i += 3
            elif c == '"':
                stack.append(["str", i])
                blank(i, i + 1)
                i += 1
            elif c == "'":
                j = i + 1
                while j < n and src[j] != "'" and src[j] != "\n":
                    j += 2 if src[j] == "\\" else 1
                blank(i, j + 1)
                i = j + 1
            elif c == "{":
                stack[-1][1] = int(stack[-1][1]) + 1  # type: ignore[call-overload]
                i += 1
            elif c == "}":
                if len(stack) > 1 and stack[-1][1] == 0:
                    stack.pop()  # end of a ${…} template: back into its string
                    blank(i, i + 1)
                else:
                    stack[-1][1] = int(stack[-1][1]) - 1  # type: ignore[call-overload]
                i += 1
            else:
                i += 1
        else:
            if kind == "str" and c == "\\":
                blank(i, i + 2)
                i += 2
            elif kind == "str" and c == "\n":
                stack.pop()  # an unterminated literal ends at the line
                i += 1
            elif src.startswith("${", i):
                blank(i, i + 2)
                stack.append(["code", 0])
                i += 2
            elif kind == "raw" and src.startswith('"""', i):
                j = i + 3
                while j < n and src[j] == '"':
                    j += 1
                blank(i, j)
                stack.pop()
                i = j
            elif kind == "str" and c == '"':
                blank(i, i + 1)
                stack.pop()
                i += 1
            else:
                blank(i, i + 1)
                i += 1
    return "".join(out)


def _check_escape(token: str, what: str) -> None:
    if "/" in token or "\\" in token or ".." in token or token.startswith("."):
        raise _refuse(
            ErrorCode.FORBIDDEN,
            f"refused: {what} {token!r} would place the test outside the androidTest sources",
            "path_escape",
        )


def _check_identifier(token: str, what: str) -> None:
    _check_escape(token, what)
    if token in RESERVED_FILE_NAMES or f"{token}.kt" in RESERVED_FILE_NAMES or "." in token:
        raise _refuse(
            ErrorCode.FORBIDDEN,
            f"refused: {what} {token!r} is not a plain Kotlin identifier; a test can only"
            " write its own .kt source, never a build file",
            "build_file",
        )
    if not _IDENT.match(token) or token in _KEYWORDS:
        raise _refuse(
            ErrorCode.BAD_REQUEST,
            f"{what} {token!r} is not a plain ASCII Kotlin identifier",
            "identifier",
        )


def place_test(test_code: str, namespace: str) -> TestPlacement:
    """Read the test's package and classes and check them against the app's ``namespace``."""
    if not isinstance(test_code, str) or not test_code.strip():
        raise _refuse(ErrorCode.BAD_REQUEST, "test_code is empty", "empty")
    if "\x00" in test_code:
        raise _refuse(ErrorCode.BAD_REQUEST, "test_code contains a NUL byte", "nul")
    if len(test_code.encode("utf-8", "surrogatepass")) > MAX_TEST_CODE_BYTES:
        raise _refuse(
            ErrorCode.BAD_REQUEST,
            f"test_code exceeds {MAX_TEST_CODE_BYTES} bytes",
            "too_large",
            limit=MAX_TEST_CODE_BYTES,
        )

    code = blank_comments_and_strings(test_code)
    package: str | None = None
    classes: list[tuple[str, int, int]] = []  # (name, body start, body end)
    depth = 0
    open_class: tuple[str, int] | None = None  # a class whose body has not opened yet
    for m in re.finditer(r"[{}]|\bpackage\b|\bclass\b", code):
        word = m.group()
        if word == "{":
            if depth == 0 and open_class is not None:
                classes.append((open_class[0], m.end(), len(code)))
                open_class = None
            depth += 1
        elif word == "}":
            depth = max(0, depth - 1)
            if depth == 0 and classes and classes[-1][2] == len(code):
                name, start, _ = classes[-1]
                classes[-1] = (name, start, m.start())
        elif depth == 0 and word == "package" and package is None and not classes:
            tok = _TOKEN_AFTER_PACKAGE.match(code, m.end())
            if tok is None:
                raise _refuse(ErrorCode.BAD_REQUEST, "empty package declaration", "package")
            package = tok.group(1)
        elif depth == 0 and word == "class" and code[max(0, m.start() - 2) : m.start()] != "::":
            tok = _TOKEN_AFTER_CLASS.match(code, m.end())
            if tok is None:
                continue
            if open_class is not None:  # a body-less class (class Foo) before this one
                classes.append((open_class[0], m.start(), m.start()))
            open_class = (tok.group(1), m.end())
    if open_class is not None:
        classes.append((open_class[0], len(code), len(code)))

    if package is None:
        raise _refuse(
            ErrorCode.BAD_REQUEST,
            f"the test has no package declaration; declare one inside {namespace}",
            "package_missing",
            namespace=namespace,
        )
    _check_escape(package, "package")
    for segment in package.split("."):
        _check_identifier(segment, "package segment")
    if package != namespace and not package.startswith(namespace + "."):
        raise _refuse(
            ErrorCode.FORBIDDEN,
            f"refused: package {package} lies outside the app's namespace {namespace}",
            "package_outside_namespace",
            namespace=namespace,
            package=package,
        )
    if not classes:
        raise _refuse(ErrorCode.BAD_REQUEST, "the test declares no top-level class", "no_class")
    for name, _, _ in classes:
        _check_identifier(name, "class name")
    # The primary class: the first one whose body holds an @Test, else the first one.
    primary = next((c for c in classes if "@Test" in code[c[1] : c[2]]), classes[0])[0]
    return TestPlacement(package, primary, tuple(c[0] for c in classes))


_GRADLE_NAMESPACE = re.compile(r"""^\s*namespace\s*(?:=\s*)?["']([A-Za-z0-9_.]+)["']""", re.M)
_MANIFEST_PACKAGE = re.compile(
    r"""<manifest\b[^>]*?\bpackage\s*=\s*["']([A-Za-z0-9_.]+)["']""", re.S
)


def read_namespace(module_dir: Path) -> str | None:
    """The app's namespace: ``namespace`` in the module's build script, else the manifest's
    ``package`` attribute; None when neither is there."""
    for script in ("build.gradle.kts", "build.gradle"):
        try:
            text = (module_dir / script).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = _GRADLE_NAMESPACE.search(re.sub(r"/\*.*?\*/", "", text, flags=re.S))
        if m:
            return m.group(1)
    try:
        manifest = (module_dir / "src" / "main" / "AndroidManifest.xml").read_text(
            encoding="utf-8", errors="replace"
        )
    except OSError:
        return None
    m = _MANIFEST_PACKAGE.search(re.sub(r"<!--.*?-->", "", manifest, flags=re.S))
    return m.group(1) if m else None
