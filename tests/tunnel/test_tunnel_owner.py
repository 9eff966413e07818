"""Through a tunnel to a simulated phone behind a bridge, the owner's adb works as on USB
(issue 24, docs/tunnel.md): shell, push/pull byte-identical, install, logcat, forward.

Sizes: push/pull move 20 MiB and an odd tail each way, byte-identical (many windows and WRTEs,
every flow-control path); how fast a 20 MiB push goes is `make bench`'s figure
(bench/bench_tunnel.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import pty
import select
import socket
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from device_bridge.policy import Profile
from device_bridge.sim.apk import SimPackage, build_apk
from tests.adb_support import free_port
from tests.tunnel.conftest import WAIT_S, Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]

DIR = "/data/local/tmp/droidwire"


async def test_owner_shell_getprop_and_exit_codes(stack: Stack) -> None:
    async with stack.tunnel("olivia") as t:
        r = await t.adb("shell", "getprop", "ro.product.model")
        assert r.returncode == 0, r.stderr
        direct = await asyncio.to_thread(stack.sim.adb.shell, "getprop ro.product.model")
        assert r.stdout.strip() == direct.strip()
        assert (await t.adb("shell", "echo", "hello", "tunnel")).stdout == "hello tunnel\n"
        devices = await stack.adb("devices")
        assert f"{t.address}\tdevice" in devices.stdout


async def test_owner_push_pull_byte_identical(stack: Stack, tmp_path: Path) -> None:
    payload = os.urandom(20 * 1024 * 1024 + 12345)
    src = tmp_path / "payload.bin"
    src.write_bytes(payload)
    back = tmp_path / "back.bin"
    async with stack.tunnel("olivia") as t:
        pushed = await t.adb("push", str(src), f"{DIR}/payload.bin")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        pulled = await t.adb("pull", f"{DIR}/payload.bin", str(back))
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert back.read_bytes() == payload


async def test_owner_install_install_multiple_and_logcat(stack: Stack, tmp_path: Path) -> None:
    apk = tmp_path / "app.apk"
    apk.write_bytes(build_apk(SimPackage(package="com.example.tunnelled", kind="app")))
    async with stack.tunnel("olivia") as t:
        installed = await t.adb("install", "-r", str(apk))
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "Success" in installed.stdout
        base = tmp_path / "base.apk"
        base.write_bytes(build_apk(SimPackage(package="com.example.tunnelsplit", kind="app")))
        split = tmp_path / "split_config.xxhdpi.apk"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("resources.arsc", b"\0" * 64)
        split.write_bytes(buf.getvalue())
        multiple = await t.adb("install-multiple", str(base), str(split))
        assert multiple.returncode == 0 and "Success" in multiple.stdout, (
            multiple.stdout + multiple.stderr)
        listed = await asyncio.to_thread(stack.sim.adb.shell, "pm list packages")
        assert {"package:com.example.tunnelled", "package:com.example.tunnelsplit"} <= set(
            listed.split())
        log = await t.adb("logcat", "-d")
        assert log.returncode == 0, log.stderr
        assert "beginning of main" in log.stdout


async def test_owner_forward_reaches_a_port_on_the_phone(stack: Stack) -> None:
    # Something listening on the phone's own loopback: the simulated device's net layer.
    phone_port = 7100
    served = stack.sim.sim.call(lambda: _echo_on_phone(stack.sim.device, phone_port))
    assert served
    local = free_port()
    async with stack.tunnel("olivia") as t:
        r = await t.adb("forward", f"tcp:{local}", f"tcp:{phone_port}")
        assert r.returncode == 0, r.stderr
        try:
            answer = await asyncio.to_thread(_talk, local, b"ping through the tunnel\n")
            assert answer == b"ping through the tunnel\n"
        finally:
            await t.adb("forward", "--remove", f"tcp:{local}")


def _talk(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        out = b""
        while len(out) < len(data):
            chunk = sock.recv(4096)
            if not chunk:
                break
            out += chunk
        return out


def _echo_on_phone(device: Any, port: int) -> bool:
    """An echo server on the phone's own loopback (as an app's server would be)."""

    async def accept(sock: Any) -> None:
        try:
            while data := await sock.read():
                await sock.write(data)
        finally:
            await sock.close()

    device.net.listen(f"tcp:{port}", accept)
    return True


async def test_the_device_page_shows_a_live_tunnel(stack: Stack) -> None:
    import httpx

    from tests.controller.web.support import sign_in

    async with httpx.AsyncClient(base_url=stack.url, timeout=WAIT_S) as browser:
        signed = await sign_in(browser, stack.tokens["olivia"])
        assert signed.status_code in (200, 303), signed.text
        page = f"/devices/{stack.device_id}"
        before = await browser.get(page)
        assert before.status_code == 200 and 'id="tunnels"' not in before.text
        async with stack.tunnel("bob") as t:
            assert (await t.adb("shell", "echo", "seen")).returncode == 0
            assert (await t.adb("root")).returncode == 0  # refused, as its output says
            during = await browser.get(page)
            assert 'id="tunnels"' in during.text and "<td>bob</td>" in during.text
            assert "root (adbd_control)" in during.text
            [live] = stack.controller.hub.tunnels.live()
            # (the adb server may open more services of its own around these two)
            assert any(s["outcome"] == "ok" and s["service"].startswith("shell")
                       for s in live.steps), live.steps
            assert any(s["outcome"] == "forbidden" and s["service"].startswith("root")
                       for s in live.steps), live.steps
        async with asyncio.timeout(WAIT_S):
            while stack.controller.hub.tunnels.live():  # noqa: ASYNC110  (no event for it)
                await asyncio.sleep(0.02)
        after = await browser.get(page)
        assert 'id="tunnels"' not in after.text


async def test_many_streams_at_once_and_junk_on_the_local_port(
        stack: Stack, tmp_path: Path) -> None:
    payload = os.urandom(1_500_000)
    src = tmp_path / "many.bin"
    src.write_bytes(payload)
    async with stack.tunnel("olivia") as t:
        # Junk on the listener: that connection is dropped, the tunnel goes on.
        junk = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", t.client.port),
                                       WAIT_S)
        try:
            await asyncio.to_thread(junk.sendall, b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
            junk.settimeout(WAIT_S)
            assert await asyncio.to_thread(junk.recv, 1) == b""
        finally:
            junk.close()
        shells = [t.adb("shell", "echo", f"stream-{i}") for i in range(6)]
        push = t.adb("push", str(src), f"{DIR}/many.bin")
        results = await asyncio.gather(*shells, push)
        for i, r in enumerate(results[:6]):
            assert r.stdout == f"stream-{i}\n", r.stderr
        assert results[6].returncode == 0, results[6].stderr
        back = tmp_path / "many-back.bin"
        assert (await t.adb("pull", f"{DIR}/many.bin", str(back))).returncode == 0
        assert back.read_bytes() == payload


@contextlib.contextmanager
def _profile_full(stack: Stack) -> Iterator[None]:
    """The device on the owner's ``full`` profile (the bridge's ``[policy.devices]``)."""
    policy = stack.bridge.policy
    saved = policy.config
    policy.config = dataclasses.replace(saved, devices={**saved.devices,
                                                       stack.serial: Profile.FULL})
    try:
        yield
    finally:
        policy.config = saved


def _shell_on_a_pty(stack: Stack, address: str, model: str) -> tuple[int, str]:
    """``adb -s ADDRESS shell`` on a terminal, as a person types into it: wait for the prompt,
    type a command, read its output, type ``exit 3``; adb's exit code and what it showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [stack.laptop.adb, "-P", str(stack.laptop.port), "-s", address, "shell"],
        stdin=slave, stdout=slave, stderr=slave, env=stack.laptop.env, start_new_session=True)
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + WAIT_S

    def read_until(wanted: bytes, start: int = 0) -> None:
        while wanted not in shown[start:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never showed {wanted!r}: {bytes(shown)!r}")
            if select.select([master], [], [], left)[0]:
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: adb exited, the terminal closed
                    data = b""
                if not data:
                    raise AssertionError(f"ended before {wanted!r}: {bytes(shown)!r}")
                shown.extend(data)

    try:
        read_until(b"$ ")
        os.write(master, b"getprop ro.product.model\r")
        typed = len(shown)
        read_until(b"getprop ro.product.model", typed)  # the terminal's echo
        answered = shown.index(b"getprop ro.product.model", typed) + len(b"getprop ro.product.model")
        read_until(model.encode(), answered)  # the phone's answer, after the echo
        read_until(b"$ ", answered)  # the next prompt
        os.write(master, b"exit 3\r")
        code = proc.wait(WAIT_S)
        return code, shown.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


async def test_owner_interactive_shell_on_the_full_profile(stack: Stack) -> None:
    model = (await asyncio.to_thread(stack.sim.adb.shell, "getprop ro.product.model")).strip()
    assert model
    with _profile_full(stack):
        async with stack.tunnel("olivia") as t:
            # On a terminal: adb asks for a PTY shell, a person types into it.
            code, shown = await asyncio.to_thread(_shell_on_a_pty, stack, t.address, model)
            assert code == 3, shown
            # Typed into a pipe: the same shell without a PTY reads its stdin line by line.
            piped = await asyncio.to_thread(
                subprocess.run, [stack.laptop.adb, "-P", str(stack.laptop.port), "-s",
                                 t.address, "shell"],
                input=b"echo piped as $USER\nexit 4\n", capture_output=True,
                env=stack.laptop.env, timeout=WAIT_S)
            assert piped.stdout == b"piped as shell\n", piped
            assert piped.returncode == 4, piped
        # `full` is the owner's alone: her borrower on the same device gets `standard`.
        async with stack.tunnel("bob") as t:
            refused = await asyncio.to_thread(
                subprocess.run, [stack.laptop.adb, "-P", str(stack.laptop.port), "-s",
                                 t.address, "shell"],
                input=b"echo not for you\n", capture_output=True, env=stack.laptop.env,
                timeout=WAIT_S)
            assert b"interactive shell is not available on profile standard" in refused.stderr
            assert refused.returncode != 0 and b"not for you" not in refused.stdout


async def test_many_short_streams_in_a_row_are_all_answered(stack: Stack) -> None:
    """Round after round of parallel `adb shell`s: a stream counts among the OPENs being
    answered until the bridge answered it, not until its audit entry is written, so a busy
    audit log never refuses the next ones (`busy`)."""
    async with stack.tunnel("olivia") as t:
        for round_ in range(12):
            results = await asyncio.gather(*(t.adb("shell", "echo", f"r{round_}n{i}")
                                             for i in range(6)))
            got = [(r.returncode, r.stdout + r.stderr) for r in results]
            assert got == [(0, f"r{round_}n{i}\n") for i in range(6)], got
