"""Every sample in the shared corpus yields its INDEX.tsv facts through the CLI.

The corpus lives next to the clone (``../shared/corpus``); where it is absent (a user's clone)
these tests skip with a reason, and under ``CI=true`` they fail instead. The facts are read from
INDEX.tsv's free-text column with small generic patterns, not hard-coded per file.
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller.analysis.lines import parse_lines
from droidwire import app
from tests.conftest import require_or_skip

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "corpus"
CATEGORIES = ("strictmode", "crash", "anr", "activity_displayed", "threadtime", "instrumentation")
runner = CliRunner()


def _rows() -> list[dict[str, str]]:
    index = CORPUS / "INDEX.tsv"
    if not index.is_file():
        return []
    with index.open(encoding="utf-8", newline="") as fh:
        return [r for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                if r["category"] in CATEGORIES]


ROWS = _rows()


def test_corpus_present():
    require_or_skip(bool(ROWS), f"corpus not found at {CORPUS}")


def field(facts: str, name: str) -> str | None:
    m = re.search(rf"(?:^|; ){re.escape(name)}=(.*?)(?=; [a-z_ -]+[=(]|$)", facts)
    return m[1].strip() if m else None


def frame_or_none(value: str | None) -> str | None:
    if value is None or value.startswith(("not in excerpt", "none")):
        return None
    return value.split()[0].rstrip(";")


@cache
def run_cli(*args: str) -> dict:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def analyze_file(name: str, package: str | None = None) -> dict:
    args = ["logcat", "analyze", str(CORPUS / name), "--json"]
    return run_cli(*args, *(["--package", package] if package else []))


def ids(category: str) -> list[pytest.param]:
    return [pytest.param(r, id=r["file"]) for r in ROWS if r["category"] == category]


@pytest.mark.parametrize("row", ids("strictmode"))
def test_strictmode(row):
    facts, data = row["expected_facts"], analyze_file(row["file"])
    inner = re.search(r"violations=\[(.*?)\];", facts)[1]
    kinds = [k.removeprefix("StrictMode") for k in re.findall(r"\b(\w+)Violation\b", inner)]
    if not kinds and "leaked closable" in inner:
        kinds = ["LeakedClosable"]
    got = data["violations"]
    assert [v["kind"] for v in got] == kinds
    durations = re.search(r"duration_ms=\[([^\]]*)\]", facts)[1].split(",")
    assert [v["duration_ms"] for v in got] == [None if d == "none" else int(d) for d in durations]
    if pid := re.search(r"\bpid=(\d+)", facts):
        assert {v["pid"] for v in got} == {int(pid[1])}
    if tid := re.search(r"\btid=(\d+)", facts):
        assert {v["tid"] for v in got} == {int(tid[1])}
    top = re.search(r"top_app_frame(?: \(both\))?=([^;]*)", facts)
    if top:
        assert {v["app_frame"] for v in got} == {frame_or_none(top[1])}
    elif "top_frame_by_literal_rule=none" in facts:
        assert {v["app_frame"] for v in got} == {None}
    if own := re.search(r"first app-package frame=(\S+)", facts):
        package = ".".join(own[1].split(".")[:3])
        scoped = analyze_file(row["file"], package)["violations"]
        assert scoped[0]["app_frame"] == own[1]
    assert data["has_violations"] and data["verification_status"] == "CONFIRMED"
    assert data["summary"].startswith("StrictMode violations: " + kinds[0])


@pytest.mark.parametrize("row", ids("crash"))
def test_crash(row):
    facts, data = row["expected_facts"], analyze_file(row["file"])
    (crash,) = data["crashes"]
    assert crash["process"] == field(facts, "process").split()[0]
    assert crash["pid"] == int(field(facts, "pid"))
    assert crash["thread"] == field(facts, "thread")
    assert crash["exception"] == field(facts, "exception")
    assert crash["message"] == field(facts, "message")
    if (tid := field(facts, "tid")) is not None:
        assert crash["tid"] == int(tid)
    if (frame := field(facts, "first_app_frame")) is not None:
        assert crash["app_frame"] == frame_or_none(frame)
    if (own := field(facts, "first_app_package_frame")) is not None:
        scoped = analyze_file(row["file"], crash["process"])["crashes"][0]
        assert scoped["app_frame"] == frame_or_none(own)
    assert data["verification_status"] == "PENDING"


@pytest.mark.parametrize("row", ids("anr"))
def test_anr(row):
    facts, data = row["expected_facts"], analyze_file(row["file"])
    (anr,) = data["anrs"]
    assert anr["package"] == field(facts, "package")
    assert anr["component"] == frame_or_none(field(facts, "component"))
    assert anr["pid"] == int(field(facts, "pid"))
    assert anr["reason"] == field(facts, "reason")
    if (frozen := field(facts, "frozen")) is not None:
        assert anr["frozen"] is (frozen == "true")
    scoped = analyze_file(row["file"], anr["package"])
    assert scoped["verification_status"] == "CONFIRMED" and len(scoped["anrs"]) == 1
    elsewhere = analyze_file(row["file"], "org.not.this.app")
    assert elsewhere["anrs"] == [] and elsewhere["verification_status"] == "REFUTED"


def expected_displayed(facts: str) -> list[tuple[str, int]]:
    out = re.findall(r"([^\s\[]+/\S+) (\d+)ms", facts)
    out += re.findall(r"component=(\S+) (?:duration_ms|this_time_ms)=(\d+)", facts)
    return [(c, int(ms)) for c, ms in out]


@pytest.mark.parametrize("row", ids("activity_displayed"))
def test_displayed(row):
    facts, data = row["expected_facts"], analyze_file(row["file"])
    assert [(d["component"], d["ms"]) for d in data["displayed"]] == expected_displayed(facts)
    if total := re.search(r"total_ms=(\d+)", facts):
        assert data["displayed"][0]["total_ms"] == int(total[1])
    if entries := re.match(r"entries=(\d+)", facts):
        assert data["entries"] == int(entries[1])
    if lines := re.search(r"\blines=(\d+)", facts):
        assert data["entries"] == data["lines"] == int(lines[1])


@pytest.mark.parametrize("row", ids("threadtime"))
def test_threadtime(row):
    facts = row["expected_facts"]
    data = analyze_file(row["file"])
    assert data["lines"] == int(re.search(r"\blines=(\d+)", facts)[1])
    assert data["entries"] == int(re.search(r"valid (?:threadtime )?entries=(\d+)", facts)[1])
    lines = parse_lines((CORPUS / row["file"]).read_text(encoding="utf-8")).lines
    spec = re.compile(r"lines? (\d+)(?:-(\d+))?: pid=(\d+) tid=(\d+) level=(\w) tag=([^\s;]+)"
                      r"(?:[^;]*?msg (?:starts )?(?:=)?'([^']*)')?")
    checked = 0
    for m in spec.finditer(facts):
        first, last = int(m[1]), int(m[2] or m[1])
        for n in range(first, last + 1):
            ln = lines[n - 1]
            assert (ln.pid, ln.tid, ln.level, ln.tag) == (int(m[3]), int(m[4]), m[5], m[6]), n
            checked += 1
        if m[7] is not None and m[2] is None:
            assert lines[first - 1].msg.startswith(m[7].replace("\\t", "\t"))
    assert checked
    if shown := re.search(r"Displayed entry on line (\d+) \(\+(\d+)ms, total \+(\d+)ms\)", facts):
        (d,) = data["displayed"]
        assert (d["line_no"], d["ms"], d["total_ms"]) == tuple(int(g) for g in shown.groups())


@pytest.mark.parametrize("row", [*ids("instrumentation")])
def test_instrumentation(row):
    facts = row["expected_facts"]
    data = run_cli("instrumentation", "parse", str(CORPUS / row["file"]), "--json")
    listed = re.search(r"tests=\[(.*?)\]", facts)[1]
    expected = []
    for item in re.split(r";\s*(?=[\w.]+#)", listed) if listed else []:
        cls, name = re.match(r"([\w.]+)#(\w+)", item).groups()
        if "never finished" in item or "crashed" in item:
            status = "error"
        elif "assumption failure" in item:
            status = "assumption_failure"
        elif "ignored" in item:
            status = "ignored"
        else:
            status = "passed"
        expected.append((cls, name, status))
    assert [(t["class"], t["name"], t["status"]) for t in data["tests"]] == expected
    if "ignored(-3)" in listed:
        assert data["passed"] == 0 and data["ignored"] == 1
    crashed = any(s in facts for s in ("run crashed", "Process crashed", "shortMsg="))
    assert data["run_status"] == ("crashed" if crashed else "ok")
    if numtests := re.search(r"numtests=(\d+)", facts):
        assert data["expected"] == int(numtests[1])
    if stack := re.search(r"stack=(.*?); ", facts):
        assert data["tests"][0]["stack"].startswith(stack[1])
    if seconds := re.search(r"Time: (\d+\.\d+)", facts):
        assert data["time_s"] == float(seconds[1])
    if long_msg := re.search(r"longMsg=(.*?); INSTRUMENTATION_CODE", facts):
        assert data["message"] == long_msg[1]
