"""Hostile tenants on a lent phone (docs/security.md, "Bounds and secrets"): a real controller,
the owner's real bridge (``--profile full``: her own phone) before a simulated device behind
the real adb server, and a borrower who was lent it.

* ``full`` is the owner's own: the borrower gets ``standard``; and even the owner cannot take
  the phone away from herself through the controller (reboot by a wrapper, lock screen …).
* The package a run installed is what the device says, never the APK's manifest: a crafted
  manifest naming the owner's banking app does not get it cleared or uninstalled, and the
  borrower's app does not stay behind. A borrower's install gets no ``-g``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import zipfile
from pathlib import Path

import httpx
import pytest

from device_bridge.sim.apk import SimPackage, SimTest, build_apk
from tests.adb_support import AdbServer, ConnectedSim
from tests.faults.figures import record
from tests.security.support import WAIT_S, Stack, stack

AREA = "hostile tenants"

BANK = "com.alice.banking"


def shell_log(sim: ConnectedSim) -> list[str]:
    """Every command the device ran (its SimShell log), oldest first."""
    text: str = sim.call(lambda: sim.device.logbuf.text())
    return [line.split("SimShell: ", 1)[-1].strip() for line in text.splitlines()
            if " SimShell" in line]


def packages(sim: ConnectedSim) -> set[str]:
    return set(sim.call(lambda: list(sim.device.packages)))


def binary_manifest(package: str) -> bytes:
    """A compiled (binary XML) AndroidManifest.xml whose root names ``package``."""
    strings = ["manifest", "package", package]
    data = b"".join(bytes([len(s), len(s)]) + s.encode() + b"\0" for s in strings)
    offsets, at = [], 0
    for s in strings:
        offsets.append(at)
        at += len(s) + 3
    data += b"\0" * (-len(data) % 4)
    header = 28
    pool = struct.pack("<HHIIIIII", 0x0001, header, header + 4 * len(strings) + len(data),
                       len(strings), 0, 1 << 8, header + 4 * len(strings), 0)
    pool += struct.pack(f"<{len(strings)}I", *offsets) + data
    attr = struct.pack("<IIIHBBI", 0xFFFFFFFF, 1, 2, 8, 0, 3, 2)
    ext = struct.pack("<IIHHHHHH", 0xFFFFFFFF, 0, 20, 20, 1, 0, 0, 0)
    node = struct.pack("<HHIII", 0x0102, 16, 16 + len(ext) + len(attr), 1, 0xFFFFFFFF)
    body = pool + node + ext + attr
    return struct.pack("<HHI", 0x0003, 8, 8 + len(body)) + body


def crafted_app(claims: str, installs: str) -> bytes:
    """An APK whose manifest claims ``claims`` while the device installs ``installs``."""
    buf = io.BytesIO(build_apk(SimPackage(package=installs, kind="app")))
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("AndroidManifest.xml", binary_manifest(claims))
    return buf.getvalue()


def instrumentation_apk(app: str) -> bytes:
    return build_apk(SimPackage(
        package=f"{app}.test", kind="test", target_package=app,
        tests=[SimTest(class_name=f"{app}.ExampleTest", method="works")],
    ))


async def lent_phone(world: Stack, adb: AdbServer, sim: ConnectedSim) -> tuple[
    httpx.AsyncClient, httpx.AsyncClient
]:
    """Alice's phone on her own bridge (profile full), lent to Mallory."""
    alice = world.client(await world.token("user", "alice"))
    mallory = world.client(await world.token("user", "mallory"))
    bridge_token = await world.token("bridge", "alice-br", as_token=alice.headers[
        "Authorization"].split(" ", 1)[1])
    await world.bridge(bridge_token, adb, profile="full")
    await world.listed(alice, sim.address)
    # The inventory reaches the store just behind the hub's listing: lend once it is there.
    async with asyncio.timeout(WAIT_S):
        while (lent := await alice.post(  # noqa: ASYNC110 - polling over HTTP
                "/v1/grants", json={"device": sim.address, "user": "mallory"})).status_code == 404:
            await asyncio.sleep(0.05)
    assert lent.status_code == 201, lent.text
    await world.listed(mallory, sim.address)
    return alice, mallory


async def shell(client: httpx.AsyncClient, serial: str, command: str) -> httpx.Response:
    return await client.post(f"/v1/devices/{serial}/shell", json={"command": command})


