"""Typed results of the analysis, with the JSON shapes of docs/design.md §9 (a contract).

Every ``to_json()`` keeps the §9 keys; extra keys are allowed by the contract and are added
after them (``line_no`` is the 1-based line of the item's first line in the input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Anr",
    "Crash",
    "Death",
    "Displayed",
    "Issue",
    "TestTiming",
    "Thresholds",
    "Timing",
    "Violation",
]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Verdict thresholds (docs/design.md §5). A reading at or below the noise floor is no blocking."""

    blocking_ms: int = 300
    noise_floor_ms: int = 16


@dataclass(slots=True)
class Violation:
    kind: str
    duration_ms: int | None
    pid: int | None
    tid: int | None
    app_frame: str | None
    line: str
    line_no: int
    class_name: str | None = None
    message: str | None = None
    policy: int | None = None
    code: int | None = None
    source: str = "log"             # "log" (penaltyLog) or "crash" (penaltyDeath)
    test: str | None = None
    frames: list[str] = field(default_factory=list, repr=False)
    tag: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "duration_ms": self.duration_ms, "pid": self.pid,
                "tid": self.tid, "app_frame": self.app_frame, "line": self.line,
                "class": self.class_name, "message": self.message, "policy": self.policy,
                "code": self.code, "source": self.source, "test": self.test,
                "line_no": self.line_no}


@dataclass(slots=True)
class Crash:
    process: str | None
    pid: int | None
    thread: str | None
    exception: str
    message: str | None
    cause: str | None
    app_frame: str | None
    line_no: int
    tid: int | None = None
    line: str = ""
    strict_mode: bool = False       # a penaltyDeath crash
    frames: list[str] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"process": self.process, "pid": self.pid, "thread": self.thread,
                "exception": self.exception, "message": self.message, "cause": self.cause,
                "app_frame": self.app_frame, "tid": self.tid, "strict_mode": self.strict_mode,
                "line_no": self.line_no}


@dataclass(slots=True)
class Anr:
    package: str | None
    component: str | None
    pid: int | None
    reason: str | None
    line_no: int
    parent: str | None = None
    frozen: bool | None = None
    error_id: str | None = None
    source: str = "ActivityManager"

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "component": self.component, "pid": self.pid,
                "reason": self.reason, "parent": self.parent, "frozen": self.frozen,
                "error_id": self.error_id, "source": self.source, "line_no": self.line_no}


@dataclass(slots=True)
class Displayed:
    component: str
    ms: int
    line_no: int
    total_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"component": self.component, "ms": self.ms, "total_ms": self.total_ms,
                "line_no": self.line_no}


@dataclass(slots=True)
class Timing:
    elapsed_ms: int
    pid: int | None
    line_no: int
    test: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"elapsed_ms": self.elapsed_ms, "pid": self.pid, "test": self.test,
                "line_no": self.line_no}


@dataclass(slots=True)
class TestTiming:
    """A test delimited in the log by TestRunner ``started:``/``finished:`` lines."""

    class_name: str
    name: str
    status: str = "error"           # passed|failed|ignored|assumption_failure|error
    pid: int | None = None
    blocking_time_ms: int = -1
    violations: list[str] = field(default_factory=list)
    finished: bool = False

    @property
    def id(self) -> str:
        return f"{self.class_name}#{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"class": self.class_name, "name": self.name, "status": self.status,
                "blocking_time_ms": self.blocking_time_ms, "violations": self.violations,
                "pid": self.pid}


@dataclass(slots=True)
class Death:
    pid: int | None
    process: str | None
    reason: str
    line_no: int

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "process": self.process, "reason": self.reason,
                "line_no": self.line_no}


@dataclass(frozen=True, slots=True)
class Issue:
    level: str                      # error | warning | info
    title: str
    suggestion: str
    kind: str = ""
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "title": self.title, "suggestion": self.suggestion,
                "kind": self.kind, "count": self.count}
