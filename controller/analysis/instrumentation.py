"""``am instrument -w -r`` raw output → per-test results. Pure; never raises.

Records (AOSP ``am`` ``InstrumentationResultPrinter``): ``INSTRUMENTATION_STATUS: key=value``
lines form a bundle closed by ``INSTRUMENTATION_STATUS_CODE: n``; ``INSTRUMENTATION_RESULT:`` and
``INSTRUMENTATION_CODE:`` end the run. Values (``stream=``, ``stack=``) span lines until the next
``INSTRUMENTATION_`` line, and stacks hold blank lines, so records are never split on blanks.
Key order inside a bundle is not stable (old runners vs Bundle hash order).

Status codes: 1 start, 0 ok, -1 error, -2 failure, -3 ignored (class-level ``@Ignore`` sends
``test=null``), -4 assumption failure; 2 and any bundle without a test identity are metadata.
A test started and never finished is an ``error``; partial results are always kept.
Run status: ``crashed`` (``shortMsg=`` / ``INSTRUMENTATION_ABORTED`` / "Process crashed" in a
stream), ``failed`` (``INSTRUMENTATION_FAILED`` or an ``Error=`` bundle), ``incomplete`` (no
``INSTRUMENTATION_CODE``), else ``ok``. Tolerates a lost first character (``NSTRUMENTATION_``),
wrappers (backticks, indentation, command echo) and output that simply stops.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from controller.analysis.lines import clean

__all__ = ["InstrumentationResult", "TestResult", "parse_instrumentation"]

_RECORD = re.compile(r"I?NSTRUMENTATION_(STATUS_CODE|STATUS|RESULT|CODE|FAILED|ABORTED):\s?(.*)$")
_STATUS = {0: "passed", -1: "error", -2: "failed", -3: "ignored", -4: "assumption_failure"}
_CODE = re.compile(r"\s*(-?\d+)")
_TIME = re.compile(r"^Time:\s*(\S+)", re.M)


@dataclass(slots=True)
class TestResult:
    class_name: str
    name: str
    status: str = "error"
    stack: str | None = None
    class_level: bool = False       # test=null: a class-level report (e.g. @Ignore on the class)
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"class": self.class_name, "name": self.name, "status": self.status,
                "stack": self.stack, "class_level": self.class_level,
                "finished": self.finished}


@dataclass(slots=True)
class InstrumentationResult:
    tests: list[TestResult]
    run_status: str
    message: str | None
    code: int | None = None
    expected: int | None = None     # numtests announced by the runner
    short_msg: str | None = None
    long_msg: str | None = None
    time_s: float | None = None
    metadata: list[dict[str, str]] = field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(1 for t in self.tests if t.status in statuses)

    def to_json(self) -> dict[str, Any]:
        return {
            "tests": [t.to_json() for t in self.tests],
            "total": len(self.tests),
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "errors": self.count("error"),
            "ignored": self.count("ignored", "assumption_failure"),
            "run_status": self.run_status,
            "message": self.message,
            # extras
            "assumption_failures": self.count("assumption_failure"),
            "expected": self.expected,
            "code": self.code,
            "short_msg": self.short_msg,
            "long_msg": self.long_msg,
            "time_s": self.time_s,
            "metadata": self.metadata,
        }


def _code(text: str) -> int | None:
    m = _CODE.match(text)
    return int(m[1]) if m else None


def _seconds(text: str) -> float | None:
    """``0.015``, ``1,234.5``, or Arabic-Indic ``٠٫٠١٥`` (a device in an Arabic locale)."""
    out = []
    for ch in text:
        d = unicodedata.decimal(ch, None)
        if d is not None:
            out.append(str(d))
        elif ch in ".٫":
            out.append(".")
        elif ch in ",٬":
            out.append(",")
    s = "".join(out)
    s = s.replace(",", "") if "." in s else s.replace(",", ".")
    try:
        return float(s)
    except ValueError:
        return None


def _value(v: str) -> str:
    return v.rstrip()


class _Parser:
    def __init__(self) -> None:
        self.tests: list[TestResult] = []
        self.metadata: list[dict[str, str]] = []
        self.bundle: dict[str, str] = {}
        self.result: dict[str, str] = {}
        self.target: dict[str, str] | None = None   # where continuation lines go
        self.key: str | None = None
        self.code: int | None = None
        self.failed: str | None = None
        self.aborted: str | None = None
        self.expected: int | None = None
        self.done = False

    def line(self, raw: str) -> None:
        s = clean(raw.rstrip("\r"))
        m = _RECORD.match(s)
        if m is None:
            i = raw.find("INSTRUMENTATION_FAILED:")
            if i >= 0 and self.failed is None:
                self.failed = raw[i + len("INSTRUMENTATION_FAILED:"):].strip() or "failed"
            if self.target is not None and self.key is not None and not self.done:
                self.target[self.key] += "\n" + raw.rstrip("\r")
            return
        kind, rest = m[1], m[2]
        if kind in ("STATUS", "RESULT"):
            if self.done and kind == "STATUS":
                return
            k, _, v = rest.partition("=")
            target = self.bundle if kind == "STATUS" else self.result
            target[k.strip()] = v
            self.target, self.key = target, k.strip()
        elif kind == "STATUS_CODE":
            self._close_bundle(_code(rest))
        elif kind == "CODE":
            self.code = _code(rest)
            self.done = True
            self.target = self.key = None
        elif kind == "FAILED":
            self.failed = rest.strip() or "failed"
            self.target = self.key = None
        else:  # ABORTED
            self.aborted = rest.strip() or "aborted"
            self.target = self.key = None

    def _close_bundle(self, code: int | None) -> None:
        b = {k: _value(v) for k, v in self.bundle.items()}
        self.bundle = {}
        self.target = self.key = None
        if b.get("numtests", "").strip().isdigit():
            self.expected = int(b["numtests"].strip())
        cls = b.get("class", "").strip()
        name = b.get("test", "").strip()
        if "Error" in b and self.failed is None:
            self.failed = b["Error"].strip() or "error"
        if code in _STATUS and not (cls and name) and "id" not in b:
            # An end bundle that lost its identity (a damaged paste): it ends the one test
            # still running, if there is exactly one.
            running = [t for t in self.tests if not t.finished]
            if len(running) == 1:
                cls, name = running[0].class_name, running[0].name
        if code is None or code not in (1, *_STATUS) or not cls or not name:
            self.metadata.append({**b, "code": str(code)})
            return
        stack = b.get("stack", "").strip("\n") or None
        if code == 1:
            self.tests.append(TestResult(cls, name, class_level=name == "null"))
            return
        t = next((x for x in reversed(self.tests)
                  if not x.finished and (x.class_name, x.name) == (cls, name)), None)
        if t is None:
            t = TestResult(cls, name, class_level=name == "null")
            self.tests.append(t)
        t.status, t.stack, t.finished = _STATUS[code], stack, True

    def finish(self) -> InstrumentationResult:
        # A bundle the output stopped inside: its stack explains the unfinished test.
        if self.bundle:
            b = {k: _value(v) for k, v in self.bundle.items()}
            key = (b.get("class", "").strip(), b.get("test", "").strip())
            for t in self.tests:
                if not t.finished and (t.class_name, t.name) == key and b.get("stack"):
                    t.stack = b["stack"].strip("\n") or None
        streams = [v for v in self.result.values()]
        streams += [m.get("stream", "") for m in self.metadata]
        crash_line = None
        for v in [*streams, *(t.stack or "" for t in self.tests), *self.bundle.values()]:
            i = v.find("Process crashed")
            if i >= 0:
                tail = [x.strip() for x in v[i:].splitlines() if x.strip()]
                crash_line = " ".join(tail[:2])
                break
        short = self.result.get("shortMsg")
        long = self.result.get("longMsg")
        short = short.strip() if short else None
        long = long.strip() if long else None
        stream = self.result.get("stream", "")
        tm = _TIME.search(stream)
        time_s = _seconds(tm[1]) if tm else None
        if short or self.aborted or crash_line:
            status = "crashed"
            message = long or short or self.aborted or crash_line
        elif self.failed:
            status, message = "failed", self.failed
        elif self.code is None:
            status, message = "incomplete", "the output ended before INSTRUMENTATION_CODE"
        else:
            status = "ok"
            summary = [x.strip() for x in stream.splitlines()
                       if x.strip().startswith(("OK (", "FAILURES", "Tests run:"))]
            message = summary[-1] if summary else None
        return InstrumentationResult(self.tests, status, message, self.code, self.expected,
                                     short, long, time_s, self.metadata)


def parse_instrumentation(text: str) -> InstrumentationResult:
    """Parse ``am instrument -r`` output (partial or damaged output included)."""
    p = _Parser()
    for raw in text.splitlines():
        p.line(raw)
    return p.finish()
