"""Every log rendering we know, parsed into the same fields (fixtures written for droidwire)."""

from __future__ import annotations

import pytest

from controller.analysis.lines import clean, parse_lines


def one(text: str):
    parsed = parse_lines(text)
    assert len(parsed.lines) == 1
    return parsed.lines[0]


@pytest.mark.parametrize(
    ("text", "fmt", "pid", "tid", "level", "tag", "msg"),
    [
        ("11-02 09:15:01.250  4321  4339 D StrictMode: hello", "threadtime", 4321, 4339, "D",
         "StrictMode", "hello"),
        ("11-02 09:15:01.250 14321 14339 I ICU     : padded tag", "threadtime", 14321, 14339, "I",
         "ICU", "padded tag"),
        ("11-02 09:15:01.250   321   339 W mdm:Prov: tag with a colon", "threadtime", 321, 339,
         "W", "mdm:Prov", "tag with a colon"),
        ("11-02 09:15:01.250   321   339 I EmptyMsg:", "threadtime", 321, 339, "I", "EmptyMsg",
         ""),
        ("11-02 09:15:01.250  1300  1350 D WindowMgr: Params:task=null size=3: ok", "threadtime",
         1300, 1350, "D", "WindowMgr", "Params:task=null size=3: ok"),
        ("  4321  4339 I ActivityTaskManager: no date columns", "threadtime", 4321, 4339, "I",
         "ActivityTaskManager", "no date columns"),
        ("11-02 09:15:01.250 D/StrictMode( 4321): time format", "time", 4321, None, "D",
         "StrictMode", "time format"),
        ("11-02 09:15:01.250: E/MyApp(12345): ddms export", "time", 12345, None, "E", "MyApp",
         "ddms export"),
        ("D/StrictMode( 987): brief", "brief", 987, None, "D", "StrictMode", "brief"),
        ("D/StrictMode(98765): brief wide pid", "brief", 98765, None, "D", "StrictMode",
         "brief wide pid"),
        ("E/AndroidRuntime: no time no pid", "brief", None, None, "E", "AndroidRuntime",
         "no time no pid"),
        ("2024-03-01 10:00:00.001 5150-5170/org.demo.app D/StrictMode: legacy studio",
         "studio_legacy", 5150, 5170, "D", "StrictMode", "legacy studio"),
        ("03-01 10:00:00.001 5150-5170/? E/ActivityManager: unknown process", "studio_legacy",
         5150, 5170, "E", "ActivityManager", "unknown process"),
        ("2024-03-01 10:00:00.001 D/StrictMode: studio without pid", "time", None, None, "D",
         "StrictMode", "studio without pid"),
        ("2025-01-09 08:00:00.100  7001-7001  AndroidRuntime          org.demo.app"
         "                         E  FATAL EXCEPTION: main", "studio", 7001, 7001, "E",
         "AndroidRuntime", "FATAL EXCEPTION: main"),
        ("08:00:00.100  D  compact studio view", "studio_compact", None, None, "D", None,
         "compact studio view"),
        ("StrictMode  D  studio 4.x columns", "studio_4x", None, None, "D", "StrictMode",
         "studio 4.x columns"),
        ("E ActivityManager: level and tag", "level_tag", None, None, "E", "ActivityManager",
         "level and tag"),
        ("StrictMode: tag only", "tag_only", None, None, None, "StrictMode", "tag only"),
    ],
)
def test_formats(text, fmt, pid, tid, level, tag, msg):
    ln = one(text)
    assert (ln.fmt, ln.pid, ln.tid, ln.level, ln.tag, ln.msg) == (fmt, pid, tid, level, tag, msg)
    assert ln.entry


def test_studio_2022_process_column():
    ln = one("2025-01-09 08:00:00.100  7001-7002  MyTag                   org.demo.app:remote"
             "                 W  message text")
    assert ln.process == "org.demo.app:remote"
    unknown = one("2025-01-09 08:00:00.100   90-90    libc                    pid-90"
                  "                               A  Fatal signal 6 (SIGABRT)")
    assert unknown.process is None and unknown.level == "A" and unknown.tag == "libc"


