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

from fixer.errors import CompileError, CompileReport, parse_errors
from fixer.exceptions import FixerError, LlmError, ReplyRejected
from fixer.llm import ChatCompleter, LlmClient, LlmSettings
from fixer.loop import CompileRound, LoopResult, compile_fix_loop, compile_fix_loop_async
from fixer.repair import FixResult, fix, fix_detailed
from fixer.rules import apply_rules
from fixer.source_index import ClassRecord, MethodRecord, SourceCodeIndex

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
