"""``fix()``: one repair of a test that did not compile — rules first, then the LLM.

Order of work for one round:

1. Parse the build output. A ``build_config`` failure (dependency resolution, missing SDK,
   daemon crash, build-script error) is not the test's fault: nothing is changed.
2. Offline rules (``fixer.rules``): package declaration, missing or wrong imports.
3. If errors remain that no rule addressed and an LLM is configured, the LLM gets the
   rule-fixed code, the remaining errors (line numbers mapped onto that code) and the app's
   declarations they point at, and returns the whole file. Its reply goes through the guards
   of ``fixer.prompt``; a rejected reply or an LLM failure falls back to the rules' result.

The result says which fixer produced the code: ``"rules"``, ``"llm"`` (the LLM wrote the
final code, possibly on top of rule edits, listed in ``changes``) or ``"none"``.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import unquote

import openai

from fixer.errors import CompileError, CompileReport, parse_errors
from fixer.exceptions import LlmError, ReplyRejected
from fixer.llm import ChatCompleter, LlmClient, LlmSettings
from fixer.prompt import (
    build_messages,
    collect_context,
    declared_names,
    extract_code,
    validate_reply,
)
from fixer.rules import apply_rules
from fixer.source_index import SourceCodeIndex

__all__ = ["FixResult", "FixerName", "fix", "fix_detailed", "unified_diff"]

log = logging.getLogger("droidwire.fixer")

FixerName = Literal["rules", "llm", "none"]

# A generated test is a page or two; anything far larger is not worth an LLM round.
MAX_TEST_CHARS = 60_000


@dataclass(slots=True)
class FixResult:
    """What one fix did. ``code`` is the test to compile next (the input when nothing helped)."""

    code: str
    fixer: FixerName
    diff: str
    errors: list[CompileError]
    failure: str = "compile"
    changes: list[str] = field(default_factory=list)
    note: str | None = None  # why the LLM was skipped or refused, when it was

    @property
    def changed(self) -> bool:
        return self.fixer != "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "fixer": self.fixer,
            "diff": self.diff,
            "errors": [e.to_dict() for e in self.errors],
            "failure": self.failure,
            "changes": list(self.changes),
            "note": self.note,
        }


def unified_diff(before: str, after: str, name: str = "Test.kt") -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )


def _line_map(before: str, after: str) -> dict[int, int]:
    """1-based line numbers of ``before`` → where the same line sits in ``after``."""
    matcher = difflib.SequenceMatcher(a=before.split("\n"), b=after.split("\n"), autojunk=False)
    mapping: dict[int, int] = {}
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                mapping[i1 + k + 1] = j1 + k + 1
    return mapping


def _as_completer(llm_client: Any) -> ChatCompleter | None:
    if llm_client is None:
        return None
    if isinstance(llm_client, openai.OpenAI):
        # A caller passed a bare OpenAI client: give it our model, sampling and retries.
        settings = LlmSettings.from_env() or LlmSettings()
        return LlmClient(settings, client=llm_client)
    if callable(getattr(llm_client, "complete", None)):
        return llm_client  # type: ignore[no-any-return]
    raise TypeError(
        f"llm_client must be an LlmClient, an openai.OpenAI or None, not {type(llm_client).__name__}"
    )


def fix_detailed(
    test_code: str,
    error_output: str | CompileReport,
    index: SourceCodeIndex | str | os.PathLike[str] | None = None,
    llm_client: ChatCompleter | openai.OpenAI | None = None,
    *,
    expected_package: str | None = None,
    test_path: str | None = None,
) -> FixResult:
    """Repair ``test_code`` against one build's output; never raises for bad input or LLM trouble.

    Only the errors that concern the test are worked on: those in ``test_path`` (compared by
    file name) when given, else those in a file named after a class the test declares, else
    those in a test source set (``androidTest…``, ``test…``), else those whose source set is
    unknown. Errors only in the app's own sources leave the test alone.
    """
    if isinstance(index, str | os.PathLike):
        index = SourceCodeIndex(index)  # a project directory: index it now
    report = parse_errors(error_output) if isinstance(error_output, str) else error_output
    errors = _errors_of_test(report.compile_errors, test_code, test_path)
    name = _file_name(errors)
    if report.compile_errors and not errors:
        return FixResult(
            test_code,
            "none",
            "",
            report.compile_errors,
            failure=report.failure,
            note="errors are outside the test",
        )

    if report.failure == "build_config":
        return FixResult(
            test_code,
            "none",
            "",
            errors,
            failure="build_config",
            note="build_config: not a test error",
        )
    if not errors:
        return FixResult(
            test_code, "none", "", errors, failure=report.failure, note="no compile errors to fix"
        )

    rules = apply_rules(test_code, errors, index, expected_package=expected_package)
    code = rules.code
    fixer: FixerName = "rules" if rules.changed else "none"
    remaining = [e for i, e in enumerate(errors) if i not in rules.resolved]
    note: str | None = None

    completer = _as_completer(llm_client)
    if remaining and completer is None:
        note = "no LLM configured"
    elif remaining and len(code) > MAX_TEST_CHARS:
        note = f"test longer than {MAX_TEST_CHARS} characters: not sent to the LLM"
    elif remaining and completer is not None:
        try:
            code_llm = _llm_round(code, test_code, remaining, index, completer)
        except (LlmError, ReplyRejected) as exc:
            note = f"llm: {exc}"
            log.warning("LLM fix not used: %s", exc)
        else:
            code, fixer = code_llm, "llm"

    return FixResult(
        code=code,
        fixer=fixer,
        diff=unified_diff(test_code, code, name) if fixer != "none" else "",
        errors=errors,
        failure=report.failure,
        changes=list(rules.changes),
        note=note,
    )


def _llm_round(
    code: str,
    original: str,
    remaining: Sequence[CompileError],
    index: SourceCodeIndex | None,
    completer: ChatCompleter,
) -> str:
    # The errors were reported against the original; the LLM sees the rule-fixed code.
    mapping = _line_map(original, code)
    shifted = [
        replace(e, line=mapping.get(e.line, e.line)) if e.line is not None else e for e in remaining
    ]
    context = collect_context(code, shifted, index)
    messages = build_messages(code, shifted, context, index)
    reply = completer.complete(messages)
    candidate = extract_code(reply)
    validate_reply(code, candidate, unresolved=[e.symbol for e in shifted if e.symbol], index=index)
    return candidate


def fix(
    test_code: str,
    error_output: str,
    index: SourceCodeIndex | str | os.PathLike[str] | None,
    llm_client: ChatCompleter | openai.OpenAI | None,
) -> str:
    """The base signature: the fixed test code (the input itself when nothing could be done)."""
    return fix_detailed(test_code, error_output, index, llm_client).code


def _errors_of_test(
    errors: Sequence[CompileError], test_code: str, test_path: str | None
) -> list[CompileError]:
    def base(path: str) -> str:
        return unquote(path.replace("\\", "/").rsplit("/", 1)[-1])  # file URIs are %-encoded

    located = [e for e in errors if e.file]
    unlocated = [e for e in errors if not e.file]
    if not located:
        return list(errors)
    if test_path:
        return [e for e in located if base(e.file or "") == base(test_path)] + unlocated
    stems = set(declared_names(test_code))
    mine = [e for e in located if base(e.file or "").rsplit(".", 1)[0] in stems]
    if mine:
        return mine + unlocated

    def source_set(error: CompileError) -> str | None:
        m = re.search(r"(?:^|/)src/(\w+)/", (error.file or "").replace("\\", "/"))
        return m.group(1) if m else None

    in_tests = [e for e in located if (source_set(e) or "").startswith(("androidTest", "test"))]
    # Errors in the app's own source sets (main, debug, …) are not the test's to fix.
    unknown = [e for e in located if source_set(e) is None]
    return (in_tests or unknown) + unlocated


def _file_name(errors: Sequence[CompileError]) -> str:
    for e in errors:
        if e.file:
            return e.file.replace("\\", "/").rsplit("/", 1)[-1]
    return "Test.kt"