def test_legacy_process_slot():
    assert one("01-01 00:00:01.000 1-2/system_process I/Tag: m").process == "system_process"
    assert one("01-01 00:00:01.000 1-2/? I/Tag: m").process is None


def test_long_format_message_lines_inherit_the_header():
    parsed = parse_lines(
        "[ 11-02 09:15:01.250  4321: 4339 D/StrictMode ]\n"
        "StrictMode policy violation; ~duration=40 ms: android.os.strictmode.DiskReadViolation\n"
        "\tat org.demo.Repo.load(Repo.kt:3)\n"
        "\n"
        "[ 11-02 09:15:01.300  4321:0x10f3 I/Other ]\n"
        "second\n"
    )
    head, body, frame, blank, head2, second = parsed.lines
    assert head.fmt == "long" and head.entry and head.pid == 4321 and head.tid == 4339
    assert body.tag == "StrictMode" and body.pid == 4321 and body.msg.startswith("StrictMode")
    assert frame.tid == 4339
    assert blank.fmt == "blank"
    assert head2.tid == 0x10F3 and second.tag == "Other"


def test_studio_4x_continuation_repeats_level():
    parsed = parse_lines("StrictMode  D  StrictMode policy violation: x\n"
                         "D      at org.demo.A.b(A.kt:1)\n")
    assert [ln.tag for ln in parsed.lines] == ["StrictMode", "StrictMode"]
    assert parsed.lines[1].msg == "at org.demo.A.b(A.kt:1)"
    assert parsed.entries == 2


def test_separators_blank_and_continuations():
    parsed = parse_lines(
        "--------- beginning of main\n"
        "2024-03-01 10:00:00.001 5150-5150/org.demo.app E/AndroidRuntime: FATAL EXCEPTION: main\n"
        "    Process: org.demo.app, PID: 5150\n"
        "        at org.demo.A.b(A.kt:1)\n"
        "\n"
        "bare line\n"
    )
    sep, _head, proc, frame, _blank, bare = parsed.lines
    assert sep.fmt == "separator" and not sep.entry
    assert proc.continued and proc.pid == 5150 and proc.tag == "AndroidRuntime"
    assert proc.msg == "Process: org.demo.app, PID: 5150"
    assert frame.msg == "at org.demo.A.b(A.kt:1)"
    assert bare.pid is None and not bare.continued
    assert parsed.entries == 1


@pytest.mark.parametrize(
    "wrapped",
    [
        ",11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "> 11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "`11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "    11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "2024-01-05T10:20:30.1234567Z 11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "[task 2019-09-17T09:23:10.041Z] 11-02 09:15:01.250  4321  4339 D StrictMode: x",
        r"C:\logs\dump.txt:120:11-02 09:15:01.250  4321  4339 D StrictMode: x",
        "                 11-02 09:15:01.250  4321  4339 D StrictMode: x",
    ],
)
def test_wrappers(wrapped):
    ln = one(wrapped)
    assert (ln.pid, ln.tid, ln.tag, ln.msg) == (4321, 4339, "StrictMode", "x")


def test_console_wrap_inside_the_timestamp_is_joined():
    parsed = parse_lines("11-0\n2 09:15:01.250  4321  4339 D StrictMode: x\n")
    assert len(parsed.lines) == 1
    assert parsed.lines[0].pid == 4321 and parsed.lines[0].msg == "x"


def test_damaged_lines_are_counted_not_fatal():
    parsed = parse_lines(
        "11-02 09:15:01.250  4321  4339 D StrictMode: \tat a.B.c(B.kt:1)\n"
        "11-02 09:15:01.250  4321  43\n"
        "11-02 09:\n"
    )
    assert parsed.entries == 1
    assert parsed.damaged == 2
    # A damaged entry start is a new entry: it keeps the pid its visible prefix shows, or none —
    # never the pid of the entry above it (that is how another process's line became this one's).
    assert [ln.pid for ln in parsed.lines] == [4321, 4321, None]
    assert parsed.lines[2].tid is None and not parsed.lines[2].continued


