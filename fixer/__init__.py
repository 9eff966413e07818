"""The fixer: read compiler output, index the app's source, repair a generated test.

Public surface::

    fix(test_code, error_output, index, llm_client) -> str          # the base signature
    fix_detailed(...) -> FixResult                                 # code, fixer, diff, errors
    compile_fix_loop(test_code, compile_fn, index, llm_client, max_rounds=3) -> LoopResult
    compile_fix_loop_async(...)                                    # for an async compile_fn
    parse_errors(text) -> CompileReport                            # `droidwire fixer errors`
    SourceCodeIndex(root).lookup(name) -> list[MethodRecord]
    LlmClient.from_env() -> LlmClient | None                       # OPENAI_BASE_URL, …

No sockets, no devices (docs/design.md §2); the LLM is reached through the ``openai`` client only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fixer.errors import CompileError, CompileReport, parse_errors
    from fixer.exceptions import FixerError, LlmError, ReplyRejected
    from fixer.llm import ChatCompleter, LlmClient, LlmSettings
    from fixer.loop import CompileRound, LoopResult, compile_fix_loop, compile_fix_loop_async
    from fixer.repair import FixResult, fix, fix_detailed
    from fixer.rules import apply_rules
    from fixer.source_index import ClassRecord, MethodRecord, SourceCodeIndex

# Each name is imported from its module on first use, so importing one part (the bridge's
# ``fixer.source_index``) loads neither the ``openai`` client nor the rest.
_HOMES = {
    "errors": ("CompileError", "CompileReport", "parse_errors"),
    "exceptions": ("FixerError", "LlmError", "ReplyRejected"),
    "llm": ("ChatCompleter", "LlmClient", "LlmSettings"),
    "loop": ("CompileRound", "LoopResult", "compile_fix_loop", "compile_fix_loop_async"),
    "repair": ("FixResult", "fix", "fix_detailed"),
    "rules": ("apply_rules",),
    "source_index": ("ClassRecord", "MethodRecord", "SourceCodeIndex"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fixer.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ChatCompleter",
    "ClassRecord",
    "CompileError",
    "CompileReport",
    "CompileRound",
    "FixResult",
    "FixerError",
    "LlmClient",
    "LlmError",
    "LlmSettings",
    "LoopResult",
    "MethodRecord",
    "ReplyRejected",
    "SourceCodeIndex",
    "apply_rules",
    "compile_fix_loop",
    "compile_fix_loop_async",
    "fix",
    "fix_detailed",
    "parse_errors",
]
