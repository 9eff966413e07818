"""The compile → fix → compile loop the sandbox executor runs (docs/design.md §5).

At most ``max_rounds`` fix rounds, so at most ``max_rounds + 1`` compiles. The loop stops
early when the build succeeds, when the failure is ``build_config`` (no edit of the test can
help), when a fix changes nothing, or when a compile reports the same errors as the one
before (compared without line numbers, which move as imports are added).

The loop itself is a sans-I/O generator (``_steps``) that yields what it needs done — a
compile or a fix — and receives the outcome; two thin drivers run it: ``compile_fix_loop``
for a plain callable and ``compile_fix_loop_async`` for an async one (the executor's), which
runs the fix (possibly an HTTP call to an LLM) in a worker thread, off the event loop.

Each compile is one entry of ``rounds``: ``{round, ok, errors, fixer, diff}`` — ``fixer`` and
``diff`` describe the edit that produced the code compiled in that round (``None`` and ``""``
for the first). This is §5's ``compile_rounds``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from fixer.errors import CompileError, parse_errors
from fixer.llm import ChatCompleter
from fixer.repair import FixResult, fix_detailed
from fixer.source_index import SourceCodeIndex

__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "CompileRound",
    "LoopResult",
    "StopReason",
    "compile_fix_loop",
    "compile_fix_loop_async",
]

DEFAULT_MAX_ROUNDS = 3

StopReason = Literal["compiled", "build_config", "unchanged_errors", "no_fix", "max_rounds"]
CompileOutcome = tuple[bool, str]


@dataclass(slots=True)
class CompileRound:
    round: int  # 1-based compile attempt
    ok: bool
    errors: list[CompileError]
    fixer: str | None  # what produced this round's code; None for the submitted test
    diff: str = ""
    failure: str = "none"
    changes: list[str] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "ok": self.ok,
            "errors": [e.to_dict() for e in self.errors],
            "fixer": self.fixer,
            "diff": self.diff,
            "failure": self.failure,
        }


@dataclass(slots=True)
class LoopResult:
    ok: bool
    code: str  # the last code compiled (the one that built, when ok)
    rounds: list[CompileRound]
    stop_reason: StopReason
    output: str = ""  # the last compile's output

    @property
    def compile_rounds(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.rounds]


@dataclass(frozen=True, slots=True)
class _Compile:
    code: str


@dataclass(frozen=True, slots=True)
class _Fix:
    code: str
    output: str


_Step = _Compile | _Fix


def _signature(errors: list[CompileError]) -> list[tuple[str, str, str, str]]:
    return sorted(e.signature() for e in errors)


def _steps(test_code: str, max_rounds: int) -> Generator[_Step, Any, LoopResult]:
    code = test_code
    rounds: list[CompileRound] = []
    fixer: str | None = None
    fix_result: FixResult | None = None
    previous: list[tuple[str, str, str, str]] | None = None
    while True:
        ok, output = yield _Compile(code)
        report = parse_errors(output or "")
        entry = CompileRound(
            round=len(rounds) + 1,
            ok=bool(ok),
            errors=report.errors if not ok else report.warnings,
            fixer=fixer,
            diff=fix_result.diff if fix_result else "",
            failure="none" if ok else (report.failure if report.failure != "none" else "compile"),
            changes=list(fix_result.changes) if fix_result else [],
            note=fix_result.note if fix_result else None,
        )
        rounds.append(entry)
        if ok:
            return LoopResult(True, code, rounds, "compiled", output)
        if report.failure == "build_config":
            return LoopResult(False, code, rounds, "build_config", output)
        current = _signature(report.compile_errors)
        if previous is not None and current == previous:
            return LoopResult(False, code, rounds, "unchanged_errors", output)
        if len(rounds) > max_rounds:
            return LoopResult(False, code, rounds, "max_rounds", output)
        previous = current
        fix_result = yield _Fix(code, output)
        assert fix_result is not None
        if fix_result.fixer == "none" or fix_result.code == code:
            entry.note = fix_result.note
            return LoopResult(False, code, rounds, "no_fix", output)
        code, fixer = fix_result.code, fix_result.fixer


def _fixer(
    index: SourceCodeIndex | None,
    llm_client: ChatCompleter | None,
    *,
    expected_package: str | None,
    test_path: str | None,
) -> Callable[[_Fix], FixResult]:
    """The fix step both drivers run: the same call, sync here, in a worker thread there."""

    def fix(step: _Fix) -> FixResult:
        return fix_detailed(
            step.code,
            step.output,
            index,
            llm_client,
            expected_package=expected_package,
            test_path=test_path,
        )

    return fix


def compile_fix_loop(
    test_code: str,
    compile_fn: Callable[[str], CompileOutcome],
    index: SourceCodeIndex | None = None,
    llm_client: ChatCompleter | None = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    *,
    expected_package: str | None = None,
    test_path: str | None = None,
) -> LoopResult:
    """Run the loop with a synchronous ``compile_fn(code) -> (ok, output)``."""
    steps = _steps(test_code, max_rounds)
    fix = _fixer(index, llm_client, expected_package=expected_package, test_path=test_path)
    try:
        step = next(steps)
        while True:
            if isinstance(step, _Compile):
                outcome = compile_fn(step.code)
                if inspect.isawaitable(outcome):
                    _close(outcome)
                    raise TypeError("compile_fn is async: use compile_fix_loop_async")
                step = steps.send(outcome)
            else:
                step = steps.send(fix(step))
    except StopIteration as done:
        result: LoopResult = done.value
        return result


async def compile_fix_loop_async(
    test_code: str,
    compile_fn: Callable[[str], Awaitable[CompileOutcome] | CompileOutcome],
    index: SourceCodeIndex | None = None,
    llm_client: ChatCompleter | None = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    *,
    expected_package: str | None = None,
    test_path: str | None = None,
) -> LoopResult:
    """Run the loop with an async (or sync) ``compile_fn``; fixes run in a worker thread."""
    steps = _steps(test_code, max_rounds)
    fix = _fixer(index, llm_client, expected_package=expected_package, test_path=test_path)
    try:
        step = next(steps)
        while True:
            if isinstance(step, _Compile):
                outcome = compile_fn(step.code)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                step = steps.send(outcome)
            else:
                step = steps.send(await asyncio.to_thread(fix, step))
    except StopIteration as done:
        result: LoopResult = done.value
        return result


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()  # a never-awaited coroutine would warn (and warnings are errors in tests)
