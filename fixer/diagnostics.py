"""What a compile error is: the structured diagnostics ``fixer errors`` reads out of a build's
output (docs/design.md §9), and the kind a compiler message belongs to.

:class:`CompileError` is one diagnostic (file, position, severity, message, kind, symbol),
:class:`CompileReport` everything read out of one build's output; :func:`classify_message`
sorts a kotlinc or javac message into an :data:`ErrorKind` (and names the unresolved symbol),
in the compilers' English and the languages javac speaks. Pure data and text, no I/O;
:func:`fixer.errors.parse_errors` fills them in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CompileError",
    "CompileReport",
    "ErrorKind",
    "Failure",
    "Severity",
    "classify_message",
]

ErrorKind = Literal[
    "unresolved_reference",
    "type_mismatch",
    "nullability",
    "wrong_arguments",
    "syntax",
    "visibility",
    "other",
]
Failure = Literal["compile", "build_config", "none"]
Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CompileError:
    """One compiler diagnostic. ``file`` is the path as printed, ``file://`` removed."""

    file: str | None
    line: int | None
    column: int | None
    severity: Severity
    message: str
    kind: ErrorKind
    symbol: str | None = None
    location: str | None = None  # javac's ``location:`` line ("class DetoxTest"), if any
    # The lines that belong to this diagnostic after its first one and are not its message:
    # kapt/Dagger's ``is injected at`` chain, ``where T is a type-variable``, … (bounded).
    detail: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "message": self.message,
            "kind": self.kind,
            "symbol": self.symbol,
            "location": self.location,
            "detail": list(self.detail),
        }

    def signature(self) -> tuple[str, str, str, str]:
        """What makes two errors "the same" across compiles (line numbers shift with edits)."""
        base = (self.file or "").replace("\\", "/").rsplit("/", 1)[-1]
        return (base, self.kind, self.symbol or "", self.message)

    def __str__(self) -> str:
        where = self.file or "<unknown>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.severity}: {self.message}"


@dataclass(slots=True)
class CompileReport:
    """Everything the parser read out of one build's output."""

    errors: list[CompileError] = field(default_factory=list)
    build_failed: bool = False
    failure: Failure = "none"
    failed_tasks: list[str] = field(default_factory=list)
    what_went_wrong: list[str] = field(default_factory=list)

    @property
    def compile_errors(self) -> list[CompileError]:
        """Only severity ``error``."""
        return [e for e in self.errors if e.severity == "error"]

    @property
    def warnings(self) -> list[CompileError]:
        return [e for e in self.errors if e.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        """The §9 ``fixer errors --json`` shape (plus ``failed_tasks`` and ``what_went_wrong``)."""
        return {
            "errors": [e.to_dict() for e in self.errors],
            "build_failed": self.build_failed,
            "failure": self.failure,
            "failed_tasks": list(self.failed_tasks),
            "what_went_wrong": list(self.what_went_wrong),
        }


# First match wins: the order matters ("None of the following … type mismatch" is about
# arguments; "Unresolved reference. None of the following …" is unresolved).
_KIND_RULES: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    (
        "unresolved_reference",
        re.compile(
            r"Unresolved reference|cannot find symbol|package \S+ does not exist"
            r"|cannot resolve symbol|Unresolved (?:class|type)"
            r"|找不到符号|程序包\s*\S+\s*不存在|シンボルを見つけられません|パッケージ\S+は存在しません"
            r"|Symbol nicht gefunden|Package \S+ ist nicht vorhanden",
            re.IGNORECASE,
        ),
    ),
    (
        "nullability",
        re.compile(
            r"Only safe \(\?\.\) or non-null asserted \(!!\.\) calls|nullable receiver"
            r"|Null can ?not be a value of a non-null type|Unsafe use of a nullable"
            r"|Smart cast to .* is impossible|is possibly null|might be null",
            re.IGNORECASE,
        ),
    ),
    (
        "wrong_arguments",
        re.compile(
            r"No value passed for parameter|Too many arguments|None of the following"
            r"|No parameter with name|cannot be applied to given types|no suitable (?:method|constructor)"
            r"|actual and formal argument lists differ|Missing (?:value for|argument)"
            r"|Not enough arguments|Expected \d+ (?:arguments|parameters)"
            r"|Overload resolution ambiguity|No applicable|Inapplicable candidate",
            re.IGNORECASE,
        ),
    ),
    (
        "type_mismatch",
        re.compile(
            r"type mismatch|incompatible types|Type inference failed|cannot be converted to"
            r"|bad operand types?|is not a subtype of|Cannot infer (?:a )?type",
            re.IGNORECASE,
        ),
    ),
    (
        "visibility",
        re.compile(
            r"Cannot access|has private access|is private in|is protected in|is not public"
            r"|Private in|invisible|Visibility|is internal in|not visible|has protected access",
            re.IGNORECASE,
        ),
    ),
    (
        "syntax",
        re.compile(
            r"^Expecting|Syntax error|Unexpected tokens?|expected$|'.+' expected|illegal start of"
            r"|reached end of file while parsing|unclosed (?:string|comment|character)"
            r"|not a statement|class, interface, enum, or record expected|Unclosed comment"
            r"|Expected an? |Unexpected symbol|Missing '",
            re.IGNORECASE,
        ),
    ),
)

_UNRESOLVED_K1 = re.compile(r"Unresolved reference:\s*`?(?P<name>[^\s`'\",;()]+)`?")
_UNRESOLVED_K2 = re.compile(r"Unresolved reference\s+['`](?P<name>[^'`]+)['`]", re.IGNORECASE)
_CANNOT_FIND = re.compile(
    r"cannot find symbol:?\s+(?:symbol:\s*)?(?:class|variable|method|interface|enum)\s+(?P<name>[\w$]+)"
)
_PACKAGE_MISSING = re.compile(r"package (?P<name>[\w.]+) does not exist")


def classify_message(message: str) -> tuple[ErrorKind, str | None]:
    """Kind and (for unresolved references) symbol of a compiler message."""
    kind: ErrorKind = "other"
    for candidate, pattern in _KIND_RULES:
        if pattern.search(message):
            kind = candidate
            break
    symbol: str | None = None
    if kind == "unresolved_reference":
        match = _UNRESOLVED_K2.search(message) or _UNRESOLVED_K1.search(message)
        if match:
            symbol = match.group("name").rstrip(".")
        else:
            found = _CANNOT_FIND.search(message) or _PACKAGE_MISSING.search(message)
            if found:
                symbol = found.group("name")
    return kind, symbol
