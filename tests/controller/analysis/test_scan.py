"""The whole-buffer pre-filter (``controller.analysis.scan``) changes no result.

Each test compares ``analyze`` with the pre-filter (its text, and the same log as bytes)
against the analysis that builds and feeds every line, and checks that the pre-filter was
really used where it applies (so a silently disabled fast path fails here).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import controller.analysis.analyzer as analyzer_mod
from bench.bench_analysis import generate
from controller.analysis import analyze, scan
from controller.analysis.lines import _THREADTIME_FAST
from tests.controller.analysis.test_fuzz import FRAGMENTS, THREADTIME_LINES, _slow_path

pytestmark = pytest.mark.skipif(not scan.available(), reason="hyperscan/google-re2 missing")

SAMPLES = Path(__file__).resolve().parents[2] / "corpus" / "samples"
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "corpus"


def _per_line(text: str, package: str | None) -> dict:
    analyzer_mod._PREFILTER = False
    try:
        return analyze(text, package=package).to_json()
    finally:
        analyzer_mod._PREFILTER = True


def _same(text: str, package: str | None = None) -> None:
    want = _per_line(text, package)
    assert analyze(text, package=package).to_json() == want
    assert analyze(text.encode("utf-8", "surrogatepass"), package=package).to_json() == want


def test_the_prefilter_is_used_on_a_plain_log() -> None:
    text = "".join(f"11-02 09:15:01.{i:03d}  4321  4321 D Chatty: hello {i}\n" for i in range(50))
    p = scan.plan(text)
    assert p is not None
    assert p.total == 50
    assert p.starts == [0, text.rindex("\n", 0, len(text) - 1) + 1] or p.starts == [0]


# Lines around the shape's edges: leading zeros, a tag with ':', no space after the tag's
# colon, tabs, a level outside VDIWEFAS, an empty message, non-ASCII, a long line.
EDGES = [
    "11-02 09:15:01.250  0432  4321 D Chatty: hello",
    "11-02 09:15:01.250  4321  4321 D pr:ung: hello",
    "11-02 09:15:01.250  4321  4321 D Chatty:hello",
    "11-02 09:15:01.250\t4321\t4321 D Chatty: hello",
    "11-02 09:15:01.250  4321  4321 X Chatty: hello",
    "11-02 09:15:01.250  4321  4321 D Chatty:",
    "11-02 09:15:01.250  4321  4321 D Chätty: héllo ☃",
    "11-02 09:15:01.250  4321  4321 D  : empty tag",
    "11-02 09:15:01.250  4321  4321 D Chatty: " + "x" * 2100,
    "2024-11-02 09:15:01.250  4321  4321 D Chatty: with a year",
    "11-02 09:15:01.250 +0100  4321  4321 D Chatty: with a zone",
    "11-02 09:15:01.250  4321  4321 D Chatty: Start proc 4321:org.demo/u0a1 for activity "
    "{org.demo/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4999:a3e.process/u0a77 for "
    "service {org.demo/org.demo.Svc}",
    "11-02 09:15:01.250  1300  1320 I procstats: no proc keyword in the message",
    # ``Start proc`` lines the scan reads itself, and the ones it must leave to the per-line path
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4321:org.demo/u0a7 for "
    "added application org.demo",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4322:org.demo:bg/u0a7 for "
    "service {org.demo/org.demo.Bg}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4323:com.other/u0a9 for "
    "service",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: waiting for a b {org.demo} then "
    "Start proc 4324:com.other/u0a9",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc x Start proc 4325:org.demo "
    "for activity {com.other/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4326:org.demo\x1fx for "
    "activity {com.other/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4327:org.demo\xa0x for "
    "activity {com.other/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4335:com.other/u0a1 then "
    "Start proc 4336:org.demo/u0a2",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc \u0664\u0663:org.demo for "
    "activity {org.demo/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc org.demo for activity "
    "org.demo/.Main: pid=4328 uid=10077 gids={}",
    "11-02 09:15:01.250  1300  1320 I Start proc 4329: org.demo for activity {org.demo/.M}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4341x for activity "
    "org.demo/.Main: pid=4341 uid=10077 gids={}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4342: for activity "
    "org.demo/.Main: pid=4342 uid=10077 gids={}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc:4343:org.demo then "
    "Start proc 4344:com.other/u0a1",
    # a message's first 2,000 characters are read: the name, or the host, cut there
    "11-02 09:15:01.250 1 1 I A: " + "y" * 1980 + " Start proc 4330:org.demo/u0a7",
    "11-02 09:15:01.250 1 1 I A: " + "y" * 1955 + " Start proc 4332:com.other/u0a7 for "
    "activity {org.demo/.Main}",
    "11-02 09:15:01.250  1300  1320 I ActivityManager: Start proc 4334:com.other/u0a9",
    "11-02 09:15:01.250  4321  4321 I ActivityManager: Start proc 4331:org.demo/u0a7 for "
    "activity {org.demo/.Main}",
    "11-02 09:15:01.250  1300  1320 I am_proc_start: [0,4321,10077,org.demo,activity,x]",
    "06-2",
    "8 21:39:59.649  4321  4321 D StrictMode: StrictMode policy violation; ~duration=5 ms: "
    "android.os.strictmode.DiskReadViolation",
    "",
    "--------- beginning of main",
    "\tat org.demo.A.b(A.kt:1)",
]

ROWS = st.lists(
    st.one_of(
        THREADTIME_LINES.map(lambda s: s.rstrip("\n")),
        st.sampled_from(EDGES),
        st.sampled_from(FRAGMENTS),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ROWS, st.sampled_from([None, "org.demo"]), st.booleans())
def test_prefilter_changes_nothing(rows, package, trailing_newline):
    text = "\n".join(rows) + ("\n" if trailing_newline and rows else "")
    _same(text, package)
    assert analyze(text, package=package).to_json() == _slow_path(text, package)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(EDGES + [f.rstrip("\n") for f in FRAGMENTS]), max_size=8))
def test_the_shape_implies_the_threadtime_pattern(rows):
    # A line the complement pattern does not flag is one _THREADTIME_FAST matches.
    shape, _ = scan._engines()
    for line in rows:
        data = b"\n" + line.encode("utf-8")
        if shape.search(data + b"\n") is None:
            assert _THREADTIME_FAST.match(line) is not None, line


def test_a_trace_open_across_a_long_run_of_chatter() -> None:
    # The violation's stack continues (same pid/tid) 600 lines of chatter later, and a crash
    # header from an unprefixed line opens a keyless trace that takes every line.
    head = ("11-02 09:15:01.250  4321  4321 D StrictMode: StrictMode policy violation; "
            "~duration=5 ms: android.os.strictmode.DiskReadViolation\n")
    chatter = "".join(f"11-02 09:15:02.{i % 1000:03d}  4321  {4322 + i % 3} D Chatty: x{i}\n"
                      for i in range(600))
    stack = "11-02 09:15:03.000  4321  4321 D StrictMode: \tat org.demo.Store.load(Store.kt:41)\n"
    bare = "FATAL EXCEPTION: main\nProcess: org.demo, PID: 4321\njava.lang.IllegalStateException\n"
    text = head + chatter + stack + chatter + bare + chatter + stack
    p = scan.plan(text)
    assert p is not None and len(p.starts) < 20
    _same(text, "org.demo")
    r = analyze(text, package="org.demo")
    assert r.violations[0].app_frame == "org.demo.Store.load(Store.kt:41)"


def test_start_proc_lines_read_by_the_scan() -> None:
    # Each ``Start proc`` edge among chatter, with a trace open and without: the lines the scan
    # reads itself (pid, name, host) and the ones it leaves to the per-line path agree with it.
    starts = [e for e in EDGES if "Start proc" in e]
    head = ("11-02 09:15:01.250  4321  4321 D StrictMode: StrictMode policy violation; "
            "~duration=5 ms: android.os.strictmode.DiskReadViolation\n")
    chatter = "".join(f"11-02 09:15:02.{i:03d}  1300  {1301 + i} D Chatty: x{i}\n"
                      for i in range(3))
    # a timing from each pid counts unless the pid is known to be another app's
    timings = "".join(f"11-02 09:15:03.000  {pid}  {pid} I DroidUnblocker: elapsed={pid % 100}ms\n"
                      for pid in (*range(4320, 4345), 4999))
    for edge in starts:
        for text in (chatter + edge + "\n" + chatter + timings,
                     head + chatter + edge + "\n" + chatter + timings):
            p = scan.plan(text)
            assert p is not None
            _same(text, "org.demo")
            _same(text, None)
    text = chatter + "".join(e + "\n" + chatter for e in starts) + timings
    p = scan.plan(text)
    assert p is not None
    data = text.encode()
    read = [data[s:data.find(b"\n", s)] for s in p.starts]
    # the lane takes the plain ``Start proc PID:NAME`` lines (nine of these), never read
    assert sum(b"Start proc" in line for line in read) <= len(starts) - 9
    _same(text, "org.demo")


def test_a_trace_going_stale_among_start_proc_lines() -> None:
    # A crash trace (its ``Process:`` line names the pid) and an ANR block go stale among
    # ``Start proc`` lines naming that pid otherwise: closing them (which stores the crash's
    # process) is ordered before the next line fed, one the lane would take in bulk included.
    def line(i: int, pid: int, tid: int, tag: str, msg: str) -> str:
        return f"11-02 09:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}  {pid}  {tid} I {tag}: {msg}\n"

    head = [line(0, 5000, 5000, "AndroidRuntime", "FATAL EXCEPTION: main"),
            line(1, 5000, 5000, "AndroidRuntime", "Process: org.demo, PID: 5000"),
            line(2, 5000, 5000, "AndroidRuntime", "java.lang.RuntimeException: boom"),
            line(3, 5000, 5000, "AndroidRuntime", "\tat org.demo.A.b(A.kt:1)"),
            line(4, 1300, 1320, "ActivityManager", "ANR in com.other (com.other/.Main)")]
    for step in (1, 7, 8, 9, 250):
        body = [line(i, 1300, 1321 + i % 7, "ActivityManager",
                     f"Start proc 5000:com.other{i % 3}/u0a1 for service")
                if i % step == 0 else line(i, 1300, 1330, "Chatty", f"x{i}")
                for i in range(5, 2600)]
        text = "".join(head + body)
        _same(text, "org.demo")
        _same(text, None)


def test_cpu_lines_that_say_proc() -> None:
    # A CPU reading is read (and counts toward a GC-churn issue) when its line is fed: any
    # ``proc`` makes it so, one in ``Start proc`` (a line the lane would take) included.
    gcs = "".join(f"11-02 09:15:0{i}.000  4321  4330 I art: Background concurrent copying GC "
                  f"freed 5(1KB) AllocSpace objects\n" for i in range(6))
    for tail in ("/proc/stat", "a proc", "at proc", "a rt proc", "b art proc", "Xtart proc",
                 "Start proc", "Start proc 4399:org.x/u0a1"):
        cpu = ("11-02 09:15:06.000  1300  1320 I ActivityManager:   99% 4321/org.demo: "
               f"90% user + 9% kernel, {tail}\n")
        text = gcs + cpu
        _same(text, "org.demo")
        assert any(i.kind == "cpu_gc_churn" for i in analyze(text, package="org.demo").issues)


def test_line_breaks_other_than_newline() -> None:
    base = "11-02 09:15:01.250  4321  4321 D Chatty: a{}b\n11-02 09:15:01.250  4321  4321 D " \
           "StrictMode: A resource was acquired at attached stack trace but never released.\n"
    for sep in ("\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\x1b[31m"):
        text = base.format(sep) * 3
        _same(text)
    crlf = base.format("").replace("\n", "\r\n") * 3
    assert scan.plan(crlf) is not None
    _same(crlf)
    assert scan.plan(base.format("\u2028")) is None


def test_bytes_as_decode_reads_them() -> None:
    text = "11-02 09:15:01.250  4321  4321 D StrictMode: A resource was acquired at attached " \
           "stack trace but never released.\n11-02 09:15:01.251  4321  4321 D Chatty: ok\n"
    want = _per_line(text, None)
    assert analyze(b"\xef\xbb\xbf" + text.encode(), package=None).to_json() == want
    assert analyze(text.encode("utf-16"), package=None).to_json() == want
    bad = text.encode() + b"11-02 09:15:01.252  4321  4321 D Chatty: \xff\xfe broken\n"
    assert analyze(bad).to_json() == _per_line(bad.decode("utf-8", "replace"), None)


def test_surrogates_in_text_survive() -> None:
    text = "11-02 09:15:01.250  4321  4321 D Chatty: \udcff\n" \
           "\tat org.demo.A.b(A.kt:1) \udcfe\n"
    _same(text, "org.demo")


def test_the_benchmark_log() -> None:
    # The benchmark's mix (chatter, Start proc lines, violations with stacks, ANR, timings).
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.txt"
        generate(path, 30_000, seed=random.Random(3).randrange(1000))
        text = path.read_text(encoding="utf-8")
    p = scan.plan(text)
    assert p is not None and len(p.starts) < 0.3 * p.total
    _same(text, "org.demo.app")


def _corpus_files() -> list[Path]:
    files = sorted(SAMPLES.glob("*.txt")) if SAMPLES.is_dir() else []
    if SHARED.is_dir():
        files += sorted(SHARED.glob("*.txt"))
    return files


@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_results_are_the_same(path: Path) -> None:
    data = path.read_bytes()
    text = data.decode("utf-8", "replace")
    for package in (None, "org.demo.app"):
        want = _per_line(text, package)
        assert analyze(text, package=package).to_json() == want
        assert analyze(data, package=package).to_json() == _per_line(
            analyzer_mod.decode(data), package)


def test_analyses_in_several_threads_at_once() -> None:
    # One Hyperscan scratch serves one scan at a time: each thread gets its own.
    import threading

    text = "".join(
        f"11-02 09:15:01.{i % 1000:03d}  4321  {4321 + i % 2} D {'StrictMode' if i % 50 == 0 else 'Chatty'}"
        f": {'A resource was acquired at attached stack trace but never released' if i % 50 == 0 else 'x'}\n"
        for i in range(20_000))
    data = text.encode()
    want = _per_line(text, None)
    errors: list[str] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        try:
            for _ in range(3):
                assert analyze(data).to_json() == want
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_prefilter_knows_every_word_the_line_filter_tests() -> None:
    """A substring ``wants`` tests but the pre-filter does not look for would be skipped as
    chatter: each ``"word" in msg`` of ``wants`` is one of the scan's keywords."""
    import ast
    import inspect
    import textwrap

    from controller.analysis import analyzer, scan

    source = textwrap.dedent(inspect.getsource(analyzer._State.wants))
    words = {node.left.value for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In)
             and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)}
    assert {"StrictMode", "pause timeout", "GC freed"} <= words
    assert words <= set(scan.KEYWORDS)
