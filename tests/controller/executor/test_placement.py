"""Placement (docs/sandbox.md, "Placement"): which device a run without a named device goes
to — least queue depth, then least expected time, then fewest of the caller's own runs — and
the ``label=`` / ``pool=`` selectors. The executor's planning against a real SQLite store (its
runs are what the loads are counted from); no device is called while planning.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.auth import Principal
from controller.executor import SandboxExecutor
from controller.executor.gateway import DeviceView
from controller.executor.placement import Load, order_by_load
from controller.executor.request import ExecuteRequest
from controller.executor.selection import select_devices
from controller.store import Run, RunStatus, Store, TokenKind, User
from device_bridge.policy import PolicyConfig
from protocol.errors import RpcError
from tests.controller.executor.support import OWNER, LocalGateway, llm_style_test

SERIALS = ["d1", "d2", "d3", "d4"]


def view(serial: str, **info: Any) -> DeviceView:
    return DeviceView("desk", "desk", OWNER, serial, "device", info)


def principal(user_id: str) -> Principal:
    return Principal("t-" + user_id, TokenKind.USER, user_id, user_id, user_id, True)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'controller.db'}")
    await s.migrate()
    async with s.session() as session, session.begin():
        session.add_all([User(id=u, name=u) for u in ("alice", "bob")])
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def executor(store: Store) -> SandboxExecutor:
    gateway = LocalGateway()
    gateway.add_bridge("desk", _NoDispatcher(), SERIALS)
    return SandboxExecutor(gateway, store)


class _NoDispatcher:
    """Planning calls no bridge: a dispatcher that only has capabilities."""

    def capabilities(self) -> Any:
        from protocol.envelope import Capabilities

        return Capabilities(devices=True)

    async def __call__(self, method: str, params: Any) -> Any:
        raise AssertionError(f"planning called {method}")


async def plan_device(executor: SandboxExecutor, user: str = "alice",
                      device: list[str] | None = None) -> list[str]:
    request = ExecuteRequest.model_validate(
        {"test_code": llm_style_test("loadSettingsFromDisk()"), "device": device or []})
    plan = await executor.plan(request, principal(user))
    return [d.serial for d in plan.devices if d is not None]


async def test_runs_without_a_device_spread_over_the_idle_devices(
    executor: SandboxExecutor,
) -> None:
    chosen = [(await plan_device(executor))[0] for _ in range(8)]
    assert Counter(chosen) == {s: 2 for s in SERIALS}
    assert chosen[:4] == SERIALS  # equal loads: listed order


async def test_concurrent_plans_never_see_the_same_idle_device(
    executor: SandboxExecutor,
) -> None:
    chosen = await asyncio.gather(*(plan_device(executor) for _ in range(4)))
    assert sorted(c[0] for c in chosen) == SERIALS


async def test_a_count_takes_the_least_loaded_devices(executor: SandboxExecutor) -> None:
    await plan_device(executor, device=["d1"])
    await plan_device(executor, device=["d2"])
    assert sorted(await plan_device(executor, device=["2"])) == ["d3", "d4"]
    assert await plan_device(executor, device=["any"]) == ["d1"]  # all at depth 1 now


async def test_a_finished_run_no_longer_loads_its_device(
    executor: SandboxExecutor, store: Store,
) -> None:
    assert await plan_device(executor) == ["d1"]
    async with store.session() as session, session.begin():
        for run in (await session.execute(Run.__table__.select())).all():
            await session.execute(Run.__table__.update().where(Run.id == run.id)
                                  .values(status=RunStatus.FINISHED.value))
    assert await plan_device(executor) == ["d1"]


async def test_a_faster_device_wins_a_tie(executor: SandboxExecutor, store: Store) -> None:
    async with store.session() as session, session.begin():
        for serial, ms in (("d1", 9000), ("d2", 8000), ("d3", 500), ("d4", 7000)):
            session.add(Run(status=RunStatus.FINISHED.value,
                            request={"device_id": f"desk~{serial}"},
                            result={"timings": {"run_ms": ms}}))
    assert await plan_device(executor) == ["d3"]


def test_the_order_is_depth_then_expected_time_then_the_callers_share() -> None:
    devices = [view(s) for s in SERIALS]
    loads = {
        "desk~d1": Load(depth=1, mean_ms=100, mine=0),
        "desk~d2": Load(depth=1, mean_ms=100, mine=1),  # same depth and time, more of mine
        "desk~d3": Load(depth=0, mean_ms=5000),  # idle but slow
        "desk~d4": Load(depth=1, mean_ms=50, mine=1),  # fastest of the busy ones
    }
    assert [d.serial for d in order_by_load(devices, loads)] == ["d3", "d4", "d1", "d2"]
    # No history: the mean of the devices that have one.
    history = {"desk~d2": Load(0, 10), "desk~d3": Load(0, 30)}
    assert [d.serial for d in order_by_load(devices[:3], history)] == ["d2", "d1", "d3"]


def test_label_and_pool_selectors() -> None:
    devices = [view("d1", labels=["lab-a", "fast"], pool="ci"),
               view("d2", labels=["lab-a"], pool="ci"),
               view("d3", labels=["lab-b"]),
               view("d4")]
    pick = lambda *sel: [d.serial for d in select_devices(sel, devices)]  # noqa: E731
    assert pick("label=lab-a") == ["d1", "d2"]
    assert pick("label!=lab-a") == ["d3", "d4"]
    assert pick("label=nope") == []
    assert pick("pool=ci") == ["d1"]  # one device: the first of the (load-ordered) list
    assert pick("pool=ci", "label=lab-b") == ["d1", "d3"]
    for bad in ("pool!=ci", "label>x"):
        with pytest.raises(RpcError) as info:
            select_devices([bad], devices)
        assert info.value.code.value == "bad_request"


async def test_a_pool_run_goes_to_the_pools_least_loaded_device(
    executor: SandboxExecutor, store: Store,
) -> None:
    from controller.store import Bridge, Device

    async with store.session() as session, session.begin():
        session.add(Bridge(id="desk", name="desk", owner_id="alice"))
        await session.flush()
        session.add_all([Device(bridge_id="desk", serial=s, pool="ci") for s in ("d2", "d4")])
    assert await plan_device(executor, device=["pool=ci"]) == ["d2"]
    assert await plan_device(executor, device=["pool=ci"]) == ["d4"]
    assert await plan_device(executor, device=["pool=ci"]) == ["d2"]
    assert await plan_device(executor, device=["pool=other"]) == []


def test_bridge_config_labels() -> None:
    config = PolicyConfig.from_mapping({
        "labels": ["lab-a"], "pool": "ci",
        "devices": {"R1": {"profile": "full", "labels": ["fast"], "pool": "perf"},
                    "R2": "standard"},
    })
    assert config.labels_for("R1") == (["fast", "lab-a"], "perf")
    assert config.labels_for("R2") == (["lab-a"], "ci")
    for bad in ({"labels": "lab-a"}, {"labels": ["has space"]}, {"pool": ""},
                {"devices": {"R1": {"labels": ["x"] * 1 + ["-bad"]}}}):
        with pytest.raises(ValueError, match="label"):
            PolicyConfig.from_mapping(bad)
