"""Which runs of a dead replica start over on a survivor (docs/cluster.md, "When a replica
dies"): only those that never sent an instrumentation, whose whole request was kept."""

from __future__ import annotations

from typing import Any

from controller.executor.recovery import restartable
from controller.store import Run, RunStep


def run(**request: Any) -> Run:
    return Run(id="r1", status="running",
               request={"test_code": "class T", "device_id": "desk~s1", **request})


def step(method: str, status: str = "ok") -> RunStep:
    return RunStep(run_id="r1", seq=0, kind="rpc", status=status, detail={"method": method})


def test_a_run_before_its_tests_starts_over() -> None:
    assert restartable(run(), [])
    assert restartable(run(), [step("workspace.compile"), step("device.install", "running")])


def test_a_run_that_sent_its_instrumentation_never_starts_over() -> None:
    for status in ("running", "ok", "failed"):
        assert not restartable(run(), [step("device.instrument", status)])


def test_a_run_without_its_whole_request_never_starts_over() -> None:
    assert not restartable(run(apks="prebuilt"), [])  # the bytes are never stored
    assert not restartable(run(classes=["a.B"]), [])  # a shard: its merge died with it
    assert not restartable(run(kind="sharded"), [])
    assert not restartable(Run(id="r", status="queued", request={"device_id": "d"}), [])
    assert not restartable(Run(id="r", status="queued", request={"test_code": "x"}), [])
