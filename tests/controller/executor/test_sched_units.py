"""Scheduling's pure parts: a device's queue (one at a time, FIFO per user, round robin across
users, cancellation), the owner/any selectors, per-test logcat slices, retried-test merging,
and the JUnit report with a test's attempts and logcat."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from controller.analysis import parse_instrumentation
from controller.executor import DeviceView, select_devices
from controller.executor.device_steps import failed_tests, merge_retries
from controller.executor.queue import DeviceQueue, Scheduler
from controller.executor.slices import slice_by_test
from droidwire.run import write_junit

WAIT_S = 5.0


async def _serve(queue: DeviceQueue, jobs: list[tuple[str, str]]) -> list[str]:
    """Jobs (user, run) queue up behind a holder; the order in which they get the device."""
    order: list[str] = []
    await queue.acquire("holder", "first")
    gates = {run: asyncio.Event() for _, run in jobs}

    async def job(user: str, run: str) -> None:
        await queue.acquire(user, run)
        order.append(run)
        gates[run].set()
        queue.release()

    tasks = []
    for user, run in jobs:
        tasks.append(asyncio.create_task(job(user, run)))
        await asyncio.sleep(0)  # queued in this order
    assert queue.waiting()[:1] == [jobs[0][1]]
    queue.release()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*tasks)
    return order


async def test_one_user_cannot_starve_another() -> None:
    jobs = [("alice", "a1"), ("alice", "a2"), ("alice", "a3"), ("bob", "b1"), ("carol", "c1"),
            ("bob", "b2")]
    queue = DeviceQueue()
    order = await _serve(queue, jobs)
    # Round robin over users, FIFO within each: bob's and carol's first runs come before
    # alice's second, though alice queued first.
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]
    assert not queue.busy and len(queue) == 0


async def test_a_single_user_is_served_in_order() -> None:
    order = await _serve(DeviceQueue(), [("u", f"r{i}") for i in range(5)])
    assert order == [f"r{i}" for i in range(5)]


async def test_a_cancelled_waiter_leaves_the_queue_and_the_turn_moves_on() -> None:
    scheduler = Scheduler()
    got: list[str] = []

    async def use(run: str, user: str, hold: asyncio.Event | None = None) -> None:
        async with scheduler.turn("dev", user, run):
            got.append(run)
            if hold is not None:
                await hold.wait()

    hold = asyncio.Event()
    holder = asyncio.create_task(use("r1", "u", hold))
    await asyncio.sleep(0)
    assert scheduler.busy("dev")
    doomed = asyncio.create_task(use("r2", "u"))
    later = asyncio.create_task(use("r3", "v"))
    await asyncio.sleep(0)
    assert scheduler.queue("dev").waiting() == ["r2", "r3"] and scheduler.depth() == 2
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert scheduler.queue("dev").waiting() == ["r3"]
    hold.set()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(holder, later)
    assert got == ["r1", "r3"]
    assert not scheduler.busy("dev") and scheduler.depth() == 0


async def test_a_turn_granted_to_a_cancelled_waiter_is_handed_on() -> None:
    queue = DeviceQueue()
    await queue.acquire("u", "r1")
    second = asyncio.create_task(queue.acquire("u", "r2"))
    third = asyncio.create_task(queue.acquire("v", "r3"))
    await asyncio.sleep(0)
    queue.release()  # r2's future resolves ...
    second.cancel()  # ... and r2 is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await second
    async with asyncio.timeout(WAIT_S):
        await third
    assert queue.holder == "r3"
    queue.release()
    assert not queue.busy


def dev(bridge: str, serial: str, owner: str) -> DeviceView:
    return DeviceView(bridge, bridge, owner, serial, "device", {"sdk": 34})


def test_owner_and_any_selectors() -> None:
    devices = [dev("a", "s1", "u-alice"), dev("b", "s2", "u-bob"), dev("b", "s3", "u-bob")]
    names = {"u-alice": "alice", "u-bob": "bob"}

    def pick(*sel: str, me: str | None = "u-bob") -> list[str]:
        return [d.id for d in select_devices(list(sel), devices, me=me, owner_names=names)]

    assert pick("owner=bob") == ["b~s2", "b~s3"]
    assert pick("owner=u-alice") == ["a~s1"]  # by id too
    assert pick("owner!=bob") == ["a~s1"]
    assert pick("owner=me") == ["b~s2", "b~s3"]
    assert pick("owner=me", me="u-alice") == ["a~s1"]
    assert pick("owner=me", me=None) == []
    assert pick("owner=nobody") == []
    assert pick("any") == ["a~s1"]
    assert pick("any", "owner=bob") == ["a~s1", "b~s2", "b~s3"]


LOG = """\
11-30 06:00:00.000  100  110 I TestRunner: run started: 2 tests
11-30 06:00:00.001  100  110 I TestRunner: started: slowRead(com.x.T)
11-30 06:00:00.002  200  200 D StrictMode: StrictMode policy violation; ~duration=40 ms: android.os.strictmode.DiskReadViolation
11-30 06:00:00.003  100  110 I TestRunner: finished: slowRead(com.x.T)
11-30 06:00:00.004  300  300 I OtherApp: between tests
11-30 06:00:00.005  100  110 I TestRunner: started: fast(com.x.T)
11-30 06:00:00.006  100  110 E TestRunner: failed: fast(com.x.T)
11-30 06:00:00.007  100  110 I TestRunner: finished: fast(com.x.T)
11-30 06:00:01.001  100  110 I TestRunner: started: fast(com.x.T)
11-30 06:00:01.002  200  200 I DroidUnblocker: elapsed=3ms
11-30 06:00:01.003  100  110 I TestRunner: finished: fast(com.x.T)
11-30 06:00:02.000  100  110 I TestRunner: started: crashes(com.x.T)
11-30 06:00:02.001  200  200 E AndroidRuntime: FATAL EXCEPTION: main
"""


def test_logcat_slices_follow_the_runner_markers() -> None:
    slices = slice_by_test(LOG.splitlines())
    assert set(slices) == {("com.x.T", "slowRead"), ("com.x.T", "fast"), ("com.x.T", "crashes")}
    slow = slices[("com.x.T", "slowRead")].splitlines()
    assert len(slow) == 3 and "DiskReadViolation" in slow[1]
    fast = slices[("com.x.T", "fast")]
    assert "between tests" not in fast and "slowRead" not in fast
    assert fast.count("started: fast") == 2 and "elapsed=3ms" in fast  # the retry's window too
    assert "FATAL EXCEPTION" in slices[("com.x.T", "crashes")]  # never finished: to the end
    capped = slice_by_test(LOG.splitlines(), max_lines=2)[("com.x.T", "slowRead")].splitlines()
    assert capped[:2] == slow[:2] and capped[2] == "… 1 more lines"


INSTRUMENT = """\
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: test=ok
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: test=ok
INSTRUMENTATION_STATUS_CODE: 0
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: test=flaky
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: stack=java.lang.AssertionError: once
INSTRUMENTATION_STATUS: test=flaky
INSTRUMENTATION_STATUS_CODE: -2
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: test=broken
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.x.T
INSTRUMENTATION_STATUS: stack=java.lang.AssertionError: always
INSTRUMENTATION_STATUS: test=broken
INSTRUMENTATION_STATUS_CODE: -2
INSTRUMENTATION_RESULT: stream=
INSTRUMENTATION_CODE: -1
"""


def test_only_failed_tests_are_retried_and_merged() -> None:
    parsed = parse_instrumentation(INSTRUMENT)
    assert failed_tests(parsed.tests) == [("com.x.T", "flaky"), ("com.x.T", "broken")]
    tests = [{"class": t.class_name, "name": t.name, "status": t.status, "stack": t.stack,
              "attempts": 1} for t in parsed.tests]
    attempts = [
        [{"class": "com.x.T", "name": "flaky", "status": "passed", "stack": None},
         {"class": "com.x.T", "name": "broken", "status": "failed", "stack": "again"}],
        [{"class": "com.x.T", "name": "broken", "status": "failed", "stack": "still"}],
    ]
    merge_retries(tests, attempts)
    by_name = {t["name"]: t for t in tests}
    assert by_name["ok"] == {"class": "com.x.T", "name": "ok", "status": "passed", "stack": None,
                             "attempts": 1}
    assert by_name["flaky"]["status"] == "passed" and by_name["flaky"]["flaky"] is True
    assert by_name["flaky"]["attempts"] == 2 and "once" in by_name["flaky"]["first_stack"]
    assert by_name["broken"]["status"] == "failed" and by_name["broken"]["attempts"] == 3
    assert by_name["broken"]["stack"] == "still" and "flaky" not in by_name["broken"]


def test_junit_has_a_suite_per_device_with_attempts_and_logcat(tmp_path: Path) -> None:
    results = [
        {"run_id": "r1", "device": {"id": "desk~emu-1"}, "verification_status": "CONFIRMED",
         "summary": "StrictMode violations: DiskRead", "tests": [
             {"class": "com.x.T", "name": "slowRead", "status": "passed", "stack": None,
              "attempts": 1, "logcat": "line one\x07 bell\nline two"},
             {"class": "com.x.T", "name": "flaky", "status": "passed", "stack": None,
              "attempts": 2, "flaky": True, "logcat": ""}]},
        {"run_id": "r2", "device": {"id": "pi~emu-2"}, "verification_status": "PENDING",
         "reason_code": "cancelled", "summary": "Inconclusive: cancelled", "tests": []},
    ]
    path = tmp_path / "report.xml"
    write_junit(path, results)
    root = ET.parse(path).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["droidwire.desk~emu-1", "droidwire.pi~emu-2"]
    slow, flaky = suites[0].findall("testcase")
    assert slow.findtext("system-out") == "line one\ufffd bell\nline two"
    props = {p.get("name"): p.get("value") for p in flaky.iter("property")}
    assert props == {"attempts": "2", "flaky": "true"}
    assert flaky.find("system-out") is None
    second = {p.get("name"): p.get("value") for p in suites[1].iter("property")}
    assert second["reason_code"] == "cancelled" and suites[1].get("tests") == "0"
