"""Coroutines parked until a condition holds, woken to re-check it.

The simulated device is single-threaded on the event loop, so its state is read and changed
without locks: a waiter parks on a private future, and whoever changes the state calls
:meth:`Waiters.notify`, which wakes every waiter to test its own predicate again. (An
``asyncio.Condition`` would do the same with a lock nobody here needs.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Waiters"]


class Waiters:
    """Parked coroutines, each waiting for its own predicate to become true."""

    def __init__(self) -> None:
        self._futures: list[asyncio.Future[None]] = []

    async def wait_for(self, predicate: Callable[[], object]) -> None:
        """Return once ``predicate()`` is truthy, re-testing it after each :meth:`notify`."""
        while not predicate():
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._futures.append(fut)
            try:
                await fut
            finally:
                if fut in self._futures:
                    self._futures.remove(fut)

    def notify(self) -> None:
        """Wake every waiter (each re-tests its predicate)."""
        futures, self._futures = self._futures, []
        for fut in futures:
            if not fut.done():
                fut.set_result(None)
