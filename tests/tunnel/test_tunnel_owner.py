"""Through a tunnel to a simulated phone behind a bridge, the owner's adb works as on USB
(issue 24, docs/tunnel.md): shell, push/pull byte-identical, install, logcat, forward."""

from __future__ import annotations

import pytest

from tests.tunnel.conftest import Stack

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package"),
              pytest.mark.timeout(300)]


async def test_owner_shell_getprop(stack: Stack) -> None:
    async with stack.tunnel("olivia") as t:
        r = await t.adb("shell", "getprop", "ro.product.model")
        assert r.returncode == 0, r.stderr
        direct = await stack.adb("-P", str(stack.laptop.port), "version")  # the laptop's adb runs
        assert direct.returncode == 0
        assert r.stdout.strip()
