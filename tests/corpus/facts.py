"""The project's own corpus of real output, and the facts each sample must yield.

``index.json`` lists every sample in ``samples/``: where it was posted (URL, author, date), what was
trimmed from the post, and ``facts``: what a correct parser reads off it, written by hand from the
sample. ``check(entry)`` runs the sample through the real parser (``fixer.errors.parse_errors`` for
build output, ``controller.analysis.analyze`` for logcat, ``parse_instrumentation`` for
``am instrument -r`` output) and compares fact by fact: every key written in ``facts`` is one fact,
and so is the length of every list. Keys not written are not checked.

Fact keys (all optional):

* build output: ``errors`` / ``warnings`` (counts), ``failure``, ``build_failed``,
  ``failed_tasks``, ``diagnostics`` — a list in report order, each with any of ``file_endswith``,
  ``line``, ``column``, ``severity``, ``kind``, ``symbol``, ``location``, ``message_startswith``,
  ``message_contains``, ``detail_count``, ``detail_contains``.
* logcat: ``violations`` / ``crashes`` / ``anrs`` / ``displayed`` / ``deaths`` /
  ``other_violations`` / ``other_crashes`` / ``other_anrs`` — lists of dicts over the fields of
  the analyser's JSON (``frames`` is the frame count of a violation); ``verification_status``,
  ``entries``, ``blocking_time_ms``, ``formats`` (a subset), ``tags`` (the entries' distinct tags). ``package`` in the entry (not in
  ``facts``) is passed to the analyser; ``also_with_package`` holds facts for a second run scoped
  to that package.
* instrumentation: ``run_status``, ``tests`` (list of ``class_name``/``name``/``status``),
  ``short_msg``, ``code``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from controller.analysis import analyze
from controller.analysis.instrumentation import parse_instrumentation
from controller.analysis.lines import parse_lines
from controller.analysis.models import Violation
from fixer.errors import CompileError, parse_errors

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "samples"
INDEX = HERE / "index.json"

PARSERS = ("compile", "logcat", "instrumentation")
REQUIRED = ("file", "category", "parser", "source", "trimmed", "facts")
SOURCE_KEYS = ("url", "author", "date", "kind")


@dataclass(frozen=True, slots=True)
class Fact:
    sample: str
    name: str
    expected: Any
    got: Any

    @property
    def ok(self) -> bool:
        return bool(self.expected == self.got)


@cache
def entries() -> tuple[dict[str, Any], ...]:
    data = json.loads(INDEX.read_text(encoding="utf-8"))
    return tuple(data["samples"])


def text_of(entry: dict[str, Any]) -> str:
    """The sample exactly as stored: bytes as UTF-8, nothing normalised (CRLF and TABs kept)."""
    return (SAMPLES / entry["file"]).read_bytes().decode("utf-8")


def source_kind(entry: dict[str, Any]) -> str:
    return str(entry["source"]["kind"])


# --------------------------------------------------------------------------------------------


def _diag_facts(sample: str, i: int, want: dict[str, Any], e: CompileError | None) -> list[Fact]:
    out: list[Fact] = []
    for key, expected in want.items():
        name = f"diagnostics[{i}].{key}"
        got: Any
        if e is None:
            got = None
        elif key == "file_endswith":
            norm = (e.file or "").replace("\\", "/")  # paths compare with "/" either way
            got = expected if norm.endswith(expected.replace("\\", "/")) else e.file
        elif key == "message_startswith":
            got = expected if e.message.startswith(expected) else e.message[:120]
        elif key == "message_contains":
            got = expected if expected in e.message else e.message[:120]
        elif key == "detail_count":
            got = len(e.detail)
        elif key == "detail_contains":
            got = expected if any(expected in d for d in e.detail) else list(e.detail[:3])
        else:
            got = getattr(e, key)
        out.append(Fact(sample, name, expected, got))
    return out


def _compile_facts(entry: dict[str, Any]) -> list[Fact]:
    name, facts = entry["file"], entry["facts"]
    report = parse_errors(text_of(entry))
    out: list[Fact] = []
    if "errors" in facts:
        out.append(Fact(name, "errors", facts["errors"], len(report.compile_errors)))
    if "warnings" in facts:
        out.append(Fact(name, "warnings", facts["warnings"], len(report.warnings)))
    for key in ("failure", "build_failed", "failed_tasks"):
        if key in facts:
            out.append(Fact(name, key, facts[key], getattr(report, key)))
    if "diagnostics" in facts:
        want = facts["diagnostics"]
        errs = report.errors
        for i, d in enumerate(want):
            out.extend(_diag_facts(name, i, d, errs[i] if i < len(errs) else None))
    return out


def _item_facts(sample: str, label: str, want: list[dict[str, Any]],
                got: list[dict[str, Any]]) -> list[Fact]:
    out = [Fact(sample, f"{label}.count", len(want), len(got))]
    for i, w in enumerate(want):
        g = got[i] if i < len(got) else {}
        for key, expected in w.items():
            out.append(Fact(sample, f"{label}[{i}].{key}", expected, g.get(key)))
    return out


def _violation_json(v: Violation) -> dict[str, Any]:
    data = v.to_json()
    data["frames"] = len(v.frames)
    data["tag"] = v.tag
    return data


def _logcat_run(entry: dict[str, Any], package: str | None, facts: dict[str, Any],
                label: str) -> list[Fact]:
    name = entry["file"]
    result = analyze(text_of(entry), package=package)
    data = result.to_json()
    lists = {
        "violations": [_violation_json(v) for v in result.violations],
        "other_violations": [_violation_json(v) for v in result.other_violations],
        "crashes": data["crashes"], "other_crashes": data["other_crashes"],
        "anrs": data["anrs"], "other_anrs": data["other_anrs"],
        "displayed": data["displayed"], "deaths": data["deaths"], "timings": data["timings"],
    }
    out: list[Fact] = []
    for key, want in facts.items():
        if key in lists:
            out.extend(_item_facts(name, label + key, want, lists[key]))
        elif key == "tags":  # the distinct tags of the entries, sorted
            got_tags = sorted({ln.tag or "" for ln in parse_lines(text_of(entry)).lines
                               if ln.entry})
            out.append(Fact(name, label + "tags", want, got_tags))
        elif key == "formats":
            for fmt, count in want.items():
                out.append(Fact(name, f"{label}formats.{fmt}", count, data["formats"].get(fmt)))
        elif key in ("verification_status", "entries", "blocking_time_ms", "reason_code",
                     "damaged_lines"):
            out.append(Fact(name, label + key, want, data[key]))
        elif key != "also_with_package":
            out.append(Fact(name, label + key, want, f"<unknown fact key {key!r}>"))
    return out


def _logcat_facts(entry: dict[str, Any]) -> list[Fact]:
    facts = entry["facts"]
    out = _logcat_run(entry, None, facts, "")
    if "also_with_package" in facts:
        out += _logcat_run(entry, entry["package"], facts["also_with_package"], "package:")
    return out


def _instrumentation_facts(entry: dict[str, Any]) -> list[Fact]:
    name, facts = entry["file"], entry["facts"]
    res = parse_instrumentation(text_of(entry))
    out: list[Fact] = []
    for key in ("run_status", "short_msg", "code", "expected"):
        if key in facts:
            out.append(Fact(name, key, facts[key], getattr(res, key)))
    if "tests" in facts:
        got = [{"class_name": t.class_name, "name": t.name, "status": t.status}
               for t in res.tests]
        out.extend(_item_facts(name, "tests", facts["tests"], got))
    return out


def check(entry: dict[str, Any]) -> list[Fact]:
    """Every fact of one sample, with what the parser got."""
    parser = entry["parser"]
    if parser == "compile":
        return _compile_facts(entry)
    if parser == "logcat":
        return _logcat_facts(entry)
    if parser == "instrumentation":
        return _instrumentation_facts(entry)
    return [Fact(entry["file"], "parser", "one of " + ", ".join(PARSERS), parser)]