@pytest.mark.timeout(300)
async def test_full_is_the_owners_and_never_takes_the_phone_away(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    async with stack(tmp_path) as world:
        alice, mallory = await lent_phone(world, adb_server, sim_device)
        try:
            # The borrower gets standard on a full device: no reading outside the folder.
            refused = await shell(mallory, serial, "ls /data/system")
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["rule"] == "path_outside_workspace"
            # The owner gets full.
            mine = await shell(alice, serial, "ls /data/local/tmp")
            assert mine.status_code == 200, mine.text
            # Nobody takes the phone away through a wrapper or another route.
            takeaways = [("toybox reboot", "reboot"),
                         ("linker64 /system/bin/reboot", "command_wrapper"),
                         ("logwrapper reboot", "command_wrapper"),
                         ("app_process64 / com.evil.Main", "command_wrapper"),
                         ("chrt -f 10 reboot", "command_wrapper"),
                         ("service call power 16 i32 0", "reboot"),
                         ("am broadcast -a android.intent.action.ACTION_SHUTDOWN", "reboot"),
                         ("locksettings set-pin 1234", "lock_screen"),
                         ("settings put global adb_enabled 0", "adb_off"),
                         ("setprop ctl.stop adbd", "setprop"),
                         ("kill -9 1", "signal_init")]
            passed = []
            for command, rule in takeaways:
                for who in (alice, mallory):
                    response = await shell(who, serial, command)
                    if response.status_code != 403 or (
                            response.json()["error"]["rule"] != rule):
                        passed.append((command, response.status_code, response.text[:200]))
            record(AREA, "full profile take-aways through the controller: attempts",
                   2 * len(takeaways) + 1)
            record(AREA, "full profile take-aways through the controller: passed",
                   len(passed) + (refused.status_code != 403), must_be_zero=True)
            assert not passed, passed
        finally:
            await alice.aclose()
            await mallory.aclose()
        ran = shell_log(sim_device)
        assert not [line for line in ran if "reboot" in line or "locksettings" in line
                    or "adb_enabled" in line or line.startswith(("kill", "service", "am "))
                    or "adbd" in line or "com.evil" in line], ran
        assert not [line for line in ran if line.startswith("ls /data/system")], ran


@pytest.mark.timeout(300)
async def test_a_crafted_manifest_cannot_remove_the_owners_app(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    owner_app = build_apk(SimPackage(package=BANK, kind="app", signer="alice"))
    assert sim_device.call(lambda: sim_device.device.install(owner_app, source="bank.apk")) \
        == "Success"
    async with stack(tmp_path) as world:
        alice, mallory = await lent_phone(world, adb_server, sim_device)
        try:
            apks = {"app": base64.b64encode(crafted_app(BANK, "com.evil.app")).decode(),
                    "test": base64.b64encode(instrumentation_apk("com.evil.app")).decode()}
            run = await mallory.post("/v1/sandbox/execute", json={
                "test_code": "class ExampleTest", "device": serial, "apks": apks})
            assert run.status_code == 200, run.text
            # (each run clears the log buffer first: read the device's shell log run by run)
            borrowers = shell_log(sim_device)
            assert not {"com.evil.app", "com.evil.app.test"} & packages(sim_device)
            # Alice runs too: her own installs may grant permissions.
            own = await alice.post("/v1/sandbox/execute", json={
                "test_code": "class ExampleTest", "device": serial, "apks": apks})
            assert own.status_code == 200, own.text
            owners = shell_log(sim_device)
        finally:
            await alice.aclose()
            await mallory.aclose()
    leaks = sum([
        BANK not in packages(sim_device),
        any(BANK in line for line in borrowers + owners),
        bool({"com.evil.app", "com.evil.app.test"} & packages(sim_device)),
        any("-g" in line.split() for line in borrowers if line.startswith("pm install")),
    ])
    record(AREA, "crafted manifest on a lent phone: attempts", 1)
    record(AREA, "crafted manifest on a lent phone: leaks", leaks, must_be_zero=True)
    # The owner's app is untouched: still installed, its data never cleared.
    assert BANK in packages(sim_device)
    assert not [line for line in borrowers + owners if BANK in line], borrowers
    # What the borrower installed was cleared and is gone again.
    assert "pm clear com.evil.app" in borrowers, borrowers
    assert not {"com.evil.app", "com.evil.app.test"} & packages(sim_device)
    # A borrower's install grants no runtime permission; the owner's may.
    for ran, granted in ((borrowers, False), (owners, True)):
        installs = [line.split() for line in ran if line.startswith("pm install")]
        assert len(installs) == 2, ran
        assert all(("-g" in argv) is granted for argv in installs), installs