def test_lines_after_a_damaged_entry_start_do_not_inherit_the_entry_above():
    parsed = parse_lines(
        "11-02 09:15:01.250  4321  4321 I OkHttp: --> GET /notes\n"
        "2024-11-02 09:15:01.250 5678-5701/com.other.pl\n"            # wrapped at column 47
        "ayer D/StrictMode: StrictMode policy violation\n"
        "D/StrictMode( 5678\n"                                  # a brief prefix, wrapped
        "): StrictMode policy violation; ~duration=95 ms\n"
    )
    assert [(ln.pid, ln.fmt) for ln in parsed.lines] == [
        (4321, "threadtime"), (5678, "bare"), (5678, "continuation"), (5678, "brief")]


def test_clean_leaves_content():
    assert clean("\tat a.B.c(B.kt:1)") == "at a.B.c(B.kt:1)"
    assert clean("- offline : ") == "offline : "


def test_pathological_long_line_is_linear():
    parsed = parse_lines("01-01 00:00:00.000 1 1 D x" + " " * 200_000 + "\n")
    assert len(parsed.lines) == 1


@pytest.mark.parametrize(
    "text",
    [
        "11-02 09:15:01.250 +0100  4321  4339 D StrictMode: x",          # -v zone
        "2024-11-02 09:15:01.250123  4321  4339 D StrictMode: x",        # -v year,usec
        "1730538901.250  4321  4339 D StrictMode: x",                    # -v epoch
        "     12.250  4321  4339 D StrictMode: x",                       # -v monotonic
        "11-02 09:15:01.250 u0_a77  4321  4339 D StrictMode: x",         # -v uid
        "\x1b[38;5;75m11-02 09:15:01.250  4321  4339 D StrictMode: x\x1b[0m",  # -v color
    ],
)
def test_threadtime_modifiers(text):
    ln = one(text)
    assert (ln.pid, ln.tid, ln.level, ln.tag, ln.msg) == (4321, 4339, "D", "StrictMode", "x")


def test_studio_with_hidden_time_and_pid():
    ln = one("DEBUG                   pid-551                              A  *** *** *** ***")
    assert (ln.fmt, ln.tag, ln.process, ln.level, ln.msg) == ("studio", "DEBUG", None, "A",
                                                              "*** *** *** ***")
    ln = one("2025-01-09 08:00:00.100  MyTag   org.demo.app   I  no pid column")
    assert (ln.pid, ln.tag, ln.process, ln.msg) == (None, "MyTag", "org.demo.app", "no pid column")


def test_empty_tag():
    ln = one("07-07 15:19:02.151 1337 3319 D : HostConnection::get() New Host Connection")
    assert (ln.pid, ln.tag, ln.msg) == (1337, "", "HostConnection::get() New Host Connection")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"])
def test_decode(encoding):
    from controller.analysis.lines import decode

    text = "11-02 09:15:01.250  4321  4339 D StrictMode: é x\n"
    assert decode(text.encode(encoding)) == text
    assert isinstance(decode(b"\xff\x00ok\x00"), str)  # never raises


@pytest.mark.parametrize("prefix", ["\ufeff", "\u200b", "  12 | ", "\xa0"])
def test_more_wrappers(prefix):
    ln = one(prefix + "11-02 09:15:01.250  4321  4339 D StrictMode: x")
    assert (ln.pid, ln.tag, ln.msg) == (4321, "StrictMode", "x")


def test_long_format_message_that_looks_like_a_prefix_and_uid():
    parsed = parse_lines("[ 11-02 09:15:01.250 u0_a77: 4321: 4339 I/MyApp ]\n"
                         "I think: this is the message\n"
                         "E/Other: still the message\n")
    head, first, second = parsed.lines
    assert (head.pid, head.tid, head.tag) == (4321, 4339, "MyApp")
    assert first.tag == second.tag == "MyApp"
    assert second.msg == "E/Other: still the message"


