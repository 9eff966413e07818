"""``am instrument -r`` parsing (fixtures written for droidwire)."""

from __future__ import annotations

from controller.analysis import parse_instrumentation


def status(code: int, *, cls: str = "org.demo.CalcTest", test: str | None = "adds",
           extra: str = "", new_order: bool = False) -> str:
    keys = {"class": cls, "current": "1", "id": "AndroidJUnitRunner", "numtests": "3",
            "stream": "\norg.demo.CalcTest:"}
    if test is not None:
        keys["test"] = test
    order = sorted(keys) if new_order else ["numtests", "stream", "id", "test", "class", "current"]
    body = "".join(f"INSTRUMENTATION_STATUS: {k}={keys[k]}\n" for k in order if k in keys)
    return body + extra + f"INSTRUMENTATION_STATUS_CODE: {code}\n"


OK_END = ("INSTRUMENTATION_RESULT: stream=\n\nTime: 1.25\n\nOK (3 tests)\n\n\n"
          "INSTRUMENTATION_CODE: -1\n")
STACK = ("INSTRUMENTATION_STATUS: stack=java.lang.AssertionError: expected:<4> but was:<5>\n"
         "\n"
         "\tat org.junit.Assert.fail(Assert.java:88)\n"
         "        at org.demo.CalcTest.subtracts(CalcTest.kt:20)\n"
         "\n")


def test_passed_failed_ignored_assumption_in_both_key_orders():
    text = (status(1) + status(0)
            + status(1, test="subtracts", new_order=True)
            + status(-2, test="subtracts", extra=STACK, new_order=True)
            + status(1, test="skipped") + status(-3, test="skipped")
            + status(1, test="assumes") + status(-4, test="assumes")
            + OK_END)
    r = parse_instrumentation(text)
    assert [(t.name, t.status) for t in r.tests] == [
        ("adds", "passed"), ("subtracts", "failed"), ("skipped", "ignored"),
        ("assumes", "assumption_failure")]
    failed = r.tests[1]
    assert failed.stack.startswith("java.lang.AssertionError: expected:<4> but was:<5>\n\n")
    assert "CalcTest.subtracts(CalcTest.kt:20)" in failed.stack
    j = r.to_json()
    assert (j["total"], j["passed"], j["failed"], j["errors"], j["ignored"]) == (4, 1, 1, 0, 2)
    assert (j["run_status"], j["message"], j["time_s"], j["expected"]) == ("ok", "OK (3 tests)",
                                                                          1.25, 3)


def test_class_level_ignore_is_not_a_passing_test_named_null():
    r = parse_instrumentation(status(1, test="null") + status(-3, test="null") + OK_END)
    (t,) = r.tests
    assert (t.name, t.status, t.class_level) == ("null", "ignored", True)
    assert r.to_json()["passed"] == 0


def test_status_2_is_metadata():
    meta = ("INSTRUMENTATION_STATUS: class=org.demo.CalcTest\n"
            "INSTRUMENTATION_STATUS: test=adds\n"
            "INSTRUMENTATION_STATUS: allure-id=42\n"
            "INSTRUMENTATION_STATUS_CODE: 2\n"
            "INSTRUMENTATION_STATUS: return-code=1\n"
            "INSTRUMENTATION_STATUS_CODE: 1\n")
    r = parse_instrumentation(status(1) + meta + status(0) + OK_END)
    assert [(t.name, t.status) for t in r.tests] == [("adds", "passed")]
    assert {m["code"] for m in r.metadata} == {"2", "1"}


def test_process_crashed_keeps_partial_results():
    text = (status(1) + status(0) + status(1, test="hangs")
            + "INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n")
    r = parse_instrumentation(text)
    assert [(t.name, t.status) for t in r.tests] == [("adds", "passed"), ("hangs", "error")]
    assert (r.run_status, r.message) == ("crashed", "Process crashed.")


