"""One background task that runs a step every so often while a ``with`` block is inside.

The controller's sweepers (device health polls, loan clean-ups) each need the same thing: sleep
first (bridges are still connecting when the controller starts), run the step, log a failed
round and go on, and stop with the lifespan that started them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

__all__ = ["every"]


@contextlib.asynccontextmanager
async def every(
    interval_s: float,
    step: Callable[[], Awaitable[Any]],
    *,
    name: str,
    log: logging.Logger,
    what: str,
) -> AsyncIterator[None]:
    """Run ``step`` every ``interval_s`` (the first after one interval) while inside; a round
    that raises is logged as ``"{what} failed"`` and the next one tries again."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except Exception:  # a failed round is logged; the next one tries again
                log.exception("%s failed", what)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
