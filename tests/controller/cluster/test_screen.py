"""A live screen through any replica (docs/screen.md, docs/cluster.md "Live screens").

Two controller replicas (real processes) on a fresh PostgreSQL database and real Redis, the
real bridge on replica A only, a simulated phone behind its adb server. The screen's
WebSocket goes to replica B, which relays the frames of a viewer running on A over Redis:
JPEG pictures arrive, H.264 starts at a key frame; the viewer leaving stops A's viewer; a loan
revoked ends the borrower's view (1008); A dying ends it with ``replica_lost``. The latest
picture asked of B is A's (409 while nobody watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.controller.cluster.procs import WAIT_S, ReplicaProcess
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
from tests.controller.conftest import ADMIN_TOKEN, bearer, pg_url  # noqa: F401 - fixture

pytestmark = [pytest.mark.adb, pytest.mark.timeout(180)]

NONE = {"local": 0, "served": 0, "relayed": 0}


async def viewers(api: httpx.AsyncClient) -> dict[str, int]:
    """``droidwire_screen_viewers`` of one replica, by kind."""
    return await by_kind(api, "droidwire_screen_viewers")


def viewers_are(api: httpx.AsyncClient, expected: dict[str, int]) -> Callable[[], Awaitable[bool]]:
    return kinds_are(api, "droidwire_screen_viewers", expected)


def open_screen(replica: ReplicaProcess, device_id: str, codec: str,
                token: str = ADMIN_TOKEN) -> Any:
    url = (f"{replica.url.replace('http://', 'ws://')}/v1/devices/{device_id}"
           f"/screen/stream?codec={codec}")
    return connect(url, additional_headers=bearer(token), open_timeout=WAIT_S, max_size=None)


@contextlib.asynccontextmanager
async def watching(replica: ReplicaProcess, device_id: str) -> AsyncIterator[ClientConnection]:
    """A jpeg view of the device through ``replica``, past its hello and first picture."""
    async with open_screen(replica, device_id, "jpeg") as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] == "hello"
        await frames(ws, 1)
        yield ws


def _header(message: bytes) -> tuple[dict[str, Any], bytes]:
    size = int.from_bytes(message[:4], "big")
    return json.loads(message[4:4 + size]), message[4 + size:]


async def frames(ws: ClientConnection, count: int) -> list[tuple[dict[str, Any], bytes]]:
    """The next ``count`` frames (bounded: a view that hangs fails here)."""
    got = []
    async with asyncio.timeout(WAIT_S):
        while len(got) < count:
            message = await ws.recv()
            assert isinstance(message, bytes), message
            got.append(_header(message))
    return got


async def eof(ws: ClientConnection) -> dict[str, Any]:
    """Read until the ``eof`` text message (frames before it are skipped)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            message = await ws.recv()
            if isinstance(message, str):
                body = json.loads(message)
                if body.get("type") == "eof":
                    return dict(body)


async def test_a_jpeg_view_on_b_shows_the_phone_on_a_and_stops_there(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    idle = await api_b.get(f"/v1/devices/{device_id}/screen/latest")  # A: nobody watches
    assert idle.status_code == 409, idle.text
    assert idle.json()["error"]["reason"] == "no_live_screen"
    async with open_screen(b, device_id, "jpeg") as ws:
        hello = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert hello == {"type": "hello", "codec": "jpeg", "source": "screencap",
                         "control": True}
        # The view runs on A (it holds the bridge), its frames relayed through B.
        assert await viewers(api_a) == {"local": 1, "served": 1, "relayed": 0}
        assert await viewers(api_b) == {"local": 0, "served": 0, "relayed": 1}
        [(header, picture)] = await frames(ws, 1)
        assert picture.startswith(b"\xff\xd8") and header["codec"] == "jpeg"
        assert 0 < max(header["w"], header["h"]) <= 720
        # B has no feed of its own: the latest picture is A's.
        latest = await api_b.get(f"/v1/devices/{device_id}/screen/latest")
        assert latest.status_code == 200, latest.text
        assert latest.headers["content-type"] == "image/jpeg"
        assert latest.content.startswith(b"\xff\xd8")
        # Input from B reaches the phone on A (a forwarded call).
        await ws.send(json.dumps({"id": 1, "action": "tap", "x": 0.5, "y": 0.5}))
        async with asyncio.timeout(WAIT_S):
            while isinstance(reply := await ws.recv(), bytes):
                pass
        assert json.loads(reply) == {"type": "input", "id": 1, "ok": True}
    # The viewer left B: B tells A, whose viewer leaves (and the feed stops on the bridge).
    await until(viewers_are(api_a, NONE), "A stopped its viewer", cluster)
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)
    assert "relaying the screen" in a.log()


