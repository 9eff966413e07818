"""ANRs known from ActivityManager's service timeout, and their merge with the full report."""

from __future__ import annotations

from pathlib import Path

from controller.analysis import analyze

OWN_CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "samples"
T = "04-01 11:50:{s}.780  1862  1911 {lvl} ActivityManager: {msg}\n"
TIMEOUT = T.format(s="46", lvl="W", msg="Timeout executing service: ServiceRecord{b745aa2 u0 "
                   "com.x.y/com.onesignal.SyncJobService}")


def test_a_log_cut_before_anr_in_keeps_the_service_anr_real_sample():
    text = OWN_CORPUS / "anr_08_onesignalxamarin284_timeout_executing_service_no_anr_line.txt"
    (a,) = analyze(text.read_text("utf-8"), package="com.dciartform.brandambassador.soa.dev").anrs
    assert (a.package, a.source) == ("com.dciartform.brandambassador.soa.dev", "service_timeout")
    assert a.reason == ("executing service com.dciartform.brandambassador.soa.dev/"
                        "com.onesignal.SyncJobService")


def test_the_full_report_supersedes_the_timeout():
    text = TIMEOUT + T.format(s="56", lvl="E", msg="ANR in com.x.y") + T.format(
        s="56", lvl="E", msg="PID: 4444")
    (a,) = analyze(text).anrs
    assert (a.package, a.pid, a.source) == ("com.x.y", 4444, "ActivityManager")


def test_am_anr_completes_the_timeout_with_its_pid():
    text = TIMEOUT + ("04-01 11:50:56.780  1862  1911 I am_anr  : [0,4444,com.x.y,952680005,"
                      "executing service com.x.y/com.onesignal.SyncJobService]\n")
    (a,) = analyze(text).anrs
    assert (a.package, a.pid) == ("com.x.y", 4444)


def test_a_timeout_from_another_tag_is_not_an_anr():
    assert analyze(TIMEOUT.replace("ActivityManager", "MyLogger")).anrs == []
