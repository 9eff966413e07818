"""A third-party device-protocol client (adb-shell) talks to the tunnel's local listener as to
a phone (issue 24, docs/tunnel.md): shell, push and pull, and a refusal it can read."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from droidwire.tunnel import TunnelClient
from tests.tunnel.conftest import Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]

DIR = "/data/local/tmp/droidwire"
CLIENT_TIMEOUT_S = 20.0


@contextlib.contextmanager
def _adb_shell(port: int) -> Iterator[Any]:
    from adb_shell.adb_device import AdbDeviceTcp

    dev = AdbDeviceTcp("127.0.0.1", port, default_transport_timeout_s=CLIENT_TIMEOUT_S)
    try:
        dev.connect(rsa_keys=None, auth_timeout_s=CLIENT_TIMEOUT_S,
                    read_timeout_s=CLIENT_TIMEOUT_S)
        yield dev
    finally:
        dev.close()


def _session(port: int, payload: bytes, tmp: Path) -> dict[str, Any]:
    with _adb_shell(port) as dev:
        out: dict[str, Any] = {"available": dev.available}
        out["echo"] = dev.shell("echo third party", read_timeout_s=CLIENT_TIMEOUT_S)
        out["reboot"] = dev.shell("reboot", read_timeout_s=CLIENT_TIMEOUT_S)
        (tmp / "up.bin").write_bytes(payload)
        dev.push(str(tmp / "up.bin"), f"{DIR}/third.bin", read_timeout_s=CLIENT_TIMEOUT_S)
        dev.pull(f"{DIR}/third.bin", str(tmp / "down.bin"), read_timeout_s=CLIENT_TIMEOUT_S)
        out["pulled"] = (tmp / "down.bin").read_bytes()
        return out


async def test_adb_shell_uses_the_tunnel_as_a_phone(stack: Stack, tmp_path: Path) -> None:
    payload = os.urandom(300_000)
    async with TunnelClient(stack.url, stack.tokens["bob"], stack.device_id) as t:
        result = await asyncio.to_thread(_session, t.port, payload, tmp_path)
    assert result["available"]
    assert result["echo"] == "third party\n"
    assert "droidwire: reboot is not allowed on shared devices" in result["reboot"]
    assert result["pulled"] == payload
