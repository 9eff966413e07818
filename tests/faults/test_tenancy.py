"""Hostile tenants (tests/tenancy) for ``make faults``: revocation's figures on a live stack.

Three users, a real controller, their real bridges and simulated devices; mallory also runs
a hand-written protocol client. Figures: how many forged devices were announced and how many
got in (must be 0); how many device steps ran after a revocation (must be 0); and the
seconds from a revocation to the last stopped run or stream, over every kind of revocation
(a loan revoked or expired; an owner's or an admin's token revoked; the dashboard's tail).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from protocol.envelope import DeviceInfo
from tests.adb_support import AdbServer
from tests.controller.test_hub_support import FakeBridge, fast_settings
from tests.faults.figures import record
from tests.tenancy.revocation import queued_runs_stop, stream_stops
from tests.tenancy.support import WAIT_S, tenancy_stack

pytestmark = pytest.mark.adb

AREA = "hostile tenants (docs/security.md, threat model)"
FORGED = ["alice-br~127.0.0.1:5555", "a~b", "~", "x~"]


async def test_tenancy_figures(tmp_path: Path, adb_server: AdbServer) -> None:
    settings = fast_settings(stream_reauth_s=3600.0)  # only the revocation itself ends work
    async with tenancy_stack(tmp_path, adb_server, settings=settings,
                             bridges=("alice", "bob")) as stack:
        made = await stack["mallory"].http.post(
            "/v1/tokens", json={"kind": "bridge", "name": "mallory-fake"})
        assert made.status_code == 201, made.text
        fake = FakeBridge(stack.url, made.json()["token"], devices=[
            *(DeviceInfo(serial=s, state="device") for s in FORGED),
            DeviceInfo(serial="honest", state="device"),
        ])
        await fake.connect()
        try:
            async with asyncio.timeout(WAIT_S):
                while True:
                    listed = (await stack["mallory"].http.get("/v1/devices")).json()
                    ids = {d["id"] for d in listed}
                    if "mallory-fake~honest" in ids:
                        break
                    await asyncio.sleep(0.02)
        finally:
            await fake.close()
        got_in = sum(1 for s in FORGED if f"mallory-fake~{s}" in ids)
        record(AREA, "forged devices announced", len(FORGED))
        record(AREA, "  listed or usable", got_in, must_be_zero=True)

        runs = await queued_runs_stop(stack, runs=5)
        seconds = [runs.seconds]
        for how in ("grant", "expiry", "owner_token", "admin_token", "dashboard"):
            seconds.append((await stream_stops(stack, how)).seconds)
        record(AREA, "runs queued or running when their loan was revoked", 5)
        record(AREA, "  device steps run after the revocation", runs.after, must_be_zero=True)
        record(AREA, "seconds from revocation to the last stopped stream or run",
               round(max(seconds), 3), unit="s")
        assert got_in == 0
        assert runs.after == 0
