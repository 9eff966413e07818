"""A :class:`~device_bridge.sim.device.SimDevice` on its own event loop, in a daemon thread.

adbutils is blocking. A test or benchmark that drives the device through adbutils from the same
event loop the device runs on would deadlock; running the device in a thread of its own lets
synchronous code (and ``asyncio.to_thread`` callers) use it like a phone on the desk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from device_bridge.sim.device import SimDevice

__all__ = ["ThreadedSimDevice"]

T = TypeVar("T")


class ThreadedSimDevice:
    """``with ThreadedSimDevice(profile="pixel-7") as sim: adb connect sim.address``.

    Keyword arguments go to :class:`SimDevice`. :meth:`call` runs a function on the device's
    loop (the device is not thread-safe: touch its state only through ``call``/``run``).
    """

    def __init__(self, *, start_timeout: float = 10.0, **device_kwargs: Any) -> None:
        self._kwargs = device_kwargs
        self._timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.device: SimDevice | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ThreadedSimDevice:
        if self._loop is None:
            ready = threading.Event()
            loop = asyncio.new_event_loop()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()
                # What asyncio.run() does on the way out: end what is left (an accept still in
                # progress, say) so no socket outlives the loop.
                left = asyncio.all_tasks(loop)
                for task in left:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

            self._thread = threading.Thread(target=main, name="sim-device", daemon=True)
            self._thread.start()
            if not ready.wait(self._timeout):
                raise TimeoutError("simulated device loop did not start")
            self._loop = loop
        if self.device is None:
            self.device = self.call(lambda: SimDevice(**self._kwargs))
        try:
            self.run(self.device.start, timeout=self._timeout)
        except BaseException:
            self.close()  # e.g. the port is taken: do not leave the loop thread behind
            raise
        return self

    def stop_device(self) -> None:
        """Stop serving (adb sees the device go offline); :meth:`start` serves it again."""
        if self.device is not None and self._loop is not None:
            self.run(self.device.stop, timeout=self._timeout)

    def close(self) -> None:
        """Stop the device and its loop thread."""
        if self._loop is None:
            return
        self.stop_device()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(self._timeout)
        self._loop = None
        self._thread = None

    def __enter__(self) -> ThreadedSimDevice:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- access -------------------------------------------------------------------------

    def run(self, fn: Callable[[], Awaitable[T]], *, timeout: float | None = 60.0) -> T:
        """Run the coroutine ``fn()`` on the device's loop and return its result.

        ``timeout`` (seconds, ``None`` = wait forever) raises ``TimeoutError`` when exceeded.
        """
        if self._loop is None:
            raise RuntimeError("the simulated device is not running")

        async def wrapper() -> T:
            return await fn()

        future = asyncio.run_coroutine_threadsafe(wrapper(), self._loop)
        return future.result(timeout)

    def submit(self, fn: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Start the coroutine ``fn()`` on the device's loop without waiting for it."""
        if self._loop is None:
            raise RuntimeError("the simulated device is not running")

        async def wrapper() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop)

    def call(self, fn: Callable[[], T]) -> T:
        """Run the plain function ``fn()`` on the device's loop and return its result."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper)

    @property
    def _dev(self) -> SimDevice:
        if self.device is None:
            raise RuntimeError("the simulated device was never started")
        return self.device

    @property
    def port(self) -> int:
        return self._dev.port

    @property
    def address(self) -> str:
        """adb's serial for the device: ``127.0.0.1:PORT``."""
        return self._dev.address

    @property
    def serial(self) -> str:
        return self._dev.serial
