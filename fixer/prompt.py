"""The LLM side of a fix: the prompt we send, and the guards on the reply we accept.

The prompt carries the test, the parsed errors and the real declarations the test needs (the
bodies of the methods it calls and cannot resolve, found in the source index), and asks for
the whole fixed file back. The reply is untrusted text: we extract the code (fenced or not)
and refuse it when it is not code, drops the test class, changes the package, or "fixes" an
unresolved name by declaring a stub of the app's own class — the test is the only thing a
fix may touch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fixer.errors import CompileError
from fixer.exceptions import ReplyRejected
from fixer.source_index import ClassRecord, MethodRecord, SourceCodeIndex

__all__ = [
    "Context",
    "build_messages",
    "collect_context",
    "declared_names",
    "extract_code",
    "package_of",
    "validate_reply",
]

# Limits: the prompt must fit a small local model's context window.
MAX_BODIES_CHARS = 12_000
MAX_RECORDS_PER_SYMBOL = 3
MAX_DETAIL_IN_PROMPT = 8
MAX_ERRORS_IN_PROMPT = 40

SYSTEM_PROMPT = """\
You repair Android instrumented tests (Kotlin or Java) so that they compile.
Rules:
- Reply with the complete fixed test file in ONE fenced code block, and nothing else.
- Keep the package declaration and the test class name exactly as they are.
- Keep every test method and what it exercises; change only what the compiler rejects.
- Use only the app's real API shown below; never declare stubs or copies of app classes.
- Add missing imports rather than fully qualifying names inline."""

_PACKAGE = re.compile(r"^\s*package\s+([\w.`]+)\s*;?\s*$", re.MULTILINE)
_DECLARATION = re.compile(
    r"^(?:[ \t]*@[\w.]+(?:\([^)]*\))?\s+)*[ \t]*"
    r"(?:(?:public|private|internal|protected|open|abstract|final|data|sealed|inner|enum|"
    r"annotation|static|inline|value|companion)\s+)*"
    r"(?P<kind>class|interface|object|fun|record)\s+(?:<[^>]*>\s*)?(?P<name>[A-Za-z_][\w]*)",
    re.MULTILINE,
)
_TOP_LEVEL_DECLARATION = re.compile(
    r"^(?:@[\w.]+(?:\([^)]*\))?\s+)*"
    r"(?:(?:public|private|internal|open|abstract|final|data|sealed|enum|annotation|inline|value)\s+)*"
    r"(?P<kind>class|interface|object|fun)\s+(?:<[^>]*>\s*)?(?P<name>[A-Za-z_][\w]*)",
    re.MULTILINE,
)
_FENCE = re.compile(
    r"```[ \t]*(?P<lang>[\w+#.-]*)[^\n]*\n(?P<code>.*?)(?:\n[ \t]*```|\Z)", re.DOTALL
)
_CODE_START = re.compile(
    r"^(?:package |import |@|(?:public |internal |open |abstract )*class )", re.MULTILINE
)
_THINKING = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)
_TEST_ANNOTATION = re.compile(r"@(?:org\.junit\.)?Test\b")


def package_of(code: str) -> str | None:
    m = _PACKAGE.search(code)
    return m.group(1).replace("`", "") if m else None


def declared_names(code: str, *, top_level_only: bool = False) -> list[str]:
    """Names of the classes, objects and functions a file declares (text scan, cheap)."""
    pattern = _TOP_LEVEL_DECLARATION if top_level_only else _DECLARATION
    return [m.group("name") for m in pattern.finditer(code)]


def _class_names(code: str) -> set[str]:
    return {
        m.group("name")
        for m in _DECLARATION.finditer(code)
        if m.group("kind") in ("class", "object", "interface", "record")
    }


@dataclass(slots=True)
class Context:
    """The app's declarations relevant to a set of errors."""

    methods: list[MethodRecord]
    classes: list[ClassRecord]

    def render(self, index: SourceCodeIndex | None = None) -> str:
        out: list[str] = []
        used = 0
        for c in self.classes:
            line = f"- {c.kind} {c.qualified_name}"
            if index is not None:
                sigs = [m.signature for m in index.methods_of(c.qualified_name)][:12]
                if sigs:
                    line += ":\n" + "\n".join(f"    {s}" for s in sigs)
            out.append(line)
            used += len(line)
        for m in self.methods:
            block = f"// {m.qualified_name} ({m.file}:{m.start_line})\n{m.body}"
            if used + len(block) > MAX_BODIES_CHARS:
                out.append(f"// {m.qualified_name}: {m.signature}  (body omitted: prompt budget)")
                continue
            out.append(block)
            used += len(block)
        return "\n\n".join(out)


_CALL = re.compile(r"([A-Za-z_]\w*)\s*(?:\(|\{)")
_CHAIN = re.compile(r"[A-Za-z_][\w.]*")


def _names_at(code: str, line: int | None, column: int | None) -> list[str]:
    """Names an error points at: the dotted chain at its column, then every call on its line."""
    if line is None:
        return []
    lines = code.splitlines()
    if not 1 <= line <= len(lines):
        return []
    text = lines[line - 1]
    names: list[str] = []
    if column is not None:
        for m in _CHAIN.finditer(text):
            if m.end() > column - 1:
                names.extend(part for part in m.group(0).split(".") if part)
                break
    names.extend(m.group(1) for m in _CALL.finditer(text))
    return names


