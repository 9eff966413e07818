"""protocol.eager: a coroutine runs in the caller's step up to its first suspension."""

from __future__ import annotations

import asyncio

import pytest

from protocol.eager import start_eagerly


async def test_a_coroutine_that_never_suspends_runs_in_the_callers_step() -> None:
    ran: list[str] = []

    async def quick() -> None:
        ran.append("all of it")

    assert start_eagerly(quick(), asyncio.get_running_loop().create_task) is None
    assert ran == ["all of it"]  # before any trip through the event loop


async def test_a_suspension_hands_the_rest_to_a_task() -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def slow() -> None:
        ran.append("before")
        await gate.wait()
        ran.append("after")

    task = start_eagerly(slow(), asyncio.get_running_loop().create_task)
    assert task is not None and ran == ["before"]
    gate.set()
    await task
    assert ran == ["before", "after"]


async def test_cancelling_the_task_reaches_the_coroutine() -> None:
    seen: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(waits(), asyncio.get_running_loop().create_task)
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_an_error_in_the_first_step_is_raised_to_the_caller() -> None:
    async def broken() -> None:
        raise OSError("the socket is gone")

    with pytest.raises(OSError, match="gone"):
        start_eagerly(broken(), asyncio.get_running_loop().create_task)


async def test_an_error_after_the_suspension_is_the_tasks() -> None:
    async def later() -> None:
        await asyncio.sleep(0)
        raise ValueError("late")

    task = start_eagerly(later(), asyncio.get_running_loop().create_task)
    assert task is not None
    with pytest.raises(ValueError, match="late"):
        await task
