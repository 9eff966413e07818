"""L3 heuristics over time (issue 19): a hang (three activity pause timeouts in a minute) and
CPU above 95 % with GC churn — only for the app under test, only within their windows."""

from __future__ import annotations

from controller.analysis import analyze

PKG = "com.example.app"


def _pause(t: str, pkg: str = PKG) -> str:
    return (f"12-01 10:{t}.000  1000  1200 W ActivityTaskManager: Activity pause timeout for "
            f"ActivityRecord{{3c1e2f0 u0 {pkg}/.MainActivity t42}}")


def _gc(t: str, pid: int = 4321) -> str:
    return (f"12-01 10:{t}.000  {pid}  {pid + 9} I {PKG}: Background concurrent copying GC freed "
            "204800(8MB) AllocSpace objects, 0(0B) LOS objects, 49% free, 9MB/18MB, paused 60us "
            "total 120.5ms")


START = f"12-01 10:00:00.000  1000  1100 I ActivityManager: Start proc 4321:{PKG}/u0a123 for activity {{{PKG}/.MainActivity}}"


def _anr_with_cpu(pct: str, pid: int = 4321, name: str = PKG) -> list[str]:
    head = "12-01 10:01:00.000  1000  1150 E ActivityManager: "
    return [head + line for line in (
        f"ANR in {name} ({name}/.MainActivity)",
        f"PID: {pid}",
        "Reason: Input dispatching timed out",
        "CPU usage from 0ms to 5012ms later:",
        f"  {pct}% {pid}/{name}: 90% user + 8% kernel / faults: 2000 minor",
        "  12% 1000/system_server: 8% user + 4% kernel",
    )]


def kinds(text: str) -> list[str]:
    return [i["kind"] for i in analyze(text, package=PKG).to_json()["issues"]]


def test_three_pause_timeouts_in_a_minute_are_a_hang() -> None:
    text = "\n".join([START, _pause("00:10"), _pause("00:30"), _pause("00:55")])
    result = analyze(text, package=PKG).to_json()
    [hang] = [i for i in result["issues"] if i["kind"] == "hang"]
    assert hang["level"] == "error" and hang["count"] == 3
    assert "3 activity pause timeouts in 45 s" in hang["title"] and PKG in hang["title"]


def test_spread_out_or_foreign_pause_timeouts_are_no_hang() -> None:
    spread = "\n".join([START, _pause("00:00"), _pause("01:10"), _pause("02:20")])
    assert "hang" not in kinds(spread)
    two = "\n".join([START, _pause("00:10"), _pause("00:20")])
    assert "hang" not in kinds(two)
    other = "\n".join([START] + [_pause(f"00:{s}", "com.other") for s in ("10", "20", "30")])
    assert "hang" not in kinds(other)


def test_cpu_above_95_with_gc_churn() -> None:
    gcs = [_gc(f"00:{s:02d}") for s in range(40, 48)]  # 8 collections in 7 s
    text = "\n".join([START, *gcs, *_anr_with_cpu("98")])
    result = analyze(text, package=PKG).to_json()
    [churn] = [i for i in result["issues"] if i["kind"] == "cpu_gc_churn"]
    assert churn["count"] == 8 and churn["title"].startswith(f"CPU 98% with GC churn in {PKG}")


def test_busy_cpu_without_churn_or_churn_without_busy_cpu_is_not_reported() -> None:
    few = [_gc("00:40"), _gc("00:45")]
    assert "cpu_gc_churn" not in kinds("\n".join([START, *few, *_anr_with_cpu("98")]))
    many = [_gc(f"00:{s:02d}") for s in range(40, 48)]
    assert "cpu_gc_churn" not in kinds("\n".join([START, *many, *_anr_with_cpu("60")]))
    slow = [_gc(f"00:{s:02d}") for s in range(0, 60, 12)]  # 5 collections in 48 s
    assert "cpu_gc_churn" not in kinds("\n".join([START, *slow, *_anr_with_cpu("99")]))
    other = [_gc(f"00:{s:02d}", pid=5555) for s in range(40, 48)]
    text = "\n".join([START, *other, *_anr_with_cpu("99", pid=5555, name="com.other")])
    assert "cpu_gc_churn" not in kinds(text)
