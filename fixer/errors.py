"""Gradle / kotlinc / javac output → structured compile errors (docs/design.md §9, ``fixer errors``).

Pure text in, data out: no I/O. The parser is line-oriented and forgiving, because what
reaches it is often a paste: GitHub Actions timestamps, markdown quotes and backticks,
wrapper indentation, truncated last lines, dropped ``e:`` prefixes. What it fills in — the
data (:class:`~fixer.diagnostics.CompileError`, :class:`~fixer.diagnostics.CompileReport`) and
the message kinds (:func:`~fixer.diagnostics.classify_message`) — is :mod:`fixer.diagnostics`;
those names are importable from here too.

Shapes recognised (see the corpus' VARIATIONS.md §6):

* kotlinc ≤ 1.7   ``e: /abs/Foo.kt: (12, 5): Unresolved reference: bar`` (Windows paths too)
* kotlinc 1.8/1.9 ``e: file:///abs/Foo.kt:12:5 Unresolved reference: bar`` (``file:///C:/…``)
* kotlinc 2 (K2)  ``e: file:///abs/Foo.kt:12:5 Unresolved reference 'bar'.``
* kotlinc CLI     ``Foo.kt:12:5: error: unresolved reference 'bar'.``
* a location with the message on the next line, or a message wrapped over several lines
* kotlinc 2's multi-line messages: ``None of the following candidates is applicable:`` with
  one candidate a line (kept whole, one a line), and a quoted signature broken by a contract
  dump (joined up to its closing quote)
* ``w:`` / ``warning:`` lines → severity ``warning``
* javac           ``Foo.java:12: error: cannot find symbol`` + source line + caret line
                  (the caret gives the column) + ``symbol:`` / ``location:`` lines
* Gradle          ``> Task :m:compileX FAILED``, ``* What went wrong:``, ``BUILD FAILED``,
                  and failures that are not compile errors (dependency resolution, missing
                  SDK, daemon crash, build-script errors) → ``failure: "build_config"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

from fixer.diagnostics import (
    CompileError,
    CompileReport,
    ErrorKind,
    Failure,
    Severity,
    classify_message,
)

__all__ = [
    "CompileError",
    "CompileReport",
    "ErrorKind",
    "Failure",
    "classify_message",
    "parse_errors",
]


# --------------------------------------------------------------------------------------
# Line clean-up: wrappers that pastes and CI tools put around compiler output.

# GitHub Actions: ``2020-10-21T13:44:03.3295751Z `` (7 fractional digits), other ISO stamps.
_TIMESTAMP = re.compile(r"^\ufeff?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s")
# Terminal colours (``--console=rich``, CI logs) and GitHub Actions workflow commands.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_GHA_COMMAND = re.compile(r"^##\[(?:error|warning|debug|notice|group|endgroup)\]")
# Markdown and bullet decorations: backticks, ``> `` quotes, ``- `` bullets.
_DECORATION = re.compile(r"^(?:`{1,3}|>\s|-\s|\*\s)+")

_SRC_EXT = r"(?:kts?|java|gradle)"

# kotlinc 1.8+: file URI (or a bare path) with ``:L:C`` then the message (maybe empty).
_K_URI = re.compile(
    rf"^(?P<path>file:(?://)?\S.*?\.{_SRC_EXT}):(?P<line>\d+):(?P<col>\d+):?(?:\s+(?P<msg>.*))?$"
)
# kotlinc ≤1.7: ``path: (L, C): message``.
_K_PAREN = re.compile(
    rf"^(?P<path>\S.*?\.{_SRC_EXT}):\s*\((?P<line>\d+),\s*(?P<col>\d+)\)(?::\s*(?P<msg>.*))?$"
)
# kotlinc CLI / K2 ``path:L:C: error: msg``; also a bare ``path:L:C msg`` (no ``file://``).
_K_CLI = re.compile(
    rf"^(?P<path>\S.*?\.{_SRC_EXT}):(?P<line>\d+):(?P<col>\d+):?"
    r"(?:\s+(?:(?P<sev>error|warning|info):\s*)?(?P<msg>.*))?$"
)
# javac's severity word, in English and in the locales the JDK ships messages for
# (Japanese, Simplified Chinese, German): a javac run on a developer's machine speaks its locale.
_JAVAC_ERROR_WORDS = ("error", "エラー", "错误", "錯誤", "Fehler")
_JAVAC_WARNING_WORDS = ("warning", "警告", "Warnung")
_JAVAC_SEV = "|".join(_JAVAC_ERROR_WORDS + _JAVAC_WARNING_WORDS)
# javac (and kapt): ``path.java:L: error: msg``.
_JAVAC = re.compile(
    rf"^(?P<path>\S.*?\.java):(?P<line>\d+):\s*(?P<sev>{_JAVAC_SEV})\s*[:：]\s*(?P<msg>.*)$"
)
# Android Studio 2.x/3.x "Messages" window: the file on one line, then
# ``Error:(12, 5) Unresolved reference: bar`` (javac: ``Error:(12, 5) error: cannot find symbol``).
_STUDIO_MESSAGE = re.compile(
    r"^(?P<sev>Error|Warning):\((?P<line>\d+),\s*(?P<col>\d+)\)\s*(?:(?:error|warning):\s*)?(?P<msg>.*)$"
)
_BARE_SOURCE_PATH = re.compile(rf"^(?P<path>\S.*\.{_SRC_EXT})$")
# ``w: file:///…/Foo.kt: no @Test methods found``: a file but no position (after ``e:``/``w:``).
_FILE_ONLY = re.compile(rf"^(?P<path>(?:file:(?://)?)?\S.*?\.{_SRC_EXT}):\s+(?P<msg>\S.*)$")
_SEVERITY_PREFIX = re.compile(
    r"^(?P<sev>e|w|i|v|error|warning|info|ERROR|WARNING):\s?(?P<rest>.*)$"
)

_CARET = re.compile(r"^(?P<pad>\s*)\^\s*$")
# javac's follow-up labels, also in the JDK's Simplified Chinese, Japanese and German messages.
_JAVAC_SYMBOL = re.compile(r"^\s*(?:symbol|符号|シンボル|Symbol)\s*[:：]\s*(?P<sym>.+?)\s*$")
_JAVAC_LOCATION = re.compile(r"^\s*(?:location|位置|場所|Ort)\s*[:：]\s*(?P<loc>.+?)\s*$")

_FAILED_TASK = re.compile(r"(?:^|\s)(?:>\s*)?(?:Task\s+)?(?P<task>:[\w.\-:]*[\w\-])\s+FAILED\b")
_EXEC_FAILED = re.compile(r"Execution failed for task '(?P<task>:[^']+)'")
_SEEN_TASK = re.compile(r"(?:^|\s)(?:>\s*)?Task\s+(?P<task>:[\w.\-:]*[\w\-])\b")
_COMPILE_TASK = re.compile(r"compile\w*(?:Kotlin|Java\w*|Sources)$")

_BUILD_FAILED = re.compile(
    r"^(?:BUILD FAILED\b|FAILURE: Build (?:failed|completed with)|Error: Gradle task \S+ failed)"
)
_BUILD_OK = re.compile(r"^BUILD SUCCESSFUL\b")
_COMPILE_FAILURE_TEXT = re.compile(
    r"Compilation error\. See log|Compilation failed; see the compiler error output"
    r"|Script compilation error|Compilation failed",
    re.IGNORECASE,
)

# Build failures that no edit of the test can fix: do not waste an LLM round on them.
_BUILD_CONFIG = re.compile(
    "|".join(
        (
            r"Could not resolve (?:all|dependencies|\S+:\S+)",
            r"Could not find [\w.\-]+:[\w.\-]+",
            r"Could not (?:download|GET|HEAD) ",
            r"Could not determine the dependencies",
            r"SDK location not found",
            r"ANDROID_(?:HOME|SDK_ROOT)",
            r"sdk\.dir",
            r"Failed to (?:find|install) (?:the following )?(?:Build Tools|Platform|Android SDK|target)",
            r"License for package .* not accepted",
            r"licen[cs]es? .*not (?:been )?accepted",
            r"daemon (?:disappeared|crashed|stopped)",
            r"Gradle build daemon",
            r"Could not (?:create|start|connect to) .*(?:daemon|service)",
            r"OutOfMemoryError|Java heap space|Metaspace",
            r"Plugin \[id: .*\] was not found",
            r"A problem occurred (?:configuring|evaluating) (?:root )?project",
            r"Unsupported class file major version",
            r"requires Java \d+|Android Gradle plugin requires",
            r"No matching variant",
            r"Duplicate class ",
            r"Timeout waiting to lock",
            r"Could not read workspace metadata",
            r"Could not open \S+ (?:generic class|class) cache",
            r"Unable to (?:find|start) .*(?:JDK|Java)",
            r"AAPT: error|Android resource linking failed",
            r"Manifest merger failed",
            r"invalid (?:source|target) release",
            r"compiled with an incompatible version of Kotlin|Incompatible classes were found in dependencies",
            r"jvm target compatibility should be set|Inconsistent JVM-target compatibility",
            r"No providers found in processor classpath",
        )
    ),
    re.IGNORECASE,
)

# Lines that are certainly not the continuation of a compiler message.
_NOT_CONTINUATION = re.compile(
    r"^(?:>|\*|FAILURE:|BUILD |Task |:[\w\-]|\d+ (?:errors?|warnings?)\b|Note:|e:|w:|i:"
    r"|error:|warning:|Runtime JAR|Execution failed|Run with|Try:|Get more help"
    r"|\d+ actionable tasks|Deprecated Gradle|You can use|See https?:|Starting |Running "
    r"|Launching |Error: Gradle|Exception:|Warning:|Caused by:|Compilation |Daemon |\[)",
)
_MAX_CONTINUATION = 4
# kotlinc 2's overload diagnostics end with a colon and list one candidate a line:
# ``None of the following candidates is applicable:`` / ``Overload resolution ambiguity
# between candidates:``. Those lists are kept whole (bounded), one candidate a line.
_CANDIDATE_LIST = re.compile(r"(?:candidates|following)[^:]*:$", re.IGNORECASE)
_MAX_CANDIDATES = 40


def _javac_symbol(text: str) -> str:
    """``class MainActivity`` → ``MainActivity``; ``method foo(String)`` → ``foo``."""
    parts = text.split(None, 1)
    name = parts[1] if len(parts) == 2 else parts[0]
    return name.split("(", 1)[0].strip()


# --------------------------------------------------------------------------------------
# The parser.


def _normalise_path(raw: str) -> str:
    path = raw.strip()
    if path.startswith("file:"):
        # kotlinc prints a URI: percent-escapes (``Adil%20Ashfaq``) stand for the path's bytes.
        path = unquote(path[len("file://") :] if path.startswith("file://") else path[5:])
    # ``file:///C:/Users/…`` → ``C:/Users/…``: the drive letter is the real start.
    if re.match(r"^/[A-Za-z]:[/\\]", path):
        path = path[1:]
    return path


@dataclass(slots=True)
class _Line:
    raw: str  # the line with wrappers (timestamp) removed but indentation kept
    text: str  # stripped of indentation and decorations


def _clean(line: str) -> _Line:
    line = _ANSI.sub("", line.rstrip("\r\n")).replace("\t", "    ")
    line = _TIMESTAMP.sub("", line, count=1)
    line = _GHA_COMMAND.sub("", line, count=1)
    text = line.strip()
    # Decorations only matter when what follows them is something we recognise.
    undecorated = _DECORATION.sub("", text).rstrip("`").strip()
    if undecorated in (">", "-", "*"):  # a quoted or bulleted empty line is an empty line
        undecorated = ""
    return _Line(raw=line.rstrip(), text=undecorated)


@dataclass(slots=True)
class _Pending:
    """An error whose message may continue on the next lines."""

    file: str | None
    line: int | None
    column: int | None
    severity: Severity
    parts: list[str]
    continuations: int = 0
    prefix: str | None = None  # the severity prefix its first line carried (``e``, ``w``)
    detail: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Javac:
    """A javac (or javac-through-kapt) error being completed by its follow-up lines."""

    file: str
    line: int
    severity: Severity
    message: str
    indent: int
    prefix: str | None
    column: int | None = None
    symbol: str | None = None
    location: str | None = None
    source_lines: int = 0
    detail: list[str] = field(default_factory=list)


def _match_location(text: str) -> tuple[re.Match[str], bool] | None:
    """Match a compiler location line; returns (match, has explicit javac shape)."""
    m = _JAVAC.match(text)
    if m:
        return m, True
    for pattern in (_K_URI, _K_PAREN, _K_CLI):
        m = pattern.match(text)
        if m:
            return m, False
    return None


_MAX_DETAIL = 40  # detail lines kept per diagnostic
_MAX_DETAIL_CHARS = 400
# The end of a task's output: nothing after it continues a diagnostic.
_TASK_END = re.compile(
    r"^(?:>\s*Task\s|Task\s+:|FAILURE:|BUILD (?:FAILED|SUCCESSFUL)|\*\s*What went wrong"
    r"|\d+ (?:errors?|warnings?)\b|Execution failed for task)"
)
# An unlocated line that starts a diagnostic of its own even under a prefix (``e: error: …``).
_FRESH = re.compile(rf"^(?:{_JAVAC_SEV}|info)\s*[:：]", re.IGNORECASE)
_PREFIX_ON_RAW = re.compile(r"^(?P<p>e|w):(?: |$)")


def _add_detail(detail: list[str], text: str) -> None:
    text = text.strip()
    if text and len(detail) < _MAX_DETAIL:
        detail.append(text[:_MAX_DETAIL_CHARS])


def parse_errors(output: str | Iterable[str]) -> CompileReport:
    """Parse a build's combined output. Never raises on any text.

    A diagnostic is a *located* first line (file and line) plus every line that belongs to it,
    up to the next located diagnostic or the end of the task's output. kapt repeats the severity
    prefix on each of those lines (``e:  ^``, ``e:       X is injected at``): they are the
    diagnostic's continuation, never diagnostics of their own.
    """
    lines = output.splitlines() if isinstance(output, str) else [str(x) for x in output]
    cleaned = [_clean(x) for x in lines]
    last_nonblank = max((i for i, c in enumerate(cleaned) if c.text), default=-1)

    report = CompileReport()
    errors: list[CompileError] = []
    pending: _Pending | None = None
    javac: _Javac | None = None  # the javac error being completed
    held = False  # a blank line was seen inside a prefixed diagnostic: only prefixed lines go on
    saw_failed_marker = False
    saw_success = False
    saw_compile_failure_text = False
    seen_tasks: list[str] = []
    in_what_went_wrong = False
    studio_file: str | None = None  # the file heading Android Studio's message lines

    def flush() -> None:
        nonlocal pending
        if pending is None:
            return
        parts = [p for p in pending.parts if p]
        if parts and _CANDIDATE_LIST.search(parts[0]):
            message = "\n".join(parts).strip()
        else:
            message = " ".join(parts).strip()
        kind, symbol = classify_message(message)
        errors.append(
            CompileError(
                file=pending.file,
                line=pending.line,
                column=pending.column,
                severity=pending.severity,
                message=message,
                kind=kind,
                symbol=symbol,
                detail=tuple(pending.detail),
            )
        )
        pending = None

    def flush_javac() -> None:
        nonlocal javac
        if javac is None:
            return
        message = javac.message
        kind, symbol = classify_message(message)
        if javac.symbol:
            symbol = javac.symbol
            if kind == "other":
                kind = "unresolved_reference"
        errors.append(
            CompileError(
                file=javac.file,
                line=javac.line,
                column=javac.column,
                severity=javac.severity,
                message=message,
                kind=kind,
                symbol=symbol if kind == "unresolved_reference" else None,
                location=javac.location,
                detail=tuple(javac.detail),
            )
        )
        javac = None

    def close() -> None:
        nonlocal held
        flush()
        flush_javac()
        held = False

    def javac_follow(raw: str, text: str, prefixed: bool) -> bool:
        """Give a line to the open javac error; False when it does not belong to it."""
        assert javac is not None
        caret = _CARET.match(raw)
        if caret and javac.column is None:
            pad = len(caret.group("pad")) - javac.indent
            javac.column = max(pad, 0) + 1
            return True
        sym = _JAVAC_SYMBOL.match(text)
        if sym:
            javac.symbol = _javac_symbol(sym.group("sym"))
            return True
        loc = _JAVAC_LOCATION.match(text)
        if loc:
            javac.location = loc.group("loc")
            return True
        if javac.source_lines == 0 and _match_location(text) is None:
            javac.source_lines = 1  # the offending source line, echoed
            return True
        # Past the echo: indented lines (Dagger's chain, ``where T is a type-variable``) and,
        # under kapt's prefix, every line belong to this error.
        indent = len(raw) - len(raw.lstrip())
        if prefixed or indent > javac.indent:
            _add_detail(javac.detail, text)
            return True
        return False

    def open_prefix() -> str | None:
        if javac is not None:
            return javac.prefix
        if pending is not None and pending.file is not None:
            return pending.prefix
        return None

    for index, cur in enumerate(cleaned):
        text = cur.text
        prefix_m = _PREFIX_ON_RAW.match(text)  # on the undecorated line, inner spacing kept

        # --- a line under the open located diagnostic's own severity prefix, with no location
        # of its own: it belongs to that diagnostic (kapt/Dagger print one error this way).
        owner = open_prefix()
        if owner is not None and prefix_m is not None and prefix_m.group("p") == owner:
            inner_raw = text[prefix_m.end():]
            body = inner_raw.strip()
            # javac-shaped errors (what kapt reports) own every such line; a Kotlin one only
            # lines indented under the prefix: kotlinc's own unlocated messages (``w: Runtime
            # JAR files …``) start right after it and are diagnostics of their own.
            belongs = javac is not None or inner_raw[:2].isspace()
            if belongs and _match_location(body) is None and not _FRESH.match(body):
                held = False
                if not body:
                    continue
                if javac is not None:
                    javac_follow(inner_raw, body, True)
                elif pending is not None:
                    _add_detail(pending.detail, body)
                continue
        if javac is not None and _SEVERITY_PREFIX.match(text):
            close()  # a diagnostic of its own: it ends the javac error being completed
        if held:
            if not text:
                continue
            close()  # a blank line, then something that is not this diagnostic's

        # --- javac follow-up lines: source line, caret, symbol:, location:, indented detail
        if javac is not None:
            if not text:
                if javac.prefix is not None:
                    held = True
                    continue
                flush_javac()
            elif _TASK_END.match(text) or not javac_follow(cur.raw, text, False):
                flush_javac()
            else:
                continue

        # --- Gradle structure (read on the undecorated line: ``*`` and ``>`` are Gradle's)
        plain = cur.raw.strip()
        if plain.startswith("* What went wrong"):
            close()
            in_what_went_wrong = True
            saw_failed_marker = True  # Gradle reports what went wrong only for a failed build
            continue
        if in_what_went_wrong:
            if plain.startswith("* ") or plain.startswith("BUILD "):
                in_what_went_wrong = False
            elif plain:
                report.what_went_wrong.append(plain.lstrip("> ").strip())
        for m in _FAILED_TASK.finditer(cur.raw):
            if m.group("task") not in report.failed_tasks:
                report.failed_tasks.append(m.group("task"))
        for m in _EXEC_FAILED.finditer(text):
            if m.group("task") not in report.failed_tasks:
                report.failed_tasks.append(m.group("task"))
        for m in _SEEN_TASK.finditer(text):
            seen_tasks.append(m.group("task"))
        if _BUILD_FAILED.match(text) or text == "FAILED":
            saw_failed_marker = True
        if _BUILD_OK.match(text):
            saw_success = True
        if _COMPILE_FAILURE_TEXT.search(text):
            saw_compile_failure_text = True

        if not text:
            if pending is not None and pending.prefix is not None and pending.file is not None:
                held = True
                continue
            flush()
            continue

        # --- compiler diagnostics
        studio = _STUDIO_MESSAGE.match(text)
        if studio:
            close()
            previous = cleaned[index - 1].text if index > 0 else ""
            bare = _BARE_SOURCE_PATH.match(previous)
            pending = _Pending(
                file=_normalise_path(bare.group("path")) if bare else studio_file,
                line=int(studio.group("line")),
                column=int(studio.group("col")),
                severity="warning" if studio.group("sev") == "Warning" else "error",
                parts=[studio.group("msg").strip()],
            )
            if bare:
                studio_file = pending.file
            continue
        severity: Severity = "error"
        body = text
        explicit_severity = False
        sev_prefix: str | None = None
        sev_match = _SEVERITY_PREFIX.match(text)
        if sev_match:
            explicit_severity = True
            sev_word = sev_match.group("sev").lower()
            if sev_word in ("i", "v", "info"):  # kotlinc's informational lines
                close()
                continue
            severity = "warning" if sev_word.startswith("w") else "error"
            body = sev_match.group("rest").strip()
            if sev_word in ("e", "w"):
                sev_prefix = sev_word

        located = _match_location(body)
        if located is not None:
            close()
            m, is_javac = located
            path = _normalise_path(m.group("path"))
            sev_group = m.groupdict().get("sev")
            if sev_group == "info":
                continue
            sev: Severity = severity
            if sev_group:
                sev = "warning" if sev_group in _JAVAC_WARNING_WORDS else "error"
            if is_javac:
                javac = _Javac(
                    file=path,
                    line=int(m.group("line")),
                    severity=sev,
                    message=m.group("msg").strip(),
                    indent=0 if sev_prefix else len(cur.raw) - len(cur.raw.lstrip()),
                    prefix=sev_prefix,
                )
                continue
            msg = (m.group("msg") or "").strip()
            pending = _Pending(
                file=path,
                line=int(m.group("line")),
                column=int(m.group("col")),
                severity=sev,
                parts=[msg],
                prefix=sev_prefix,
            )
            continue

        if explicit_severity:
            close()
            file_only = _FILE_ONLY.match(body)
            if file_only:
                pending = _Pending(
                    _normalise_path(file_only.group("path")),
                    None,
                    None,
                    severity,
                    [file_only.group("msg")],
                    prefix=sev_prefix,
                )
                continue
            # A truncated last line (``e: fi``, ``e: file:///…/features/``) is damage, not
            # an error of its own.
            if index == last_nonblank and " " not in body:
                continue
            if not body:
                continue
            pending = _Pending(None, None, None, severity, [body])
            continue

        # --- continuation of the message being read
        if pending is not None:
            listing = bool(pending.parts) and bool(_CANDIDATE_LIST.search(pending.parts[0] or ""))
            # A quote left open (kotlinc 2 prints a contract's description inside a quoted
            # signature: ``'suspend fun <T> withContext(…): T`` / ``[R|Contract description]``
            # / … / ``>' should be called only from a coroutine …``, each line indented)
            # continues the message.
            quoted = sum(p.count("'") for p in pending.parts) % 2 == 1
            if quoted and cur.raw[:1] in (" ", "\t") and text and (
                pending.continuations < _MAX_CANDIDATES
            ):
                pending.parts.append(text)
                pending.continuations += 1
                continue
            if (
                pending.continuations < (_MAX_CANDIDATES if listing else _MAX_CONTINUATION)
                and not _NOT_CONTINUATION.match(text)
                and not _BARE_SOURCE_PATH.match(text)
                and not _BUILD_CONFIG.search(text)
            ):
                pending.parts.append(text)
                pending.continuations += 1
                continue
            flush()

    close()

    report.errors = errors
    _conclude(report, saw_failed_marker, saw_success, saw_compile_failure_text, seen_tasks, lines)
    return report


def _conclude(
    report: CompileReport,
    saw_failed_marker: bool,
    saw_success: bool,
    saw_compile_failure_text: bool,
    seen_tasks: list[str],
    lines: list[str],
) -> None:
    compile_errors = report.compile_errors
    located = [e for e in compile_errors if e.file]
    # Errors in build scripts are configuration problems, not the test's.
    in_sources = [e for e in located if not re.search(r"\.gradle(?:\.kts)?$", e.file or "")]

    failed = bool(compile_errors) or bool(report.failed_tasks) or saw_failed_marker
    if saw_success and not compile_errors and not report.failed_tasks:
        failed = False
    report.build_failed = failed

    # A truncated log whose failing task line was cut: the last compile task seen.
    if failed and not report.failed_tasks and compile_errors:
        compile_tasks = [t for t in seen_tasks if _COMPILE_TASK.search(t)]
        if compile_tasks:
            report.failed_tasks.append(compile_tasks[-1])

    if not failed:
        report.failure = "none"
        return
    unlocated = [e.message for e in compile_errors if not e.file]
    config_text = any(_BUILD_CONFIG.search(x) for x in [*report.what_went_wrong, *unlocated]) or (
        not compile_errors and any(_BUILD_CONFIG.search(x) for x in lines)
    )
    if in_sources:
        report.failure = "compile"
    elif located:  # only build-script errors
        report.failure = "build_config"
    elif config_text:
        report.failure = "build_config"
    elif compile_errors or saw_compile_failure_text:
        report.failure = "compile"
    elif any(_COMPILE_TASK.search(t) for t in report.failed_tasks):
        report.failure = "compile"
    else:
        report.failure = "build_config"
