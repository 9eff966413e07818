"""Scheduling: a queue per device, one run at a time, FIFO per user and fair across users.

Two runs installing and clearing the same app on one device would spoil each other's evidence,
so a device serves one run at a time (:meth:`Scheduler.turn`). Waiting runs are kept per user
in arrival order; when the device frees up, the next turn goes to the user who has waited
longest *since their last turn* (round robin over users, FIFO within a user). One user
submitting twenty runs therefore delays another user's single run by one run, not twenty.

A waiter that is cancelled (its run cancelled, its deadline passed) leaves the queue; a turn
granted to a waiter that was cancelled at the same moment is handed on, never lost.

In cluster mode a run on another replica may want the same device: after its turn here, a run
also takes the device's cluster-wide turn (``shared``, :meth:`controller.cluster.Cluster.
device_turn`), waiting while another replica's run holds it. Fairness is per replica; one
run at a time per device holds across all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

__all__ = ["DeviceQueue", "Scheduler", "SharedTurn"]

#: ``shared(device_id, run_id, on_wait)``: the device's turn across replicas, held for the
#: ``async with`` block; ``on_wait`` is awaited once if it has to wait for another replica.
SharedTurn = Callable[
    [str, str, Callable[[], Awaitable[None]] | None], AbstractAsyncContextManager[None]
]


@dataclass(slots=True)
class _Waiter:
    run_id: str
    future: asyncio.Future[None]


class DeviceQueue:
    """One device's turns."""

    def __init__(self) -> None:
        self.holder: str | None = None  # the run using the device
        self._users: OrderedDict[str, deque[_Waiter]] = OrderedDict()

    @property
    def busy(self) -> bool:
        return self.holder is not None

    def waiting(self) -> list[str]:
        """Run ids waiting, in the order they would be served."""
        queues = {user: list(q) for user, q in self._users.items()}
        out: list[str] = []
        while any(queues.values()):
            for user in list(queues):
                if queues[user]:
                    out.append(queues[user].pop(0).run_id)
        return out

    def __len__(self) -> int:
        return sum(len(q) for q in self._users.values())

    async def acquire(
        self, user: str, run_id: str, *, on_wait: Callable[[], None] | None = None
    ) -> None:
        """Wait for this run's turn (cancellable); ``on_wait`` is told once it is queued."""
        if self.holder is None and not self._users:
            self.holder = run_id
            return
        waiter = _Waiter(run_id, asyncio.get_running_loop().create_future())
        self._users.setdefault(user, deque()).append(waiter)
        if on_wait is not None:
            on_wait()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release()  # granted as we were cancelled: pass the turn on
            else:
                self._forget(user, waiter)
            raise

    def release(self) -> None:
        """End the current turn and grant the next one."""
        self.holder = None
        while self._users:
            user, queue = next(iter(self._users.items()))
            waiter = queue.popleft()
            if queue:
                self._users.move_to_end(user)  # this user's next run waits for the others
            else:
                del self._users[user]
            if not waiter.future.done():
                self.holder = waiter.run_id
                waiter.future.set_result(None)
                return

    def _forget(self, user: str, waiter: _Waiter) -> None:
        queue = self._users.get(user)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(waiter)
        if not queue:
            del self._users[user]


class Scheduler:
    """The devices' queues, by device id (and their cluster-wide turns, with ``shared``)."""

    def __init__(self, shared: SharedTurn | None = None) -> None:
        self.shared = shared
        self._queues: dict[str, DeviceQueue] = {}
        # Seconds each device was held by this scheduler's runs (its cluster turn included),
        # since the process started: droidwire_device_busy_seconds_total (controller.metrics).
        self.busy_seconds: dict[str, float] = {}

    def queue(self, device_id: str) -> DeviceQueue:
        queue = self._queues.get(device_id)
        if queue is None:
            queue = self._queues[device_id] = DeviceQueue()
        return queue

    def depth(self) -> int:
        """Runs waiting for a busy device, over all devices."""
        return sum(len(q) for q in self._queues.values())

    def busy(self, device_id: str) -> bool:
        queue = self._queues.get(device_id)
        return queue is not None and (queue.busy or len(queue) > 0)

    @contextlib.asynccontextmanager
    async def turn(
        self,
        device_id: str,
        user: str,
        run_id: str,
        *,
        on_wait: Callable[[], None] | None = None,
        on_shared_wait: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[None]:
        """Hold ``device_id`` for ``run_id`` for the block's duration: its turn here, then
        (cluster mode) its turn across replicas, ``on_shared_wait`` awaited if that waits."""
        queue = self.queue(device_id)
        await queue.acquire(user, run_id, on_wait=on_wait)
        held_since: float | None = None
        try:
            if self.shared is None:
                held_since = time.monotonic()
                yield
            else:
                async with self.shared(device_id, run_id, on_shared_wait):
                    held_since = time.monotonic()
                    yield
        finally:
            if held_since is not None:
                self.busy_seconds[device_id] = (
                    self.busy_seconds.get(device_id, 0.0) + time.monotonic() - held_since
                )
            queue.release()
            if not queue.busy and not len(queue):
                self._queues.pop(device_id, None)
