"""Device tracking (``adb track-devices``) and keeping network devices connected.

:class:`DeviceWatcher` turns the adb server's device reports into :class:`DeviceChange` events;
:class:`NetworkKeeper` re-runs ``adb connect`` for addresses that drop (a phone on Wi-Fi, a
simulated device that restarted), with a capped, jittered backoff per address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from device_bridge.adb.wire import AdbConnection, AdbError
from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:  # the client makes watchers (AdbDevices.watch): a type only here
    from device_bridge.adb.client import AdbDevices

__all__ = ["ABSENT", "DeviceChange", "DeviceWatcher", "NetworkKeeper"]

log = logging.getLogger("droidwire.bridge.adb")


@dataclass(frozen=True, slots=True)
class DeviceChange:
    """A device appeared, changed state, or went away (``state == "absent"``)."""

    serial: str
    state: str
    previous: str | None


ABSENT = "absent"


class DeviceWatcher:
    """Device state changes from ``host:track-devices`` as an async iterator of DeviceChange.

    A reader thread holds the tracking connection; each report is a full snapshot, kept in a
    one-slot mailbox (the newest replaces an unread one, so a slow consumer costs no memory and
    still ends on the true state). The watcher diffs successive snapshots. If the adb server
    goes away, every device turns ``absent`` and the thread retries every ``retry_s``.
    """

    def __init__(self, devices: AdbDevices, *, retry_s: float = 0.5) -> None:
        self._devices = devices
        self._retry_s = retry_s
        self._snapshot: dict[str, str] | None = None
        self._mail: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._stop = threading.Event()
        self._conn: AdbConnection | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[DeviceChange] = []
        self.server_up = False

    @property
    def devices(self) -> dict[str, str]:
        """The last snapshot handed to the consumer (serial → state)."""
        return dict(self._snapshot or {})

    async def __aenter__(self) -> DeviceWatcher:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="adb-track-devices", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._stop.set()
        self._wake.set()  # a consumer waiting in __anext__ ends its iteration
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError, AdbError):
                conn.conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)

    def _post(self, snapshot: dict[str, str]) -> None:
        with self._lock:
            self._mail = snapshot
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake.set)

    def _run(self) -> None:
        client = self._devices._client
        while not self._stop.is_set():
            try:
                conn = client.make_connection()
                conn.conn.settimeout(None)  # reports come only on changes: wait for them
                self._conn = conn
                if self._stop.is_set():
                    conn.close()
                    return
                with conn:
                    conn.send_command("host:track-devices")
                    conn.check_okay()
                    self.server_up = True
                    while not self._stop.is_set():
                        text = conn.read_string_block()
                        snapshot: dict[str, str] = {}
                        for line in text.splitlines():
                            serial, _, state = line.strip().partition("\t")
                            if serial and state:
                                snapshot[serial] = state
                        self._post(snapshot)
            except (AdbError, OSError, ValueError, EOFError) as exc:
                if self._stop.is_set():
                    return
                log.info("device tracking interrupted: %s; retrying", exc)
                self.server_up = False
                self._post({})
            finally:
                self._conn = None
            self._stop.wait(self._retry_s)

    def __aiter__(self) -> DeviceWatcher:
        return self

    async def __anext__(self) -> DeviceChange:
        while not self._pending:
            if self._stop.is_set():
                raise StopAsyncIteration
            self._wake.clear()
            with self._lock:
                mail, self._mail = self._mail, None
            if mail is None:
                await self._wake.wait()
                continue
            old = self._snapshot or {}
            self._snapshot = mail
            for serial in sorted(old.keys() - mail.keys()):
                self._devices.forget(serial)
                self._pending.append(DeviceChange(serial, ABSENT, old[serial]))
            for serial, state in sorted(mail.items()):
                if old.get(serial) != state:
                    self._devices.forget(serial)
                    self._pending.append(DeviceChange(serial, state, old.get(serial)))
        return self._pending.pop(0)

    def state_of(self, serial: str) -> str:
        """The device's state in the last snapshot handed out, ``absent`` if not listed."""
        return (self._snapshot or {}).get(serial, ABSENT)

    async def wait_for(self, serial: str, state: str, *, timeout_s: float) -> None:
        """Consume changes until ``serial`` is in ``state`` (``absent`` included).

        Raises ``TimeoutError`` after ``timeout_s`` seconds.
        """
        async with asyncio.timeout(timeout_s):
            if self._snapshot is not None and self.state_of(serial) == state:
                return
            async for _change in self:
                if self._snapshot is not None and self.state_of(serial) == state:
                    return
        raise RpcError(ErrorCode.UNAVAILABLE, "the device watcher was closed")