def collect_context(
    code: str, errors: Iterable[CompileError], index: SourceCodeIndex | None
) -> Context:
    """Look up what the errors point at: unresolved names, and the callee at each error."""
    if index is None:
        return Context([], [])
    names: list[str] = []
    for e in errors:
        for candidate in (e.symbol, *_names_at(code, e.line, e.column)):
            if candidate and candidate not in names:
                names.append(candidate)
    methods: list[MethodRecord] = []
    classes: list[ClassRecord] = []
    for name in names:
        methods.extend(index.lookup(name)[:MAX_RECORDS_PER_SYMBOL])
        if name[:1].isupper():
            classes.extend(index.find_class(name)[:MAX_RECORDS_PER_SYMBOL])
    return Context(methods=methods, classes=classes)


def build_messages(
    code: str,
    errors: Sequence[CompileError],
    context: Context | None = None,
    index: SourceCodeIndex | None = None,
) -> list[dict[str, str]]:
    """Chat messages for an OpenAI-compatible ``chat.completions`` call."""
    shown = list(errors)[:MAX_ERRORS_IN_PROMPT]
    source = code.splitlines()

    def describe(e: CompileError) -> str:
        text = (
            f"- line {e.line if e.line is not None else '?'}"
            f"{':' + str(e.column) if e.column is not None else ''}: {e.message}"
            + (f" (symbol: {e.symbol})" if e.symbol else "")
            + (f" (location: {e.location})" if e.location else "")
        )
        if e.line is not None and 1 <= e.line <= len(source):
            text += f"\n    at: {source[e.line - 1].strip()[:200]}"
        for line in e.detail[:MAX_DETAIL_IN_PROMPT]:  # e.g. Dagger's "is injected at" chain
            text += f"\n    | {line[:200]}"
        return text

    error_lines = "\n".join(describe(e) for e in shown)
    if len(errors) > len(shown):
        error_lines += f"\n- … and {len(errors) - len(shown)} more"
    lang = "java" if _looks_java(code) else "kotlin"
    parts = [
        "The test below does not compile.",
        f"Compiler errors:\n{error_lines or '- (no parsed errors)'}",
        f"Test file:\n```{lang}\n{code}\n```",
    ]
    rendered = context.render(index) if context is not None else ""
    if rendered:
        parts.append(f"Declarations in the app under test:\n```\n{rendered}\n```")
    parts.append("Return the whole fixed test file.")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _looks_java(code: str) -> bool:
    return bool(re.search(r"^\s*package\s+[\w.]+\s*;", code, re.MULTILINE)) or (
        "fun " not in code and bool(re.search(r"\b(?:public|private)\s+(?:static\s+)?void\s", code))
    )


# --------------------------------------------------------------------------------------
# The reply


def extract_code(reply: str | None) -> str:
    """The code in an LLM reply: the largest fenced block, or the reply itself when unfenced.

    Raises ``ReplyRejected("not_code")`` when nothing in it looks like a source file.
    """
    if not reply or not reply.strip():
        raise ReplyRejected("not_code", "empty reply")
    # Reasoning models (served by Ollama, vLLM…) think aloud first; drafts in there do not count.
    text = _THINKING.sub("", reply.replace("\r\n", "\n"))
    blocks = [m.group("code") for m in _FENCE.finditer(text)]
    candidates = [b for b in blocks if _CODE_START.search(b) or "class " in b]
    if candidates:
        code = max(candidates, key=len)
    else:
        # Unfenced: drop any prose before the first line that starts a source file, and
        # any after the last closing brace.
        start = _CODE_START.search(text)
        if start is None:
            raise ReplyRejected("not_code", "no source file in the reply")
        code = text[start.start() :]
        last = code.rfind("}")
        if last != -1:
            code = code[: last + 1]
    code = code.strip("\n")
    if not re.search(r"\b(?:class|object)\s+\w+", code) or "{" not in code:
        raise ReplyRejected("not_code", "the reply declares no class")
    if code.count("{") != code.count("}"):
        raise ReplyRejected("not_code", "unbalanced braces (truncated reply?)")
    if len(_PACKAGE.findall(code)) > 1:
        raise ReplyRejected("not_code", "several files in one reply")
    return code + "\n"


def validate_reply(
    original: str,
    candidate: str,
    *,
    unresolved: Iterable[str] = (),
    index: SourceCodeIndex | None = None,
) -> None:
    """Raise ``ReplyRejected`` unless ``candidate`` is an acceptable repair of ``original``."""
    if package_of(candidate) != package_of(original):
        raise ReplyRejected(
            "package_changed", f"package {package_of(original)!r} became {package_of(candidate)!r}"
        )
    missing = _class_names(original) - _class_names(candidate)
    if missing:
        raise ReplyRejected("dropped_test_class", f"class(es) {sorted(missing)} missing")
    if _TEST_ANNOTATION.search(original) and not _TEST_ANNOTATION.search(candidate):
        raise ReplyRejected("dropped_test_class", "no @Test method left")
    # A fix touches the test only: no new declarations standing in for the app's symbols.
    new_names = set(declared_names(candidate)) - set(declared_names(original))
    app_names = set(unresolved)
    if index is not None:
        app_names |= {n for n in new_names if index.find_class(n)}
    stubbed = sorted(new_names & app_names)
    if stubbed:
        raise ReplyRejected("stubbed_app_symbol", f"the reply declares {stubbed} itself")
    if candidate.strip() == original.strip():
        raise ReplyRejected("unchanged", "the reply is the original code")
