"""A borrower's tunnel on the ``standard`` profile (issue 24, docs/tunnel.md): what adb may do,
what it is refused (and prints), and the loan's end taking the device away from adb."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from pathlib import Path

import httpx
import pytest

from controller.hub.tunnel import SYNC_REFUSALS_RECORDED
from controller.services import services_of
from tests.controller.web.support import sign_in
from tests.tunnel.conftest import WAIT_S, Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]

DIR = "/data/local/tmp/droidwire"


async def test_borrower_reboot_root_and_interactive_shell_are_refused(stack: Stack) -> None:
    boots = stack.sim.call(lambda: stack.sim.device.boots)
    async with stack.tunnel("bob") as t:
        shell_reboot = await t.adb("shell", "reboot")
        assert shell_reboot.returncode != 0
        assert "droidwire: reboot is not allowed on shared devices" in shell_reboot.stderr
        root = await t.adb("root")
        assert "droidwire: root: refused on a shared device (profile standard)" in (
            root.stdout + root.stderr)
        reboot = await t.adb("reboot")
        assert "droidwire: reboot: refused on a shared device" in reboot.stdout + reboot.stderr
        interactive = await t.adb("shell")  # stdin is not a terminal: adb still asks for a shell
        assert interactive.returncode != 0
        assert "interactive shell is not available on profile standard" in interactive.stderr
        metachar = await t.adb("shell", "echo hi; reboot")
        assert "metacharacter" in metachar.stderr and "hi" not in metachar.stdout
        # What the profile allows still works on the same tunnel.
        ok = await t.adb("shell", "getprop", "ro.build.version.sdk")
        assert ok.returncode == 0 and ok.stdout.strip().isdigit(), ok.stderr
    assert stack.sim.call(lambda: stack.sim.device.boots) == boots  # it never reached the phone
    entries = await services_of(stack.controller.app).audit.recent(limit=500)
    refused = [e for e in entries if e.action == "device.tunnel.open" and e.outcome == "forbidden"]
    rules = {str((e.detail or {}).get("rule")) for e in refused}
    assert {"reboot", "adbd_control", "interactive_shell", "metacharacter"} <= rules
    assert any(e.action == "device.tunnel" and e.actor == "bob" for e in entries)


async def test_borrower_files_are_confined_to_the_droidwire_folder(
        stack: Stack, tmp_path: Path) -> None:
    payload = os.urandom(200_000)
    src = tmp_path / "mine.bin"
    src.write_bytes(payload)
    async with stack.tunnel("bob") as t:
        outside = await t.adb("push", str(src), "/sdcard/mine.bin")
        assert outside.returncode != 0
        assert "outside /data/local/tmp/droidwire/" in outside.stdout + outside.stderr
        stolen = await t.adb("pull", "/system/build.prop", str(tmp_path / "build.prop"))
        assert stolen.returncode != 0
        assert not (tmp_path / "build.prop").exists()
        inside = await t.adb("push", str(src), f"{DIR}/mine.bin")
        assert inside.returncode == 0, inside.stdout + inside.stderr
        back = tmp_path / "back.bin"
        pulled = await t.adb("pull", f"{DIR}/mine.bin", str(back))
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert back.read_bytes() == payload
    exists = await asyncio.to_thread(stack.sim.adb.shell, "ls /sdcard/mine.bin")
    assert "No such file" in exists


async def test_refused_sync_requests_reach_the_audit_log_and_the_steps(
        stack: Stack, tmp_path: Path) -> None:
    src = tmp_path / "x"
    src.write_bytes(b"not for the log " * 100)
    async with stack.tunnel("bob") as t:
        pushed = await t.adb("push", str(src), "/sdcard/x")
        assert pushed.returncode != 0
        pulled = await t.adb("pull", "/system/build.prop", str(tmp_path / "build.prop"))
        assert pulled.returncode != 0
        [live] = [x for x in stack.controller.hub.tunnels.live() if x.principal.user_name == "bob"]
        steps = [s for s in live.steps if s.get("service") == "sync"
                 and s.get("outcome") == "forbidden"]
        assert {s.get("rule") for s in steps} == {"path_outside_workspace"}, live.steps
        assert any(s.get("request") == "SEND" and s.get("path") == "/sdcard/x" for s in steps)
        assert any(s.get("path") == "/system/build.prop" for s in steps), steps
        tunnel_id = live.id
        async with httpx.AsyncClient(base_url=stack.url, timeout=WAIT_S) as browser:
            signed = await sign_in(browser, stack.tokens["olivia"])
            assert signed.status_code in (200, 303), signed.text
            page = (await browser.get(f"/devices/{stack.device_id}")).text
        # The owner's page: the last refusal, the request and its path with the rule.
        assert "/system/build.prop (path_outside_workspace)" in page
    deadline = time.monotonic() + WAIT_S
    while True:
        entries = await services_of(stack.controller.app).audit.recent(limit=500)
        sync = [e for e in entries if e.action == "device.tunnel.sync"
                and (e.detail or {}).get("tunnel") == tunnel_id]
        paths = {str((e.detail or {}).get("path")) for e in sync}
        if {"/sdcard/x", "/system/build.prop"} <= paths or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert {"/sdcard/x", "/system/build.prop"} <= paths, [e.detail for e in sync]
    assert all(e.actor == "bob" and e.outcome == "forbidden" for e in sync)
    assert {str((e.detail or {}).get("rule")) for e in sync} == {"path_outside_workspace"}
    assert any((e.detail or {}).get("request") == "SEND" for e in sync)
    assert not any("not for the log" in str(e.detail) for e in sync)


def _stat_flood(port: int, address: str, paths: list[str]) -> list[bytes]:
    """One ``sync:`` stream through the laptop's adb server: a ``STAT`` per path, each answer
    read (adb's own wire format), then ``QUIT``."""

    def request(sock: socket.socket, service: str) -> None:
        sock.sendall(f"{len(service):04x}{service}".encode())
        status = _read(sock, 4)
        assert status == b"OKAY", status + sock.recv(1024)

    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        request(sock, f"host:transport:{address}")
        request(sock, "sync:")
        answers = []
        for path in paths:
            body = path.encode()
            sock.sendall(b"STAT" + struct.pack("<I", len(body)) + body)
            answers.append(_read(sock, 16))
        sock.sendall(b"QUIT" + bytes(4))
        return answers


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = sock.recv(n - len(out))
        assert part, f"connection closed after {out!r}"
        out += part
    return out


async def test_a_flood_of_refused_sync_requests_is_recorded_bounded(stack: Stack) -> None:
    flood = 5 * SYNC_REFUSALS_RECORDED
    async with stack.tunnel("bob") as t:
        answers = await asyncio.to_thread(_stat_flood, stack.laptop.port, t.address,
                                          [f"/sdcard/f{i}" for i in range(flood)])
        assert answers == [b"STAT" + bytes(12)] * flood  # "nothing there", each one
        [live] = [x for x in stack.controller.hub.tunnels.live() if x.principal.user_name == "bob"]
        tunnel_id = live.id
    deadline = time.monotonic() + WAIT_S
    while True:
        entries = await services_of(stack.controller.app).audit.recent(limit=1000)
        sync = [e.detail or {} for e in entries if e.action == "device.tunnel.sync"
                and (e.detail or {}).get("tunnel") == tunnel_id]
        done = sum("path" in d for d in sync) >= SYNC_REFUSALS_RECORDED and any(
            "more" in d for d in sync)
        if done or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    one_by_one = [d for d in sync if "path" in d]
    counted = [d for d in sync if "more" in d]
    assert len(one_by_one) == SYNC_REFUSALS_RECORDED, sync
    assert {d["request"] for d in one_by_one} == {"STAT"}
    assert counted == [{"service": "sync", "tunnel": tunnel_id, "rule": "path_outside_workspace",
                        "more": flood - SYNC_REFUSALS_RECORDED}]


async def test_revoking_the_loan_takes_the_device_offline(stack: Stack) -> None:
    async with stack.api("olivia") as olivia:
        granted = await olivia.post("/v1/grants", json={"device": stack.device_id, "user": "bob"})
        assert granted.status_code == 201, granted.text
        grant_id = granted.json()["id"]
        async with stack.tunnel("bob") as t:
            assert (await t.adb("shell", "echo", "up")).stdout == "up\n"
            started = time.monotonic()
            revoked = await olivia.delete(f"/v1/grants/{grant_id}")
            assert revoked.status_code in (200, 204), revoked.text
            # The loan that existed before this test still holds: revoke it too.
            await olivia.delete(f"/v1/grants/{stack.grant_id}")
            await asyncio.to_thread(_wait_not_device, stack, t.address)
            seconds = time.monotonic() - started
            reason = await asyncio.wait_for(t.client.wait(), WAIT_S)
            assert reason.startswith("forbidden"), reason
            print(f"\nFIGURE tunnel_revoke_offline_s={seconds:.3f}")
            after = await t.adb("shell", "echo", "still here?")
            assert after.returncode != 0
    # Lend it again for the other tests.
    async with stack.api("olivia") as olivia:
        again = await olivia.post("/v1/grants", json={"device": stack.device_id, "user": "bob"})
        assert again.status_code == 201, again.text
        stack.grant_id = str(again.json()["id"])


def _wait_not_device(stack: Stack, address: str) -> None:
    """Until the laptop's adb lists ``address`` as anything but ``device`` (track-devices)."""
    client = stack.laptop.client()
    deadline = time.monotonic() + WAIT_S
    with client.make_connection(timeout=WAIT_S) as c:
        c.send_command("host:track-devices")
        c.check_okay()
        while time.monotonic() < deadline:
            c.conn.settimeout(max(0.1, deadline - time.monotonic()))
            listing = c.read_string_block()
            states = dict(line.split("\t", 1) for line in listing.splitlines() if "\t" in line)
            if states.get(address) != "device":
                return
    raise TimeoutError(f"{address} still listed as a device")


async def test_what_a_borrower_installs_through_the_tunnel_is_theirs(
        stack: Stack, tmp_path: Path) -> None:
    from device_bridge.sim.apk import SimPackage, build_apk

    package = "com.example.borrowed"
    apk = tmp_path / "borrowed.apk"
    apk.write_bytes(build_apk(SimPackage(package=package, kind="app")))
    installed = stack.bridge.dispatcher.installed
    async with stack.tunnel("bob") as t:
        before = await t.adb("shell", "am", "force-stop", package)
        assert "package_scope" in before.stderr or "is not the app under test" in before.stderr
        done = await t.adb("install", str(apk))
        assert done.returncode == 0 and "Success" in done.stdout, done.stdout + done.stderr
        async with asyncio.timeout(WAIT_S):  # learned from the device once the install ended
            while package not in installed.get(stack.serial, set()):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        after = await t.adb("shell", "am", "force-stop", package)
        assert after.returncode == 0, after.stderr


async def test_a_borrowers_install_never_replaces_an_app_already_there(
        stack: Stack, tmp_path: Path) -> None:
    """pm replaces an installed package by default, so the bridge adds ``-R`` to a
    borrower's streamed install and install session: the lender's app stays as it was,
    whichever way adb installs (``install``, ``install-multiple``); adb prints pm's failure."""
    from device_bridge.sim.apk import SimPackage, build_apk

    package = "com.example.lenders"
    mine = tmp_path / "lenders.apk"
    mine.write_bytes(build_apk(SimPackage(package=package, kind="app", version_code=5)))
    await asyncio.to_thread(stack.sim.adb.install, str(mine), nolaunch=True)
    path = await asyncio.to_thread(stack.sim.adb.shell, f"pm path {package}")
    assert path.startswith("package:/data/app/"), path
    newer = tmp_path / "newer.apk"
    newer.write_bytes(build_apk(SimPackage(package=package, kind="app", version_code=6)))
    async with stack.tunnel("bob") as t:
        for how in (("install", "-r", str(newer)), ("install-multiple", "-r", str(newer))):
            done = await t.adb(*how)
            assert done.returncode != 0, done.stdout + done.stderr
            assert "INSTALL_FAILED_ALREADY_EXISTS" in done.stdout + done.stderr, done
    assert await asyncio.to_thread(stack.sim.adb.shell, f"pm path {package}") == path
    await asyncio.to_thread(stack.sim.adb.uninstall, package)


async def test_what_a_borrower_installed_through_the_tunnel_goes_when_the_loan_ends(
        stack: Stack, tmp_path: Path) -> None:
    """As a REST install's: the loan remembers the app, and its end uninstalls it."""
    from device_bridge.sim.apk import SimPackage, build_apk

    package = "com.example.leftbehind"
    apk = tmp_path / "left.apk"
    apk.write_bytes(build_apk(SimPackage(package=package, kind="app")))
    async with stack.tunnel("bob") as t:
        done = await t.adb("install", str(apk))
        assert done.returncode == 0 and "Success" in done.stdout, done.stdout + done.stderr
    assert f"package:{package}" in await _packages(stack)
    async with stack.api("bob") as bob:
        async with asyncio.timeout(WAIT_S):  # noted once the bridge learned what it installed
            while not any(a["package"] == package and a["yours"]  # noqa: ASYNC110
                          for a in (await bob.get(f"/v1/devices/{stack.device_id}/apps")).json()[
                              "apps"]):
                await asyncio.sleep(0.05)
    async with stack.api("olivia") as olivia:
        revoked = await olivia.delete(f"/v1/grants/{stack.grant_id}")
        assert revoked.status_code in (200, 204), revoked.text
        try:
            async with asyncio.timeout(WAIT_S):  # the revoking route sweeps at once
                while f"package:{package}" in await _packages(stack):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:  # lend it again for the other tests
            again = await olivia.post("/v1/grants",
                                      json={"device": stack.device_id, "user": "bob"})
            assert again.status_code == 201, again.text
            stack.grant_id = str(again.json()["id"])


async def _packages(stack: Stack) -> set[str]:
    listed = await asyncio.to_thread(stack.sim.adb.shell, "pm list packages")
    return set(listed.split())


async def test_the_owners_pause_switch_ends_open_streams(stack: Stack) -> None:
    import socket

    from tests.adb_support import free_port
    from tests.tunnel.test_tunnel_owner import _echo_on_phone

    phone_port = 7102
    stack.sim.call(lambda: _echo_on_phone(stack.sim.device, phone_port))
    local = free_port()
    async with stack.tunnel("bob") as t:
        assert (await t.adb("forward", f"tcp:{local}", f"tcp:{phone_port}")).returncode == 0
        held = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", local), WAIT_S)
        try:
            await asyncio.to_thread(held.sendall, b"a")
            assert await asyncio.to_thread(held.recv, 1) == b"a"
            stack.bridge.policy.pause()
            try:
                await asyncio.to_thread(held.sendall, b"b")
                held.settimeout(WAIT_S)
                assert await asyncio.to_thread(held.recv, 1) == b""  # the stream ended
                refused = await t.adb("shell", "echo", "paused?")
                assert "paused" in refused.stderr and refused.returncode != 0
            finally:
                stack.bridge.policy.resume()
        finally:
            held.close()
            await t.adb("forward", "--remove", f"tcp:{local}")
