"""Properties of the line parsers under what pastes and consoles do to a log.

A log of the app under test (clean, or with one violation of its own) is interleaved in any order
with another app's StrictMode violations, crash and ANR, rendered in one logcat format, then
damaged the way real pastes are: CRLF line ends, a copy-paste prefix on every line (``findstr``,
``> ``, ``cat -n`` / editor line numbers), a console hard wrap at any column, a cut anywhere
(mid-line). Whatever happens, the analysis never raises and never blames the app under test for
the other app's evidence; without wrap or cut, nothing is lost either.

Bounded (``max_examples``): these run in ``make test``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.analysis import analyze
from fixer.errors import parse_errors

APP, APP_PID = "org.demo.app", 4321
OTHER, OTHER_PID, OTHER_PID2 = "com.other.player", 5678, 5699
SYSTEM_PID = 1200

# (pid, tid, level, tag, message) — the app under test: ordinary lines, no evidence.
APP_LINES = [
    (SYSTEM_PID, 1250, "I", "ActivityManager",
     f"Start proc {APP_PID}:{APP}/u0a201 for activity {{{APP}/{APP}.MainActivity}}"),
    (APP_PID, APP_PID, "I", "TestRunner", f"started: opensNotes({APP}.NotesTest)"),
    (APP_PID, APP_PID, "D", "OkHttp", "--> GET https://example.org/notes"),
    (APP_PID, APP_PID, "I", "DroidUnblocker", "elapsed=8ms"),
    (APP_PID, 4400, "W", "System.err", "note: cache miss for notes.json"),
    (SYSTEM_PID, 1251, "I", "ActivityTaskManager", f"Displayed {APP}/.MainActivity: +412ms"),
    (APP_PID, APP_PID, "I", "TestRunner", f"finished: opensNotes({APP}.NotesTest)"),
]
# The app's own violation, for the "nothing lost" property.
APP_VIOLATION = [
    (APP_PID, APP_PID, "D", "StrictMode",
     "StrictMode policy violation; ~duration=310 ms: android.os.strictmode.DiskReadViolation"),
    (APP_PID, APP_PID, "D", "StrictMode",
     "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1596)"),
    (APP_PID, APP_PID, "D", "StrictMode", "\tat java.io.FileInputStream.<init>(FileInputStream.java:160)"),
    (APP_PID, APP_PID, "D", "StrictMode", f"\tat {APP}.NoteStore.load(NoteStore.kt:41)"),
]
# Another app's evidence, in blocks that keep their own order.
OTHER_BLOCKS = [
    [
        (SYSTEM_PID, 1250, "I", "ActivityManager",
         f"Start proc {OTHER_PID}:{OTHER}/u0a99 for service {{{OTHER}/{OTHER}.PlaybackService}}"),
    ],
    [
        (OTHER_PID, OTHER_PID, "D", "StrictMode",
         "StrictMode policy violation; ~duration=95 ms: android.os.strictmode.DiskWriteViolation"),
        (OTHER_PID, OTHER_PID, "D", "StrictMode",
         "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onWriteToDisk(StrictMode.java:1565)"),
        (OTHER_PID, OTHER_PID, "D", "StrictMode", "\tat java.io.FileOutputStream.<init>(FileOutputStream.java:236)"),
        (OTHER_PID, OTHER_PID, "D", "StrictMode", f"\tat {OTHER}.Cache.save(Cache.kt:77)"),
    ],
    [
        (OTHER_PID, 5701, "D", "StrictMode",
         "StrictMode policy violation: android.os.strictmode.NetworkViolation"),
        (OTHER_PID, 5701, "D", "StrictMode",
         "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onNetwork(StrictMode.java:1679)"),
        (OTHER_PID, 5701, "D", "StrictMode", f"\tat {OTHER}.net.Feed.fetch(Feed.kt:12)"),
    ],
    [
        (OTHER_PID2, OTHER_PID2, "E", "AndroidRuntime", "FATAL EXCEPTION: main"),
        (OTHER_PID2, OTHER_PID2, "E", "AndroidRuntime", f"Process: {OTHER}:remote, PID: {OTHER_PID2}"),
        (OTHER_PID2, OTHER_PID2, "E", "AndroidRuntime",
         "java.lang.IllegalStateException: player released"),
        (OTHER_PID2, OTHER_PID2, "E", "AndroidRuntime", f"\tat {OTHER}.Player.play(Player.kt:30)"),
    ],
    [
        (SYSTEM_PID, 1260, "E", "ActivityManager", f"ANR in {OTHER} ({OTHER}/.ui.Main)"),
        (SYSTEM_PID, 1260, "E", "ActivityManager", f"PID: {OTHER_PID}"),
        (SYSTEM_PID, 1260, "E", "ActivityManager",
         "Reason: Input dispatching timed out (Waiting because no window has focus)"),
    ],
]

Line = tuple[int, int, str, str, str]


def threadtime(ln: Line) -> str:
    pid, tid, level, tag, msg = ln
    return f"11-02 09:15:01.250 {pid:5d} {tid:5d} {level} {tag}: {msg}"


def brief(ln: Line) -> str:
    pid, _tid, level, tag, msg = ln
    return f"{level}/{tag}({pid:5d}): {msg}"


def studio_legacy(ln: Line) -> str:
    pid, tid, level, tag, msg = ln
    proc = APP if pid == APP_PID else (OTHER if pid in (OTHER_PID, OTHER_PID2) else "system_process")
    return f"2024-11-02 09:15:01.250 {pid}-{tid}/{proc} {level}/{tag}: {msg}"


def studio(ln: Line) -> str:
    pid, tid, level, tag, msg = ln
    return f"2024-11-02 09:15:01.250  {pid}-{tid}  {tag:<22} {'pid-' + str(pid):<24} {level}  {msg}"


RENDERERS = [threadtime, brief, studio_legacy, studio]
PREFIXES = [
    lambda i: "",
    lambda i: f"C:\\Users\\qa\\Desktop\\logcat.txt:{i + 1}:",    # findstr /n over a file
    lambda i: "> ",                                               # a markdown quote
    lambda i: f"{i + 1:6d}\t",                                    # cat -n
    lambda i: f"{i + 1}: ",                                       # an editor's line numbers
    lambda i: f"{i + 1:4d} | ",                                   # a code viewer's gutter
]


@st.composite
def interleavings(draw: st.DrawFn, with_app_violation: bool) -> list[Line]:
    """The app's lines and the other app's blocks merged in any order (each keeps its own)."""
    app = list(APP_LINES)
    if with_app_violation:
        at = draw(st.integers(0, len(app)))
        app[at:at] = APP_VIOLATION
    blocks = draw(st.permutations(OTHER_BLOCKS))
    other = [ln for b in blocks for ln in b]
    picks = draw(st.lists(st.booleans(), min_size=len(app) + len(other),
                          max_size=len(app) + len(other)))
    out: list[Line] = []
    a = o = 0
    for take_app in picks:
        if (take_app and a < len(app)) or o >= len(other):
            out.append(app[a])
            a += 1
        else:
            out.append(other[o])
            o += 1
    return out


def render(lines: list[Line], renderer, prefix, crlf: bool, wrap: int | None) -> str:
    physical: list[str] = []
    for i, ln in enumerate(lines):
        text = prefix(i) + renderer(ln)
        if wrap:
            physical += [text[j:j + wrap] for j in range(0, len(text), wrap)] or [""]
        else:
            physical.append(text)
    return ("\r\n" if crlf else "\n").join(physical)


SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(
    interleavings(False),
    st.sampled_from(RENDERERS),
    st.sampled_from(PREFIXES),
    st.booleans(),
    st.one_of(st.none(), st.integers(8, 160)),
    st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_other_apps_evidence_never_becomes_the_apps(lines, renderer, prefix, crlf, wrap, cut):
    text = render(lines, renderer, prefix, crlf, wrap)
    if cut is not None:
        text = text[: int(len(text) * cut)]           # a paste that stops mid-line
    r = analyze(text, package=APP)
    assert r.violations == [] and r.crashes == [] and r.anrs == []
    assert r.verification_status != "CONFIRMED"
    analyze(text)                                     # and without a package: never raises


@SETTINGS
@given(interleavings(True), st.sampled_from(RENDERERS), st.sampled_from(PREFIXES), st.booleans())
def test_undamaged_interleavings_lose_nothing(lines, renderer, prefix, crlf):
    r = analyze(render(lines, renderer, prefix, crlf, None), package=APP)
    assert [(v.kind, v.duration_ms, v.app_frame) for v in r.violations] == [
        ("DiskRead", 310, f"{APP}.NoteStore.load(NoteStore.kt:41)")]
    assert sorted(v.kind for v in r.other_violations) == ["DiskWrite", "Network"]
    assert [c.exception for c in r.other_crashes] == ["java.lang.IllegalStateException"]
    assert [a.package for a in r.other_anrs] == [OTHER]
    assert r.crashes == [] and r.anrs == [] and r.verification_status == "CONFIRMED"


# --------------------------------------------------------------------------------------------
# Build output: the same paste damage never invents a located error or crashes the parser.

KAPT = (
    "e: /w/app/build/tmp/kapt3/stubs/debug/a/AppComponent.java:7: error: [Dagger/MissingBinding] "
    "a.Repo cannot be provided without an @Provides-annotated method.\n"
    "e: \n"
    "\n"
    "e: public abstract interface AppComponent {\n"
    "e:                 ^\n"
    "e:       a.Repo is injected at\n"
    "e:           a.MainActivity.repo\n"
    "e: /w/app/src/main/java/a/Main.kt:3:5 Unresolved reference 'foo'.\n"
    "> Task :app:kaptDebugKotlin FAILED\n"
)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["", "> ", "2024-05-01T10:00:00.1234567Z ", "    "]), st.booleans(),
       st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_build_output_paste_damage(prefix, crlf, cut):
    text = "".join(prefix + ln + ("\r\n" if crlf else "\n") for ln in KAPT.splitlines())
    if cut is None:
        report = parse_errors(text)
        assert [(e.line, e.column, e.symbol) for e in report.errors] == [(7, 17, None), (3, 5, "foo")]
        assert report.errors[0].detail == ("a.Repo is injected at", "a.MainActivity.repo")
    else:
        report = parse_errors(text[: int(len(text) * cut)])
        assert len(report.errors) <= 2
        assert all(e.line in (7, 3) for e in report.errors if e.file)