@pytest.mark.parametrize("cut", [4, 9, 6])
def test_console_wrap_anywhere_in_the_prefix(cut):
    line = "06-28 21:39:59.649  4321  4339 D StrictMode: x"
    head, tail = line[:cut], line[cut:]
    parsed = parse_lines(f"C:\\logs\\a.txt:7:{head}\n{tail}\n")
    assert len(parsed.lines) == 1 and parsed.lines[0].pid == 4321


def test_studio_single_column_is_the_tag():
    ln = one("2025-01-09 08:00:00.100  7001-7001  System.out  I  hello")
    assert (ln.tag, ln.process) == ("System.out", None)
    ln = one("2025-01-09 08:00:00.100  7001-7001  pid-7001  I  hello")
    assert (ln.tag, ln.process) == (None, None)


def test_threadtime_cut_inside_its_tag_is_still_that_entry():
    # The last line of a real paste (tests/corpus/, SpamBlocker#68): not Studio's columns.
    (ln,) = parse_lines("06-08 22:32:00.940  2090 18626 E Activi").lines
    assert (ln.fmt, ln.pid, ln.tid, ln.level, ln.tag, ln.msg) == (
        "threadtime", 2090, 18626, "E", None, "Activi")


def test_studio_line_with_an_empty_message_is_an_entry():
    line = ("2025-01-28 22:11:10.979 10066-10067 planet.myplanet         org.ole.planet.myplanet"
            "              I  ")
    (ln,) = parse_lines(line).lines
    assert (ln.fmt, ln.pid, ln.tag, ln.process, ln.msg) == (
        "studio", 10066, "planet.myplanet", "org.ole.planet.myplanet", "")


def test_studio_process_then_level_and_tag():
    # Android Studio 3.x with only the process column shown (tests/corpus/, VirtualApp#513).
    (ln,) = parse_lines("com.google.android.gms.persistent A/libc: Fatal signal 11 (SIGSEGV)").lines
    assert (ln.fmt, ln.pid, ln.process, ln.level, ln.tag) == (
        "studio_legacy", None, "com.google.android.gms.persistent", "A", "libc")


def test_a_dated_line_of_another_format_ends_a_long_record():
    # Studio pastes a line it could not parse as a -v long record (tests/corpus/, agera#35).
    parsed = parse_lines(
        "[ 04-25 10:02:40.358  3009: 3009 E/         ]\n"
        "process stopped due to unexpected signal 13\n"
        "04-25 10:02:40.358 18767-18767/com.google.android.agera.testapp D/HwCust: Create obj\n"
    )
    head, body, studio = parsed.lines
    assert (head.fmt, body.fmt, body.pid) == ("long", "long", 3009)
    assert (studio.fmt, studio.pid, studio.tag) == ("studio_legacy", 18767, "HwCust")


def test_studio_1x_small_colon_separator():
    (ln,) = parse_lines("10-19 17:14:18.200    4021-5302/? I/HwSystemManager\ufe55 "
                        "HoldService:checkBeforeShowDialog: uid:10103").lines
    assert (ln.fmt, ln.pid, ln.tag, ln.msg) == (
        "studio_legacy", 4021, "HwSystemManager", "HoldService:checkBeforeShowDialog: uid:10103")


def test_studio_4x_level_only_line_is_not_level_and_tag():
    # tests/corpus/, woocommerce-android#633: "E  Process: x" repeats the level only.
    parsed = parse_lines(" AndroidRuntime  D  Shutting down VM\n"
                         "                 E  FATAL EXCEPTION: main\n"
                         "                 E  Process: com.woocommerce.android, PID: 16599\n")
    assert [(ln.tag, ln.level, ln.msg) for ln in parsed.lines] == [
        ("AndroidRuntime", "D", "Shutting down VM"), ("AndroidRuntime", "E", "FATAL EXCEPTION: main"),
        ("AndroidRuntime", "E", "Process: com.woocommerce.android, PID: 16599")]
