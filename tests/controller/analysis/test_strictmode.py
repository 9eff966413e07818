"""StrictMode violations in every wording (fixtures written for droidwire)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.analysis import analyze
from controller.analysis.lines import parse_lines
from controller.analysis.strictmode import kind_of_class, parse_header

P = "11-02 09:15:01.250  4321  4321 D StrictMode: "


def tt(*msgs: str, pid: int = 4321, tid: int = 4321, tag: str = "StrictMode") -> str:
    return "".join(f"11-02 09:15:01.250 {pid:5d} {tid:5d} D {tag}: {m}\n" for m in msgs)


MODERN = tt(
    "StrictMode policy violation; ~duration=412 ms: android.os.strictmode.DiskReadViolation",
    "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1596)",
    "\tat libcore.io.BlockGuardOs.open(BlockGuardOs.java:249)",
    "\tat java.io.FileInputStream.<init>(FileInputStream.java:160)",
    "\tat okio.Okio__JvmOkioKt.source(JvmOkio.kt:178)",
    "\tat org.demo.notes.NoteStore.load(NoteStore.kt:41)",
    "\tat org.demo.notes.MainActivity.onCreate(MainActivity.kt:18)",
)


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        ("android.os.strictmode.DiskReadViolation", "DiskRead"),
        ("android.os.StrictMode$StrictModeDiskWriteViolation", "DiskWrite"),
        ("android.os.strictmode.NonSdkApiUsedViolation", "NonSdkApiUsed"),
        ("android.os.StrictMode$InstanceCountViolation", "InstanceCount"),
        ("android.os.strictmode.UnbufferedIoViolation", "UnbufferedIo"),
    ],
)
def test_kind_normalisation(cls, kind):
    assert kind_of_class(cls) == kind


def test_old_generic_class_uses_the_violation_code():
    h = parse_header("StrictMode policy violation; ~duration=5 ms: "
                     "android.os.StrictMode$StrictModeViolation: policy=23 violation=4", "StrictMode")
    assert h is not None and h.kind == "Network" and h.policy == 23 and h.code == 4


def test_modern_with_duration():
    r = analyze(MODERN)
    (v,) = r.violations
    assert (v.kind, v.duration_ms, v.pid, v.tid) == ("DiskRead", 412, 4321, 4321)
    assert v.app_frame == "okio.Okio__JvmOkioKt.source(JvmOkio.kt:178)"
    assert v.line == MODERN.splitlines()[0]
    assert r.strict_mode_violations == [MODERN.splitlines()[0]]


def test_package_prefers_its_own_frame():
    (v,) = analyze(MODERN, package="org.demo.notes").violations
    assert v.app_frame == "org.demo.notes.NoteStore.load(NoteStore.kt:41)"


def test_modern_without_duration_and_message():
    text = tt("StrictMode policy violation: android.os.strictmode.NonSdkApiUsedViolation: "
              "Landroid/view/View;->getAccessibilityDelegate()Landroid/view/View$Acc;",
              "\tat android.os.StrictMode.lambda$static$1(StrictMode.java:428)",
              "\tat android.os.-$$Lambda$StrictMode$lu9ekk.accept(Unknown Source:2)",
              "\tat r8.a.b.c(SourceFile:3)")
    (v,) = analyze(text).violations
    assert v.kind == "NonSdkApiUsed" and v.duration_ms is None
    assert v.message.startswith("Landroid/view/View;->getAccessibilityDelegate")
    assert v.app_frame == "r8.a.b.c(SourceFile:3)"


def test_old_form_with_policy_and_custom_message():
    text = ("06-01 12:00:00.000: D/StrictMode(2222): StrictMode policy violation; ~duration=130 ms:"
            " android.os.StrictMode$StrictModeCustomViolation: policy=31 violation=8 "
            "msg=Compression of a bitmap is slow\n"
            "06-01 12:00:00.000: D/StrictMode(2222):    at android.os.StrictMode.noteSlowCall"
            "(StrictMode.java:1900)\n"
            "06-01 12:00:00.000: D/StrictMode(2222):    at org.old.Pics.save(Pics.java:77)\n")
    (v,) = analyze(text).violations
    assert (v.kind, v.duration_ms, v.pid, v.policy, v.code) == ("Custom", 130, 2222, 31, 8)
    assert v.message == "Compression of a bitmap is slow"
    assert v.app_frame == "org.old.Pics.save(Pics.java:77)"


def test_old_leak_wording_at_level_e():
    text = ("09-09 10:00:00.000  7000  7010 E StrictMode: A resource was acquired at attached "
            "stack trace but never released. See java.io.Closeable for information on avoiding "
            "resource leaks.\n"
            "09-09 10:00:00.000  7000  7010 E StrictMode: java.lang.Throwable: Explicit "
            "termination method 'close' not called\n"
            "09-09 10:00:00.000  7000  7010 E StrictMode:   at dalvik.system.CloseGuard.open"
            "(CloseGuard.java:184)\n"
            "09-09 10:00:00.000  7000  7010 E StrictMode:   at org.cache.Disk.get(Disk.java:9)\n"
            "...\n")
    (v,) = analyze(text).violations
    assert (v.kind, v.pid, v.tid) == ("LeakedClosable", 7000, 7010)
    assert v.app_frame == "org.cache.Disk.get(Disk.java:9)"


def test_leaked_closable_counts_the_allocation_stack_and_adopts_the_prefix():
    text = ("StrictMode policy violation: android.os.strictmode.LeakedClosableViolation: A resource"
            " was acquired at attached stack trace but never released.\n"
            + tt("\tat android.os.StrictMode$AndroidCloseGuardReporter.report(StrictMode.java:1)",
                 "\tat org.reporter.Hook.report(Hook.java:5)",
                 "\tat java.lang.Daemons$FinalizerDaemon.run(Daemons.java:2)",
                 "Caused by: java.lang.Throwable: Explicit termination method 'close' not called",
                 "\tat dalvik.system.CloseGuard.open(CloseGuard.java:237)",
                 "\tat org.demo.Files.open(Files.kt:12)", pid=900, tid=913))
    (v,) = analyze(text).violations
    assert (v.kind, v.pid, v.tid) == ("LeakedClosable", 900, 913)
    assert v.app_frame == "org.demo.Files.open(Files.kt:12)"


def test_binder_continuation_does_not_start_a_violation():
    text = tt(
        "StrictMode policy violation; ~duration=80 ms: android.os.StrictMode$StrictModeDiskReadViolation:"
        " policy=65599 violation=2",
        "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1)",
        "\tat android.os.Parcel.readExceptionCode(Parcel.java:2)",
        "\tat org.demo.Client.call(Client.kt:8)",
        "# via Binder call with stack:",
        "android.os.StrictMode$LogStackTrace",
        "\tat android.os.StrictMode.readAndHandleBinderCallViolations(StrictMode.java:3)",
        "\tat com.android.server.Thing.run(Thing.java:4)",
    )
    (v,) = analyze(text).violations
    assert v.kind == "DiskRead" and v.app_frame == "org.demo.Client.call(Client.kt:8)"


def test_several_headers_in_a_row_and_a_leading_tail():
    text = tt("\tat org.previous.Tail.frame(Tail.kt:1)",
              "StrictMode policy violation; ~duration=20 ms: android.os.strictmode.DiskReadViolation",
              "\tat org.a.A.a(A.kt:1)",
              "StrictMode policy violation; ~duration=30 ms: android.os.strictmode.DiskWriteViolation",
              "StrictMode policy violation; ~duration=40 ms: android.os.strictmode.NetworkViolation",
              "\tat org.c.C.c(C.kt:3)")
    r = analyze(text)
    assert [(v.kind, v.duration_ms) for v in r.violations] == [
        ("DiskRead", 20), ("DiskWrite", 30), ("Network", 40)]
    assert [v.app_frame for v in r.violations] == ["org.a.A.a(A.kt:1)", None, "org.c.C.c(C.kt:3)"]
    assert r.summary == "StrictMode violations: DiskRead, DiskWrite, Network | Blocking time: n/a"


@pytest.mark.parametrize("indent", ["\t", " ", "   ", "    ", "        ", "", "                 \t"])
def test_bare_stack_indentation(indent):
    text = ("StrictMode policy violation; ~duration=9 ms: android.os.strictmode.DiskWriteViolation\n"
            f"{indent}at libcore.io.BlockGuardOs.remove(BlockGuardOs.java:365)\n"
            f"{indent}at org.demo.Db.reset(Db.kt:22)\n")
    (v,) = analyze(text).violations
    assert v.kind == "DiskWrite" and v.pid is None
    assert v.app_frame == "org.demo.Db.reset(Db.kt:22)"


def test_hard_wrapped_header_and_ide_link():
    text = (P + "StrictMode policy violation: android.os.strictmode.UntaggedSocketViolation: "
            "Untagged socket detected; use TrafficStats.setTrafficStatsTag\n"
            "() to track all network usage\n"
            + P + "    at android.os.StrictMode.onUntaggedSocket(StrictMode.java:2251)\n"
            "15:00:00.000  D  StrictMode policy violation; ~duration=7 ms: "
            "android.os.strictmode.DiskReadViolation (Ask Gemini)\n")
    r = analyze(text)
    assert [v.kind for v in r.violations] == ["UntaggedSocket", "DiskRead"]
    assert r.violations[1].class_name == "android.os.strictmode.DiskReadViolation"


def test_penalty_death_crash_is_a_violation_and_a_crash():
    text = ("--------- beginning of crash\n"
            + tt("FATAL EXCEPTION: main", "Process: org.demo.app, PID: 4321",
                 "java.lang.RuntimeException: StrictMode ThreadPolicy violation",
                 "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1)",
                 "\tat org.demo.app.Main.onCreate(Main.kt:5)",
                 "Caused by: android.os.strictmode.DiskReadViolation",
                 "\t... 12 more", tag="AndroidRuntime"))
    r = analyze(text, package="org.demo.app")
    assert [c.exception for c in r.crashes] == ["java.lang.RuntimeException"]
    assert r.crashes[0].strict_mode
    assert [(v.kind, v.source) for v in r.violations] == [("DiskRead", "crash")]
    assert r.verification_status == "CONFIRMED"


def test_not_a_header():
    assert parse_header("StrictMode.enableDefaults() called", "MyApp") is None
    assert parse_header("android.os.StrictMode$LogStackTrace", "StrictMode") is None
    assert parse_header("A resource was acquired at attached stack trace but never released",
                        "SomethingElse") is None


def test_listener_logged_violation_and_dedupe_with_penalty_log():
    stack = ["\tat libcore.io.BlockGuardOs.open(BlockGuardOs.java:249)",
             "\tat org.demo.Store.load(Store.kt:41)"]
    listener = tt("strict mode violation", "android.os.strictmode.DiskReadViolation", *stack,
                  tag="MyApp")
    r = analyze(listener)
    assert [(v.kind, v.duration_ms, v.app_frame) for v in r.violations] == [
        ("DiskRead", None, "org.demo.Store.load(Store.kt:41)")]
    both = MODERN.splitlines(keepends=True)[0] + "".join(tt(*stack)) + listener
    assert len(analyze(both).violations) == 1
    # The same call site hit twice by penaltyLog stays two violations.
    twice = MODERN + MODERN
    assert len(analyze(twice).violations) == 2


def test_legacy_studio_penalty_death_with_old_generic_class():
    pad = " " * 67
    text = ("03-14 09:35:30.154 4934-4934/org.card.dev E/AndroidRuntime: FATAL EXCEPTION: main\n"
            f"{pad}Process: org.card.dev, PID: 4934\n"
            f"{pad}android.os.StrictMode$StrictModeViolation: policy=327711 violation=2\n"
            f"{pad}    at android.os.StrictMode.executeDeathPenalty(StrictMode.java:1520)\n"
            f"{pad}    at org.card.dev.Scan.start(Scan.java:12)\n"
            "03-14 09:35:30.200 4934-4934/org.card.dev I/Process: Sending signal. PID: 4934 SIG: 9\n")
    r = analyze(text, package="org.card.dev")
    assert [(v.kind, v.policy, v.code, v.source) for v in r.violations] == [
        ("DiskRead", 327711, 2, "crash")]
    (c,) = r.crashes
    assert c.strict_mode and c.exception == "android.os.StrictMode$StrictModeViolation"
    assert c.app_frame == "org.card.dev.Scan.start(Scan.java:12)"
    assert r.app_pids == [4934]


def test_vm_policy_death_is_a_process_death():
    text = tt("StrictMode VmPolicy violation with POLICY_DEATH; shutting down.", tag="System.err")
    r = analyze(text)
    (d,) = r.deaths
    assert (d.pid, d.reason) == (4321, "StrictMode VmPolicy penaltyDeath")
    # With no logged violation before it, the death is the evidence.
    assert [(v.kind, v.source) for v in r.violations] == [("Unknown", "death")]
    assert len(analyze(MODERN + text).violations) == 1


def test_truncated_headers():
    text = ("StrictMode policy violation; ~duration=92 ms: android.os.strictmode.DiskRe\n"
            "StrictMode policy violation; ~duration=93 ms: andr\n"
            "\tat android.os.StrictMode$AndroidBlockGuardPolicy.onNetwork(StrictMode.java:1)\n"
            "StrictMode policy violation; ~duration=94 ms:\n")
    r = analyze(text)
    assert [(v.kind, v.duration_ms) for v in r.violations] == [
        ("DiskRead", 92), ("Network", 93), ("Unknown", 94)]


# A tag forwarded by another runtime's logger, recognised by its shape (real samples from the
# project's corpus, tests/corpus/).
OWN_CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "samples"


def test_forwarded_tag_keeps_frames_and_app_frame_maui_sample():
    text = (OWN_CORPUS / "strictmode_01_maui19415_forwarded_tag_diskread.txt").read_text("utf-8")
    r = analyze(text)
    assert r.entries == r.lines == 15 and r.formats == {"forwarded": 15}
    (v,) = r.violations
    assert (v.kind, v.duration_ms, v.tag) == ("DiskRead", 1645, "StrictMode")
    assert len(v.frames) == 13   # the 14th is cut mid-frame by the paste
    assert v.app_frame == "crc640ec207abc449b2ca.ShellSectionRenderer.n_onCreateView(Native Method)"


def test_forwarded_tag_android12_kind_maui_sample():
    text = (OWN_CORPUS / "strictmode_03_maui19414_forwarded_tag_incorrect_context_use.txt")
    (v,) = analyze(text.read_text("utf-8")).violations
    assert (v.kind, v.duration_ms, len(v.frames)) == ("IncorrectContextUse", None, 8)
    assert v.app_frame == "crc640ec207abc449b2ca.ShellFragmentContainer.n_onCreateView(Native Method)"


@pytest.mark.parametrize("tag", ["StrictMode", "ContextImpl", "mono-rt", "app.Logger", "DOTNET"])
def test_forwarded_tag_is_any_tag_shaped_word(tag):
    (ln,) = parse_lines(f"[{tag}] \tat a.B.c(B.java:1)").lines
    assert (ln.fmt, ln.entry, ln.tag, ln.msg) == ("forwarded", True, tag, "\tat a.B.c(B.java:1)")


@pytest.mark.parametrize("text", ["[ 01-02 03:04:05.678 1:2 D/x ]", "[1] at a.B.c(B.java:1)",
                                  "[        ] > Task :app:x", "[+3 ms] x"])
def test_bracketed_non_tags_are_not_forwarded_entries(text):
    (ln,) = parse_lines(text).lines
    assert ln.fmt != "forwarded"
