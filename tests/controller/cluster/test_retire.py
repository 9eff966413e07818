"""Retiring what is gone for good (docs/security.md, "Retiring devices and bridges"): a
revoked bridge's device must not stay ``disconnected`` forever.

Two controller replicas (real processes) on PostgreSQL and real Redis; the real ``droidwire
bridge`` process on replica A with a simulated device. Nothing attached can be forgotten; once
the bridge's token is revoked, its device is forgotten through A and the bridge through B with
``droidwire device forget --bridge`` — and neither replica lists or counts them any more.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    EXIT_REFUSED,
    Cluster,
    cluster,
    listed,
    redis_ns,
    until,
)
from tests.controller.cluster.test_metrics import scrape, total
from tests.controller.conftest import ADMIN_TOKEN, bearer, pg_url  # noqa: F401 - fixture

pytestmark = [pytest.mark.adb, pytest.mark.timeout(120)]


async def cli(url: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from droidwire import main; main()", *args,
        env={**os.environ, "DROIDWIRE_CONTROLLER": url, "DROIDWIRE_TOKEN": ADMIN_TOKEN},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT_S)
    return proc.returncode or 0, out.decode()


async def test_a_revoked_bridge_and_its_device_can_be_forgotten(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    world = cluster
    serial = world.sim.address
    (a, api_a), (b, api_b) = await asyncio.gather(world.replica(), world.replica())
    made = await api_a.post("/v1/tokens", json={"kind": "bridge", "name": "desk"})
    assert made.status_code == 201, made.text
    token_id = made.json()["id"]
    bridge = await world.bridge([a.url], made.json()["token"])
    await until(listed(api_b, serial), "device live, held by A", world)
    (device,) = [d for d in (await api_b.get("/v1/devices")).json() if d["serial"] == serial]

    # Attached: nothing to forget (it would only come back).
    for api in (api_a, api_b):
        attached = await api.delete(f"/v1/devices/{device['id']}")
        assert attached.status_code == 409, attached.text
        connected = await api.delete("/v1/bridges/desk")
        assert connected.status_code == 409, connected.text
    bob = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
    stranger = bearer(bob.json()["token"])
    assert (await api_b.delete("/v1/bridges/desk", headers=stranger)).status_code == 404

    # Revoked: the bridge stops; its device stays known, disconnected, on every replica.
    assert (await api_a.delete(f"/v1/tokens/{token_id}")).status_code == 204
    assert await bridge.wait() == EXIT_REFUSED

    async def away_everywhere() -> bool:
        for api in (api_a, api_b):
            states = [d["state"] for d in (await api.get("/v1/devices")).json()
                      if d["serial"] == serial]
            if states != ["disconnected"]:
                return False
        return True

    await until(away_everywhere, "the device listed disconnected on both replicas", world)

    async def counted_away(n: int) -> bool:
        scrapes = [await scrape(api) for api in (api_a, api_b)]
        return total(scrapes, "droidwire_devices", state="disconnected") == n

    await until(lambda: counted_away(1), "the device counted disconnected", world)

    gone = await api_a.delete(f"/v1/devices/{device['id']}")
    assert gone.status_code == 204, gone.text
    assert (await api_a.delete(f"/v1/devices/{device['id']}")).status_code == 404
    code, out = await cli(b.url, "device", "forget", "desk", "--bridge")
    assert code == 0 and "forgot bridge desk" in out, out
    code, out = await cli(b.url, "device", "forget", "desk", "--bridge")
    assert code != 0 and "no such bridge" in out, out

    async def forgotten_everywhere() -> bool:
        for api in (api_a, api_b):
            if any(d["serial"] == serial for d in (await api.get("/v1/devices")).json()):
                return False
            if (await api.get("/v1/bridges")).json():
                return False
        return True

    await until(forgotten_everywhere, "neither replica lists them", world)
    await until(lambda: counted_away(0), "nothing counted disconnected", world)
    entries = set(await _audit(world.db_url))
    assert {("device.forget", "ok"), ("bridge.forget", "ok"),
            ("device.forget", "conflict")} <= entries


async def _audit(db_url: str) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from controller.store import AuditEntry, Store

    store = Store(db_url)
    try:
        async with store.session() as session:
            rows = (await session.execute(select(AuditEntry.action, AuditEntry.outcome))).all()
    finally:
        await store.close()
    return [(str(a), str(o)) for a, o in rows]