def test_exception_short_and_long_msg():
    text = (status(1) + "INSTRUMENTATION_RESULT: shortMsg=java.lang.IllegalStateException\n"
            "INSTRUMENTATION_RESULT: longMsg=java.lang.IllegalStateException: no looper\n"
            "INSTRUMENTATION_CODE: 0\n")
    r = parse_instrumentation(text)
    assert r.run_status == "crashed"
    assert r.message == "java.lang.IllegalStateException: no looper"
    assert r.short_msg == "java.lang.IllegalStateException"


def test_crash_in_stream_and_output_that_stops():
    text = (status(1, test="opens")
            + "INSTRUMENTATION_STATUS: class=org.demo.CalcTest\n"
              "INSTRUMENTATION_STATUS: test=opens\n"
              "INSTRUMENTATION_STATUS: stack=java.lang.IllegalStateException: bad config\n"
              "\tat org.demo.Main.onCreate(Main.kt:27)\n\n"
              "INSTRUMENTATION_STATUS: stream=\n"
              "Process crashed while executing opens(org.demo.CalcTest):\n"
              "java.lang.IllegalStateException: bad config\n"
              "\tat org.demo.Main.onCreate(Main.kt:27)\n")
    r = parse_instrumentation(text)
    (t,) = r.tests
    assert t.status == "error" and t.stack.startswith("java.lang.IllegalStateException: bad config")
    assert r.run_status == "crashed"
    assert r.message.startswith("Process crashed while executing opens(org.demo.CalcTest):")


def test_incomplete_when_no_code():
    r = parse_instrumentation(status(1) + status(0) + status(1, test="next"))
    assert r.run_status == "incomplete"
    assert [t.status for t in r.tests] == ["passed", "error"]


def test_failed_by_error_record_and_by_exception_text():
    text = ("INSTRUMENTATION_STATUS: id=ActivityManagerService\n"
            "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: "
            "ComponentInfo{org.demo.test/androidx.test.runner.AndroidJUnitRunner}\n"
            "INSTRUMENTATION_STATUS_CODE: -1\n"
            "android.util.AndroidException: INSTRUMENTATION_FAILED: org.demo.test/"
            "androidx.test.runner.AndroidJUnitRunner\n"
            "\tat com.android.commands.am.Instrument.run(Instrument.java:519)\n")
    r = parse_instrumentation(text)
    assert r.tests == [] and r.run_status == "failed"
    assert r.message.startswith("Unable to find instrumentation info")
    only = parse_instrumentation("android.util.AndroidException: INSTRUMENTATION_FAILED: a/b\n")
    assert (only.run_status, only.message) == ("failed", "a/b")


def test_wrappers_lost_first_char_and_locale_digits():
    text = ("$ adb shell am instrument -w -r org.demo.test/androidx.test.runner.AndroidJUnitRunner\n"
            + "`" + status(1)[1:]                    # lost 'I', backtick from a paste
            + "".join("                 " + ln + "\n" for ln in status(0).splitlines())
            + "INSTRUMENTATION_RESULT: stream=\n\nTime: ٠٫٠١٥\n\nOK (1 test)\n\n\n"
              "Error: Failed to generate Emma/JaCoCo coverage. \n"
              "INSTRUMENTATION_CODE: -1\n`\n")
    r = parse_instrumentation(text)
    assert [(t.name, t.status) for t in r.tests] == [("adds", "passed")]
    assert (r.run_status, r.time_s, r.code) == ("ok", 0.015, -1)


def test_without_dash_r():
    r = parse_instrumentation("am instrument -w org.demo.test/.Runner\n"
                              "INSTRUMENTATION_RESULT: shortMsg=Process crashed.\n"
                              "INSTRUMENTATION_CODE: 0")
    assert (r.tests, r.run_status) == ([], "crashed")


def test_end_bundle_without_identity_ends_the_running_test():
    text = (status(1) + "INSTRUMENTATION_STATUS: stream=.\nINSTRUMENTATION_STATUS_CODE: 0\n"
            + OK_END)
    assert [(t.name, t.status) for t in parse_instrumentation(text).tests] == [("adds", "passed")]