async def test_an_h264_view_on_b_starts_at_a_key_frame(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with open_screen(b, device_id, "h264") as ws:
        hello = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert hello["type"] == "hello" and hello["codec"] == "h264", hello
        got = await frames(ws, 8)
        # A decodes its feed's pictures since the last key frame.
        latest = await api_b.get(f"/v1/devices/{device_id}/screen/latest")
        assert latest.status_code == 200, latest.text
        assert latest.headers["content-type"] == "image/jpeg"
    assert all(header["codec"] == "h264" for header, _ in got)
    first, data = got[0]
    assert first["key"] is True
    assert b"\x00\x00\x01\x67" in data or b"\x00\x00\x00\x01\x67" in data  # SPS first
    numbers = [header["n"] for header, _ in got]
    assert numbers == sorted(numbers)
    await until(viewers_are(api_a, NONE), "A stopped its viewer", cluster)
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)


async def test_a_loan_revoked_on_a_ends_the_borrowers_view_on_b(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
    assert made.status_code == 201, made.text
    bob = made.json()
    lent = await api_a.post("/v1/grants", json={"device": device_id, "user": "bob"})
    assert lent.status_code == 201, lent.text
    async with open_screen(b, device_id, "jpeg", bob["token"]) as ws:
        hello = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert hello["control"] is True  # a borrower holds the device
        await frames(ws, 1)
        assert await viewers(api_a) == {"local": 1, "served": 1, "relayed": 0}
        revoked = await api_a.delete(f"/v1/grants/{lent.json()['id']}")
        assert revoked.status_code == 204, revoked.text
        last = await eof(ws)
        assert last["reason"].startswith("forbidden"), last
        await asyncio.wait_for(ws.wait_closed(), WAIT_S)
        assert ws.close_code == 1008
    await until(viewers_are(api_a, NONE), "A stopped the borrower's viewer", cluster)
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)


async def test_the_holder_dying_ends_the_view_with_replica_lost(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, _api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with watching(b, device_id) as ws:
        await a.kill9()
        last = await eof(ws)
    assert last == {"type": "eof", "reason": "replica_lost"}
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)


async def test_the_holder_stopping_ends_the_view_with_replica_shutdown(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    a, _api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with watching(b, device_id) as ws:
        await a.stop()  # SIGTERM: A leaves the cluster in order, and says why
        last = await eof(ws)
    # The web server closes the bridge's WebSocket as it stops: the feed may end with it first.
    assert last["reason"] in ("replica_shutdown", "bridge_disconnected"), last
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)


async def test_the_bridge_moving_ends_the_view_with_bridge_moved(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, api_b, device_id = await two_replicas_bridge_on_a(cluster)
    token = cluster.bridges[0].env["DROIDWIRE_BRIDGE_TOKEN"]
    async with watching(b, device_id) as ws:
        # A newer session of the same bridge, on B: A's is closed (4409), A serves no more.
        await cluster.bridge([b.url], token)
        last = await eof(ws)
    # A's feed ends with its bridge's session; whichever B sees first, it says so.
    assert last["reason"] in ("bridge_moved", "bridge_disconnected"), last
    await until(viewers_are(api_a, NONE), "A stopped its viewer", cluster)
    await until(viewers_are(api_b, NONE), "B forgot the viewer", cluster)


async def test_the_viewers_replica_dying_stops_the_viewer_on_the_holder(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, _api_b, device_id = await two_replicas_bridge_on_a(cluster)
    async with watching(b, device_id):
        assert await viewers(api_a) == {"local": 1, "served": 1, "relayed": 0}
        await b.kill9()
    # Tap the phone so its screen changes: A's next PUBLISH to B's channel reaches nobody (or,
    # with nothing to send, B's liveness key expires).
    await asyncio.to_thread(cluster.sim.adb.shell, "input tap 10 10")
    await until(viewers_are(api_a, NONE), "A stopped serving the dead replica", cluster)
