"""Eager start of a coroutine on Python 3.11 (3.12's eager tasks, by hand).

The controller's and the bridge's writers run in the step that queued a frame: a send suspends
only when the transport pushes back, so a frame usually leaves at once, with no task and no
extra trip through the event loop on the RPC path. If the coroutine does suspend, a task takes
it over from that suspension. No I/O and no event loop here (protocol/ stays sans-I/O): this
only drives a coroutine; the caller says how a task is made (``loop.create_task``).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["start_eagerly"]

T = TypeVar("T")


def start_eagerly(
    coro: Coroutine[Any, Any, None], spawn: Callable[[Coroutine[Any, Any, None]], T]
) -> T | None:
    """Run ``coro`` in the caller's step up to its first suspension. None: it finished
    there; else what ``spawn`` made of the rest (a task that carries it on from that
    suspension). An exception of that first step is raised here.

    The first step runs with the *caller's* task current: a coroutine that enters
    ``asyncio.timeout`` (or otherwise cancels "the current task") before its first
    suspension must not be started this way.
    """
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return spawn(_carry_on(coro, yielded))


async def _carry_on(coro: Coroutine[Any, Any, None], yielded: Any) -> None:
    await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, None], yielded: Any) -> Generator[Any, Any, None]:
    """Drive ``coro`` on from the suspension where it yielded ``yielded`` (what a task does
    with a coroutine's yields: pass them to the loop, send or throw back what comes)."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration:
                return
