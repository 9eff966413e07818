"""Item 2 of the hostile-tenant suite: device selection cannot be hijacked.

Mallory runs a hand-written protocol client (``FakeBridge``: the protocol package's own
session, envelope and codec over a real WebSocket) that announces forged devices: serials
that pass for another bridge's id (``alice-br~SERIAL``), whitespace, control characters,
look-alikes. Each is dropped where the inventory comes in; what the fake announces that is
well-formed (alice's bare serial) and lends to alice never changes what her selectors pick:
her own device wins, and a lent device is reached by its full id, at once."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from protocol.envelope import DEVICES_CHANNEL, DeviceInfo
from protocol.methods import DevicesChanged
from tests.adb_support import AdbServer
from tests.controller.executor.support import llm_style_test
from tests.controller.test_hub_support import FakeBridge
from tests.tenancy.support import WAIT_S, Stack, tenancy_stack

pytestmark = pytest.mark.adb

FORGED_BY_MODEL = ["two words", "tab\there", "bell\x07", "ｅｍｕｌａｔｏｒ-5554", "zero\u200bwidth",
                   "ＡＢＣ~1", ""]


def forged(serial: str) -> DeviceInfo:
    """A device the wire model would refuse, built past its validation (a hostile client
    does not run our validators)."""
    return DeviceInfo.model_construct(serial=serial, state="device", sdk=34)


async def fake_bridge(stack: Stack, name: str, devices: list[DeviceInfo]) -> FakeBridge:
    made = await stack["mallory"].http.post("/v1/tokens", json={"kind": "bridge", "name": name})
    assert made.status_code == 201, made.text
    fake = FakeBridge(stack.url, made.json()["token"], devices=devices)
    await fake.connect()
    return fake


async def listed(stack: Stack, user: str) -> set[str]:
    response = await stack[user].http.get("/v1/devices")
    assert response.status_code == 200, response.text
    return {d["id"] for d in response.json()}


async def until_listed(stack: Stack, user: str, device_id: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while device_id not in await listed(stack, user):  # noqa: ASYNC110 - bounded poll
            await asyncio.sleep(0.02)
    await stack.wait_recorded(device_id)


async def test_forged_serials_are_dropped_where_the_inventory_comes_in(
    tmp_path: Path, adb_server: AdbServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="droidwire.controller.hub")
    async with tenancy_stack(tmp_path, adb_server, bridges=("alice", "mallory")) as stack:
        alice = stack["alice"]
        spoof = f"{alice.bridge_name}~{alice.serial}"  # passes for alice's device's id
        fake = await fake_bridge(stack, "mallory-fake", [
            DeviceInfo(serial=spoof, state="device", sdk=34),
            DeviceInfo(serial="honest-1", state="device", sdk=34),
        ])
        try:
            await until_listed(stack, "mallory", "mallory-fake~honest-1")
            assert not any("~" in i.partition("~")[2] for i in await listed(stack, "mallory"))
            # Forged serials the wire model refuses, in an inventory event: dropped too (the
            # event as a whole), and the controller keeps serving.
            await fake.emit(DEVICES_CHANNEL, DevicesChanged.model_construct(
                devices=[forged(s) for s in FORGED_BY_MODEL]).model_dump(mode="python"))
            # Then one the model lets through with a forged sibling: the sibling alone goes.
            await fake.emit(DEVICES_CHANNEL, DevicesChanged(devices=[
                DeviceInfo(serial="honest-2", state="device"),
                DeviceInfo(serial="a~b", state="device"),
            ]).model_dump(mode="python"))
            await until_listed(stack, "mallory", "mallory-fake~honest-2")
            seen = await listed(stack, "mallory")
            assert {i for i in seen if i.startswith("mallory-fake~")} == {
                "mallory-fake~honest-1", "mallory-fake~honest-2"}  # honest-1: seen before
            for serial in [*FORGED_BY_MODEL, spoof, "a~b"]:
                assert not any(i.endswith(f"~{serial}") for i in seen if serial)
            # Each refusal is logged with its typed reason (the serial shown escaped).
            refusals = [r.getMessage() for r in caplog.records
                        if "device refused" in r.getMessage()]
            assert any("reason separator" in m and "mallory-fake" in m for m in refusals)
            # Nothing forged was recorded either: it cannot be lent to alice.
            response = await stack["mallory"].http.post(
                "/v1/grants", json={"device": f"mallory-fake~{spoof}", "user": "alice"})
            assert response.status_code == 404, response.text
            # Alice's own id resolves to her own device only.
            response = await alice.http.post(f"/v1/devices/{alice.device_id}/shell",
                                             json={"argv": ["echo", "mine"]})
            assert response.status_code == 200 and fake.runs == {}, response.text
        finally:
            await fake.close()


async def test_a_loan_never_changes_what_a_borrowers_selectors_pick(
    tmp_path: Path, adb_server: AdbServer
) -> None:
    async with tenancy_stack(tmp_path, adb_server) as stack:
        alice, bob = stack["alice"], stack["bob"]
        # Mallory announces a device with alice's very serial and lends it to her, unasked.
        fake = await fake_bridge(stack, "mallory-fake", [
            DeviceInfo(serial=alice.serial, state="device", sdk=34),
        ])
        try:
            await until_listed(stack, "mallory", f"mallory-fake~{alice.serial}")
            await stack.lend("mallory", f"mallory-fake~{alice.serial}", "alice")
            code = llm_style_test("fetchGreetingBlocking()")

            async def picks(selector: Any) -> dict[str, Any]:
                result = await stack.run("alice", code, selector)
                return result

            # Her bare serial, `any`, `all`, a property: her own device, never the loan, and
            # never a 409 (before: "serial is on several bridges", or mallory's device).
            for selector in (alice.serial, None, "all", "sdk>=1", "1"):
                result = await picks(selector)
                assert result["device"]["bridge"] == "alice-br", (selector, result)
                assert result["verification_status"] == "CONFIRMED", result["summary"]
            response = await alice.http.post(f"/v1/devices/{alice.serial}/shell",
                                             json={"argv": ["echo", "mine"]})
            assert response.status_code == 200 and fake.runs == {}, response.text

            # A real loan from bob: listed in one place, reached by its full id at once.
            await stack.lend("bob", bob.device_id, "alice")
            offered = (await alice.http.get("/v1/grants", params={"to": "me"})).json()
            assert {g["device"] for g in offered} == {bob.device_id,
                                                      f"mallory-fake~{alice.serial}"}
            result = await picks(bob.device_id)
            assert result["device"]["id"] == bob.device_id
            assert result["verification_status"] == "CONFIRMED", result["summary"]
            assert {r["device"]["bridge"] for r in
                    (await picks("all")).get("results", [])} <= {"alice-br"}

            # Her bridge goes away: her selectors still mean her own device (the run waits
            # or ends PENDING), never mallory's device that happens to match.
            await stack.stop_bridge("alice")
            for selector in (alice.serial, None, "sdk>=1"):
                result = await picks(selector)
                assert result["verification_status"] == "PENDING", result
                device = result["device"]
                assert device is None or device["bridge"] == "alice-br", (selector, result)
                assert "mallory" not in json.dumps(result), result
            assert fake.runs == {}, "a run reached mallory's fake device"
        finally:
            await fake.close()