class NetworkKeeper:
    """Keep network devices (``HOST:PORT``) connected: ``adb connect`` them, and again after
    they drop.

    adb itself retries a dropped TCP device every 10 s for about a minute, then forgets it
    (the real adb server's behaviour). The keeper does not wait for that: an address absent, or offline
    for longer than ``offline_grace_s``, is disconnected and connected again, each address on
    its own full-jitter backoff (``retry_s`` doubling up to ``retry_cap_s``), for as long as
    the keeper runs.
    """

    def __init__(
        self,
        devices: AdbDevices,
        addresses: Iterable[str] = (),
        *,
        offline_grace_s: float = 2.0,
        retry_s: float = 0.5,
        retry_cap_s: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self._devices = devices
        self.addresses: set[str] = set(addresses)
        self.offline_grace_s = offline_grace_s
        self.retry_s = retry_s
        self.retry_cap_s = retry_cap_s
        self._rng = rng or random.Random()
        self._next_try: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._offline_since: dict[str, float] = {}
        self.connects = 0  # successful `adb connect` calls, for tests and metrics

    def add(self, address: str) -> None:
        self.addresses.add(address)
        self._next_try.pop(address, None)

    def remove(self, address: str) -> None:
        self.addresses.discard(address)

    async def run(self) -> None:
        """Run until cancelled."""
        async with self._devices.watch() as watcher:
            while True:
                await self._tend(watcher)
                # asyncio.timeout, not wait_for: on 3.11 wait_for returns the result when a
                # change lands in the same tick as cancel(), swallowing the cancellation, and
                # this loop would then never end.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._sleep()):
                        await anext(watcher)

    def _sleep(self) -> float:
        now = time.monotonic()
        due = [t - now for t in self._next_try.values()]
        return max(0.05, min(due, default=self.retry_s))

    async def _tend(self, watcher: DeviceWatcher) -> None:
        now = time.monotonic()
        for address in sorted(self.addresses):
            state = watcher.state_of(address) if watcher.server_up else ABSENT
            if state == "device":
                self._failures.pop(address, None)
                self._next_try.pop(address, None)
                self._offline_since.pop(address, None)
                continue
            if state not in (ABSENT, "offline"):
                continue  # unauthorized, recovery…: connecting again would not help
            if state == "offline":
                since = self._offline_since.setdefault(address, now)
                if now - since < self.offline_grace_s:
                    self._next_try.setdefault(address, since + self.offline_grace_s)
                    continue
            if now < self._next_try.get(address, 0.0):
                continue
            await self._reconnect(address, offline=state == "offline")

    async def _reconnect(self, address: str, *, offline: bool) -> None:
        try:
            if offline:
                await self._devices.disconnect(address)
            await self._devices.connect(address)
        except RpcError as exc:
            failures = self._failures.get(address, 0) + 1
            self._failures[address] = failures
            ceiling = min(self.retry_cap_s, self.retry_s * 2 ** (failures - 1))
            self._next_try[address] = time.monotonic() + self._rng.random() * ceiling
            log.info("adb connect %s failed (%s); retry %d", address, exc.message, failures)
            return
        self.connects += 1
        self._failures.pop(address, None)
        self._offline_since.pop(address, None)
        self._next_try[address] = time.monotonic() + self.retry_s
        log.info("adb connect %s: connected", address)
