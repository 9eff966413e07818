"""What the device layer returns: device states and facts, what an install put on the device,
and an open stream socket: plain values, which the calls of :class:`.client.AdbDevices` return.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.envelope import DeviceInfo, Profile

__all__ = ["DeviceFacts", "DeviceState", "Installed", "ShellSocket"]


@dataclass(frozen=True, slots=True)
class Installed:
    """What an install put on the device, as the device tells it: ``package`` ("" when it
    cannot be told), and whether it ``existed`` there before (an update of it)."""

    package: str
    existed: bool


@dataclass(frozen=True, slots=True)
class DeviceState:
    """One line of ``adb devices``: ``state`` is adb's (``device``, ``offline``, ``unauthorized`` …)."""

    serial: str
    state: str


class ShellSocket:
    """An open adb stream socket; :meth:`close` (any thread, idempotent) frees its slot."""

    def __init__(self, sock: socket.socket, release: Callable[[], object]) -> None:
        self.sock = sock
        self._release: Callable[[], object] | None = release
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is None:
            return
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        release()


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """What :meth:`AdbDevices.info` learns from ``getprop``, ``dumpsys battery`` and ``wm size``."""

    serial: str
    state: str = "device"
    model: str | None = None
    manufacturer: str | None = None
    release: str | None = None
    sdk: int | None = None
    abi: str | None = None
    battery: int | None = None
    screen: tuple[int, int] | None = None  # (width, height) in pixels, override size first
    props: dict[str, str] = field(default_factory=dict, repr=False)

    def to_device_info(self, profile: Profile = Profile.STANDARD) -> DeviceInfo:
        def name(value: str | None) -> str | None:
            return value[:256] if value else None

        battery = self.battery if self.battery is not None and 0 <= self.battery <= 100 else None
        return DeviceInfo(
            serial=self.serial,
            state=self.state,
            model=name(self.model),
            manufacturer=name(self.manufacturer),
            release=name(self.release),
            sdk=self.sdk,
            abi=name(self.abi),
            battery=battery,
            profile=profile,
        )
