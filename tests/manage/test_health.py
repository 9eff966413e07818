"""Device health end to end: readings from the simulated phone through the bridge, the
owner's thresholds stopping a hot or drained device (said in the device list, refused calls),
and the per-device gauges of an authenticated ``/metrics`` scrape."""

from __future__ import annotations

import pytest

from controller.services import services_of
from tests.controller.conftest import bearer
from tests.manage.support import World

pytestmark = pytest.mark.adb


def _set(world: World, level: int, temperature: int) -> None:
    def change() -> None:
        world.sim.device.battery_level, world.sim.device.battery_temperature = level, temperature

    world.sim.call(change)


async def test_readings_thresholds_and_metrics(world: World) -> None:
    _set(world, 87, 285)
    fresh = await world.call("olivia", "GET", "/health", params={"fresh": 1})
    assert fresh.status_code == 200, fresh.text
    reading = fresh.json()
    assert reading["battery_level"] == 87 and reading["battery_temperature_c"] == 28.5
    assert reading["serving"] is True and reading["reason"] is None
    assert reading["storage_free_bytes"] > 0 and reading["memory_used_ratio"] > 0

    device = f"desk~{world.sim.address}"
    http = world.ctl.http
    anonymous = await http.get("/metrics", headers={"Authorization": ""})
    assert "droidwire_device_battery" not in anonymous.text and world.sim.address not in anonymous.text
    owner = (await http.get("/metrics", headers=bearer(world.tokens["olivia"]))).text
    assert f'droidwire_device_battery_percent{{device="{device}"}} 87.0' in owner
    assert f'droidwire_device_battery_temperature_celsius{{device="{device}"}} 28.5' in owner
    assert f'droidwire_device_serving{{device="{device}"}} 1.0' in owner
    stranger = (await http.get("/metrics", headers=bearer(world.tokens["eve"]))).text
    assert "droidwire_device_battery_percent{" not in stranger
    bad = await http.get("/metrics", headers=bearer("dw_u_not-a-token"))
    assert bad.status_code == 401

    # The owner's thresholds: a borrower cannot set them.
    await world.ctl.http.post("/v1/grants", json={"device": world.sim.address, "user": "bob"},
                              headers=bearer(world.tokens["olivia"]))
    limits = {"max_temperature_c": 45, "min_battery": 15}
    refused = await world.call("bob", "PUT", "/thresholds", json=limits)
    assert refused.status_code == 403
    assert (await world.call("olivia", "PUT", "/thresholds", json=limits)).status_code == 200
    assert (await world.call("bob", "GET", "/thresholds")).json() == limits

    _set(world, 60, 471)  # 47.1 °C
    assert await services_of(world.ctl.app).health.poll_once() == 1
    listed = (await http.get("/v1/devices", headers=bearer(world.tokens["bob"]))).json()
    assert listed[0]["health"]["serving"] is False
    assert "45" in listed[0]["health"]["reason"]
    shell = await world.call("bob", "POST", "/shell", json={"command": "echo hi"})
    assert shell.status_code == 503 and shell.json()["error"]["reason"] == "device_unhealthy"
    pulled = await world.call("bob", "GET", "/apps")
    assert pulled.status_code == 503
    owner = (await http.get("/metrics", headers=bearer(world.tokens["olivia"]))).text
    assert f'droidwire_device_serving{{device="{device}"}} 0.0' in owner

    _set(world, 10, 300)  # cool, but drained
    reading = (await world.call("olivia", "GET", "/health", params={"fresh": 1})).json()
    assert reading["serving"] is False and "15%" in reading["reason"]
    _set(world, 80, 300)
    await services_of(world.ctl.app).health.poll_once()
    shell = await world.call("bob", "POST", "/shell", json={"command": "echo hi"})
    assert shell.status_code == 200, shell.text
