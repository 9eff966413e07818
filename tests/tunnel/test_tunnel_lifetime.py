"""A tunnel never outlives the CLI process that opened it (issue 24, docs/tunnel.md): killing
``droidwire device tunnel`` ends the controller's tunnel and every device stream it held."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.adb_support import free_port, wait_for_state
from tests.tunnel.conftest import WAIT_S, Stack
from tests.tunnel.test_tunnel_owner import _echo_on_phone

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]

DROIDWIRE = str(Path(sys.executable).with_name("droidwire"))


async def _until(condition: Callable[[], object]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():  # noqa: ASYNC110  (no event to await for these)
            await asyncio.sleep(0.02)


async def test_killing_the_cli_ends_the_tunnel_and_its_streams(stack: Stack) -> None:
    env = {**os.environ, "DROIDWIRE_CONTROLLER": stack.url,
           "DROIDWIRE_TOKEN": stack.tokens["olivia"]}
    proc = await asyncio.create_subprocess_exec(
        DROIDWIRE, "device", "tunnel", stack.device_id, "--json", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        opened = json.loads(line)
        address = opened["address"]
        assert address.startswith("127.0.0.1:") and opened["serial"] == stack.serial
        connected = await stack.adb("connect", address)
        assert "connected" in connected.stdout
        await asyncio.to_thread(wait_for_state, stack.laptop.client(), address, "device", WAIT_S)
        phone_port = 7101
        stack.sim.call(lambda: _echo_on_phone(stack.sim.device, phone_port))
        local = free_port()
        assert (await stack.adb("-s", address, "forward", f"tcp:{local}",
                                f"tcp:{phone_port}")).returncode == 0
        held = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", local), WAIT_S)
        try:
            await asyncio.to_thread(held.sendall, b"x")
            assert await asyncio.to_thread(held.recv, 1) == b"x"
            assert stack.controller.hub.tunnels.live()
            assert stack.bridge.tunnel.streams  # the forwarded connection's device stream
            proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), WAIT_S)
            await _until(lambda: not stack.controller.hub.tunnels.live())  # the tunnel ends
            await _until(lambda: not stack.bridge.tunnel.streams)  # its device streams close
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), 2.0)
        finally:
            held.close()
            await stack.adb("forward", "--remove-all")
            await stack.adb("disconnect", address)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_cli_tries_each_controller_url_in_turn(stack: Stack) -> None:
    """``DROIDWIRE_CONTROLLER=url1,url2``: a URL nothing answers at is skipped (any replica
    serves a tunnel, docs/tunnel.md); a controller's refusal is not."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "DROIDWIRE_CONTROLLER": f"{dead},{stack.url}",
           "DROIDWIRE_TOKEN": stack.tokens["olivia"]}
    proc = await asyncio.create_subprocess_exec(
        DROIDWIRE, "device", "tunnel", stack.device_id, "--json", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line, (await proc.communicate())[1].decode()
        address = json.loads(line)["address"]
        try:
            assert "connected" in (await stack.adb("connect", address)).stdout
            await asyncio.to_thread(wait_for_state, stack.laptop.client(), address, "device",
                                    WAIT_S)
            echoed = await stack.adb("-s", address, "shell", "echo", "second", "url")
            assert echoed.stdout == "second url\n", echoed.stderr
        finally:
            await stack.adb("disconnect", address)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # A refusal from the first controller that answers stands: sam may not use the device.
    env["DROIDWIRE_TOKEN"] = stack.tokens["sam"]
    refused = await asyncio.create_subprocess_exec(
        DROIDWIRE, "device", "tunnel", stack.device_id, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await asyncio.wait_for(refused.communicate(), WAIT_S)
    assert refused.returncode == 4, err.decode()  # not_found: the device is not his to see
    assert b"cannot reach" not in err
