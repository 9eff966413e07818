"""Per-tenant stream quotas, the owner first (docs/security.md, "Bounds and secrets"): a
borrower opening live logcat streams until refused cannot use up the stream slots of the
owner's bridge; each user has a cap of their own. Real controller, the owner's real bridge,
a simulated device behind the real adb server, real WebSockets."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.adb_support import AdbServer, ConnectedSim
from tests.controller.conftest import bearer
from tests.security.support import WAIT_S, stack

PER_USER = 6
BORROWERS = 3


async def open_streams(stack_: contextlib.AsyncExitStack, url: str, token: str,
                       count: int) -> list[str]:
    """Try ``count`` live streams; the outcome of each ("open" or "STATUS rule")."""
    outcomes = []
    for _ in range(count):
        try:
            await stack_.enter_async_context(connect(
                url, additional_headers=bearer(token), open_timeout=WAIT_S))
            outcomes.append("open")
        except InvalidStatus as exc:
            import json

            body = json.loads(exc.response.body or b"{}")
            outcomes.append(f"{exc.response.status_code} {body['error'].get('rule')}")
    return outcomes


@pytest.mark.timeout(300)
async def test_borrowers_cannot_use_up_the_owners_streams(
    tmp_path: Path, adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    config = {"streams_per_user": PER_USER, "borrower_streams_per_bridge": BORROWERS}
    async with stack(tmp_path, config) as world:
        alice_token = await world.token("user", "alice")
        tokens = {name: await world.token("user", name) for name in ("mallory", "eve")}
        bridge_token = await world.token("bridge", "alice-br", as_token=alice_token)
        await world.bridge(bridge_token, adb_server)
        alice = world.client(alice_token)
        try:
            await world.listed(alice, serial)
            for name in tokens:
                async with asyncio.timeout(WAIT_S):
                    while (lent := await alice.post(  # noqa: ASYNC110 - polling over HTTP
                            "/v1/grants", json={"device": serial, "user": name})
                           ).status_code == 404:
                        await asyncio.sleep(0.05)
                assert lent.status_code == 201, lent.text
        finally:
            await alice.aclose()
        url = world.controller.ws_url + f"/v1/devices/{serial}/logcat/stream"
        async with contextlib.AsyncExitStack() as streams:
            mallory = await open_streams(streams, url, tokens["mallory"], 2 * PER_USER)
            eve = await open_streams(streams, url, tokens["eve"], 1)
            owner = await open_streams(streams, url, alice_token, PER_USER + 1)
        assert mallory == ["open"] * BORROWERS + ["429 borrower_stream_quota"] * (
            2 * PER_USER - BORROWERS), mallory
        assert eve == ["429 borrower_stream_quota"], eve
        assert owner == ["open"] * PER_USER + ["429 stream_quota"], owner
        # Closed streams give their slots back (once the controller saw them close: the
        # client cannot tell when, so it asks again until then, within a bound).
        async with contextlib.AsyncExitStack() as streams, asyncio.timeout(WAIT_S):
            while await open_streams(  # noqa: ASYNC110 - polling the controller
                    streams, url, tokens["eve"], 1) != ["open"]:
                await asyncio.sleep(0.05)
