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
