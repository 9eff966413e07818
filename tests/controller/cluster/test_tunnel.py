"""Remote adb through any replica (docs/tunnel.md, "Cluster mode"; docs/cluster.md).

Two controller replicas (real processes) on a fresh PostgreSQL database and real Redis, the
real bridge on replica A only, a simulated phone behind the bridge's adb server, and a second
adb server standing for the user's laptop. The tunnel's WebSocket goes to replica B, which
relays its frames to A over Redis: the real adb binary's shell, push and pull (more than the
tunnel's window, so every flow-control path is crossed) work byte-identical; the client leaving
ends the tunnel on A; A dying ends the client's tunnel with ``replica_lost``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from droidwire.tunnel import TunnelClient
from tests.adb_support import AdbServer, start_adb_server, wait_for_state
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    redis_ns,
    until,
)
from tests.controller.cluster.test_streams import (
    by_kind,
    kinds_are,
    two_replicas_bridge_on_a,
)
from tests.controller.conftest import ADMIN_TOKEN, pg_url  # noqa: F401 - fixture

pytestmark = [pytest.mark.adb, pytest.mark.timeout(240)]

DIR = "/data/local/tmp/droidwire"
NONE = {"local": 0, "served": 0, "relayed": 0}


@pytest.fixture(scope="module")
def laptop() -> Iterator[AdbServer]:
    server = start_adb_server()
    try:
        yield server
    finally:
        server.kill()


async def tunnels(api: httpx.AsyncClient) -> dict[str, int]:
    """``droidwire_tunnels`` of one replica, by kind."""
    return await by_kind(api, "droidwire_tunnels")


def tunnels_are(api: httpx.AsyncClient, expected: dict[str, int]) -> Callable[[], Awaitable[bool]]:
    return kinds_are(api, "droidwire_tunnels", expected)


async def adb(laptop: AdbServer, *args: str) -> tuple[int, str]:
    done = await asyncio.to_thread(laptop.cli, *args, timeout=120.0)
    return done.returncode, done.stdout + done.stderr


@asynccontextmanager
async def connected(laptop: AdbServer, url: str, device_id: str) -> AsyncIterator[
        tuple[TunnelClient, str]]:
    client = TunnelClient(url, ADMIN_TOKEN, device_id)
    await client.start()
    address = f"127.0.0.1:{client.port}"
    try:
        code, out = await adb(laptop, "connect", address)
        assert code == 0 and "connected" in out, out
        await asyncio.to_thread(wait_for_state, laptop.client(), address, "device", WAIT_S)
        yield client, address
    finally:
        await client.aclose()
        await adb(laptop, "disconnect", address)


async def test_a_tunnel_through_b_reaches_the_phone_on_a(
    cluster: Cluster, laptop: AdbServer, tmp_path: Path,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    payload = os.urandom(5 * 1024 * 1024 + 4321)  # > 2 windows: back-pressure both ways
    src, back = tmp_path / "payload.bin", tmp_path / "back.bin"
    src.write_bytes(payload)
    async with connected(laptop, b.url, device_id) as (_client, address):
        # The tunnel runs on A (it holds the bridge), its frames relayed through B.
        assert await tunnels(api_a) == {"local": 1, "served": 1, "relayed": 0}
        assert await tunnels(api_b) == {"local": 0, "served": 0, "relayed": 1}
        code, out = await adb(laptop, "-s", address, "shell", "echo", "via", "b")
        assert (code, out) == (0, "via b\n"), _client.reason
        code, out = await adb(laptop, "-s", address, "push", str(src), f"{DIR}/relayed.bin")
        assert code == 0, out
        code, out = await adb(laptop, "-s", address, "pull", f"{DIR}/relayed.bin", str(back))
        assert code == 0, out
        # Several streams at once, each answered on its own.
        results = await asyncio.gather(*(
            adb(laptop, "-s", address, "shell", "echo", f"n{i}") for i in range(6)))
        assert results == [(0, f"n{i}\n") for i in range(6)]
    assert back.read_bytes() == payload
    # The client left B: B tells A, which ends the tunnel (and its streams on the bridge).
    await until(tunnels_are(api_a, NONE), "A ended the tunnel", cluster)
    await until(tunnels_are(api_b, NONE), "B forgot the tunnel", cluster)


async def test_the_holder_dying_ends_the_tunnel_with_replica_lost(
    cluster: Cluster, laptop: AdbServer,  # noqa: F811 - fixture
) -> None:
    a, _api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with connected(laptop, b.url, device_id) as (client, address):
        code, out = await adb(laptop, "-s", address, "shell", "echo", "up")
        assert (code, out) == (0, "up\n")
        await a.kill9()
        reason = await asyncio.wait_for(client.wait(), WAIT_S)
        assert "replica_lost" in reason
    await until(tunnels_are(api_b, NONE), "B forgot the tunnel", cluster)


async def test_a_borrowers_tunnel_through_b_ends_with_the_loan_revoked_on_a(
    cluster: Cluster, laptop: AdbServer, tmp_path: Path,  # noqa: F811 - fixture
) -> None:
    """The loan revoked on A: the borrower's tunnel on B ends (``forbidden``), and the app they
    installed through it — noted on A, where the tunnel ran — is uninstalled."""
    from device_bridge.sim.apk import SimPackage, build_apk

    _a, api_a, b, _api_b, device_id = await two_replicas_bridge_on_a(cluster)
    made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
    assert made.status_code == 201, made.text
    bob = made.json()
    lent = await api_a.post("/v1/grants", json={"device": device_id, "user": "bob"})
    assert lent.status_code == 201, lent.text
    package = "com.example.relayedloan"
    apk = tmp_path / "loan.apk"
    apk.write_bytes(build_apk(SimPackage(package=package, kind="app")))
    client = TunnelClient(b.url, bob["token"], device_id)
    await client.start()
    address = f"127.0.0.1:{client.port}"
    try:
        code, out = await adb(laptop, "connect", address)
        assert code == 0 and "connected" in out, out
        await asyncio.to_thread(wait_for_state, laptop.client(), address, "device", WAIT_S)
        code, out = await adb(laptop, "-s", address, "install", str(apk))
        assert code == 0 and "Success" in out, out
        code, out = await adb(laptop, "-s", address, "shell", "reboot")
        assert code != 0 and "not allowed" in out, out  # the policy holds through B too
        async with httpx.AsyncClient(base_url=b.url, timeout=WAIT_S,
                                     headers={"Authorization": f"Bearer {bob['token']}"}) as api:

            async def noted() -> bool:
                apps = (await api.get(f"/v1/devices/{device_id}/apps")).json()["apps"]
                return any(a["package"] == package and a["yours"] for a in apps)

            await until(noted, "the tunnel's install noted as bob's", cluster)
        revoked = await api_a.delete(f"/v1/grants/{lent.json()['id']}")
        assert revoked.status_code == 204, revoked.text
        reason = await asyncio.wait_for(client.wait(), WAIT_S)
        assert reason.startswith("forbidden"), reason
    finally:
        await client.aclose()
        await adb(laptop, "disconnect", address)

    async def uninstalled() -> bool:
        listed = await asyncio.to_thread(cluster.sim.adb.shell, "pm list packages")
        return f"package:{package}" not in listed.split()

    await until(uninstalled, "the borrower's app uninstalled at the loan's end", cluster)
