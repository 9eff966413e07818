"""Device health: readings, the owner's thresholds, and per-device Prometheus gauges.

The bridge reads a device's battery level and temperature, charging state, free storage, CPU
load and memory use on request (``device.health``: ``dumpsys battery``, ``df -k /data``,
``/proc/loadavg`` and ``/proc/meminfo`` — a few cheap shell reads, cached a few seconds on the
bridge). :class:`HealthMonitor` asks every connected device every ``poll_s`` (at most
``concurrency`` at once, each bounded by the RPC deadline) and on demand
(``GET /v1/devices/{device}/health?fresh=1``), and keeps the latest reading per device.

The owner (or an admin) sets thresholds per device (``PUT /v1/devices/{device}/thresholds``:
``max_temperature_c``, ``min_battery``). While the latest reading is past one, the device is
*not serving*: the device list says so (``health.serving`` false and ``health.reason``), and
device calls are refused ``503 unavailable`` (reason ``device_unhealthy``) until a reading is
back inside.

Prometheus: an authenticated scrape of ``/metrics`` (a Bearer token) adds, for each device the
caller may see, ``droidwire_device_battery_percent``, ``droidwire_device_battery_temperature_celsius``,
``droidwire_device_charging``, ``droidwire_device_storage_free_bytes``,
``droidwire_device_storage_total_bytes``, ``droidwire_device_cpu_load``,
``droidwire_device_memory_used_ratio`` and ``droidwire_device_serving``, labelled
``device="BRIDGE~SERIAL"``. An unauthenticated scrape stays free of serials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from controller.auth.authorization import DeviceRef
from controller.periodic import every
from controller.store import DeviceThresholds, retrying
from protocol.errors import ErrorCode, RpcError
from protocol.manage_methods import DEVICE_HEALTH
from protocol.methods import DeviceParams

if TYPE_CHECKING:
    from controller.hub import Hub

__all__ = ["GAUGES", "HealthMonitor", "Reading", "Thresholds", "render_gauges"]

log = logging.getLogger("droidwire.controller.health")

DEFAULT_POLL_S = 30.0
MAX_DEVICES = 10_000  # readings kept; beyond, the oldest go

#: reading key → (metric name, help)
GAUGES: dict[str, tuple[str, str]] = {
    "battery_level": ("droidwire_device_battery_percent", "Battery level (percent)"),
    "battery_temperature_c": (
        "droidwire_device_battery_temperature_celsius", "Battery temperature (degrees Celsius)"
    ),
    "charging": ("droidwire_device_charging", "1 while the device charges"),
    "storage_free_bytes": ("droidwire_device_storage_free_bytes", "Free space on /data"),
    "storage_total_bytes": ("droidwire_device_storage_total_bytes", "Size of /data"),
    "cpu_load": ("droidwire_device_cpu_load", "1-minute load average"),
    "memory_used_ratio": ("droidwire_device_memory_used_ratio", "Memory in use (0 to 1)"),
    "serving": ("droidwire_device_serving", "0 while the owner's thresholds stop serving it"),
}


@dataclass(frozen=True)
class Thresholds:
    max_temperature_c: float | None = None
    min_battery: int | None = None

    def breach(self, values: dict[str, Any]) -> str | None:
        """Why a reading stops the device from serving, or None."""
        temp, battery = values.get("battery_temperature_c"), values.get("battery_level")
        if self.max_temperature_c is not None and temp is not None and temp > self.max_temperature_c:
            return f"battery at {temp:g} °C, above the owner's {self.max_temperature_c:g} °C"
        if self.min_battery is not None and battery is not None and battery < self.min_battery:
            return f"battery at {battery}%, below the owner's {self.min_battery}%"
        return None


@dataclass
class Reading:
    device: str  # BRIDGE~SERIAL
    values: dict[str, Any]
    at: float  # time.time()
    reason: str | None = None  # set while the owner's thresholds stop serving it

    def to_json(self) -> dict[str, Any]:
        return {**self.values, "at": self.at, "serving": self.reason is None,
                "reason": self.reason}


@dataclass
class HealthMonitor:
    hub: Hub
    poll_s: float = DEFAULT_POLL_S
    concurrency: int = 8
    readings: dict[tuple[str, str], Reading] = field(default_factory=dict)

    # -- readings ------------------------------------------------------------------------------

    async def read(self, device: DeviceRef) -> Reading:
        """Ask the device now (the bridge may answer from its few-seconds cache)."""
        health = await self.hub.call(device, DEVICE_HEALTH, DeviceParams(serial=device.serial))
        values = health.model_dump(exclude_unset=True, exclude={"read_at"})
        reading = Reading(str(device), values, time.time())
        reading.reason = (await self.thresholds(device)).breach(values)
        key = (device.bridge_id, device.serial)
        self.readings.pop(key, None)
        while len(self.readings) >= MAX_DEVICES:
            self.readings.pop(next(iter(self.readings)))
        self.readings[key] = reading
        return reading

    def latest(self, device: DeviceRef) -> Reading | None:
        return self.readings.get((device.bridge_id, device.serial))

    def check(self, device: DeviceRef) -> None:
        """Refuse a call on a device the owner's thresholds stop (``unavailable``)."""
        reading = self.latest(device)
        if reading is not None and reading.reason is not None:
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"the owner stopped serving this device: {reading.reason}",
                {"reason": "device_unhealthy"},
            )

    async def poll_once(self) -> int:
        """Read every connected device once; how many answered."""
        semaphore = asyncio.Semaphore(self.concurrency)
        refs = [
            DeviceRef(entry.id, serial, entry.owner_id, entry.name)
            for entry in self.hub.entries()
            for serial, info in entry.live_devices().items()
            if info.state == "device"
        ]

        async def one(ref: DeviceRef) -> bool:
            async with semaphore:
                try:
                    await self.read(ref)
                    return True
                except RpcError as exc:
                    log.debug("health of %s: %s", ref, exc.code.value)
                    return False

        return sum(await asyncio.gather(*(one(r) for r in refs)))

    # -- thresholds ----------------------------------------------------------------------------

    async def thresholds(self, device: DeviceRef) -> Thresholds:
        async with self.hub.store.session() as session:
            row = await session.get(DeviceThresholds, (device.bridge_id, device.serial))
        if row is None:
            return Thresholds()
        return Thresholds(row.max_temperature_c, row.min_battery)

    async def set_thresholds(self, device: DeviceRef, limits: Thresholds) -> None:
        async def write() -> None:
            async with self.hub.store.session() as session, session.begin():
                row = await session.get(DeviceThresholds, (device.bridge_id, device.serial))
                if row is None:
                    row = DeviceThresholds(bridge_id=device.bridge_id, serial=device.serial)
                    session.add(row)
                row.max_temperature_c = limits.max_temperature_c
                row.min_battery = limits.min_battery

        await retrying(write, what="device thresholds")
        reading = self.latest(device)
        if reading is not None:  # judge the latest reading against the new limits at once
            reading.reason = limits.breach(reading.values)

    # -- the loop ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[HealthMonitor]:
        """Poll every ``poll_s`` while inside (the controller's lifespan)."""
        async with every(self.poll_s, self.poll_once, name="droidwire-health", log=log,
                         what="health poll"):
            yield self


def render_gauges(readings: Iterable[Reading]) -> bytes:
    """Prometheus text of the per-device gauges for ``readings``."""
    rows = list(readings)

    class _Collector:
        def collect(self) -> Iterable[Metric]:
            for key, (name, text) in GAUGES.items():
                family = GaugeMetricFamily(name, text, labels=["device"])
                for r in rows:
                    value = (r.reason is None) if key == "serving" else r.values.get(key)
                    if value is not None:
                        family.add_metric([r.device], float(value))
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return generate_latest(registry)
