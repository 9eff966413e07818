"""A revocation on one replica ends work on every other (docs/security.md, "Threat model").

Two replicas (real processes, PostgreSQL, Redis), the real bridge on replica A. Streams are
opened on replica B (relayed from A); a token revoked on A — an admin's — and a loan revoked
on A each end their stream on B at once: the replica handling the revocation tells the
others over Redis (the ``revoked`` message the bridges' tokens already used), and each
re-checks its own work. The replicas' periodic re-check is set to ten minutes
(tests/cluster/procs.py): only the message can end these streams in time.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from tests.cluster.procs import WAIT_S
from tests.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    redis_ns,
)
from tests.cluster.test_streams import two_replicas_bridge_on_a
from tests.controller.conftest import bearer, pg_url  # noqa: F401 - fixture

pytestmark = [pytest.mark.adb, pytest.mark.timeout(180)]


async def _eof_after(url: str, token: str, revoke: object) -> dict[str, object]:
    async with connect(url, additional_headers=bearer(token), open_timeout=WAIT_S) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert not first.get("eof"), first
        await revoke()  # type: ignore[operator]
        async with asyncio.timeout(WAIT_S):
            while True:
                chunk = json.loads(await ws.recv())
                if chunk.get("eof"):
                    await ws.wait_closed()
                    assert ws.close_code == 1008, ws.close_code
                    return dict(chunk)


async def test_a_revocation_on_one_replica_ends_streams_on_another(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    _a, api_a, b, _api_b, device_id = await two_replicas_bridge_on_a(cluster)
    url = f"{b.url.replace('http://', 'ws://')}/v1/devices/{device_id}/logcat/stream?tail=1"

    # An admin's second token, revoked on A: its stream on B ends (owners and admins too).
    made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "admin"})
    assert made.status_code == 201, made.text
    admin = made.json()

    async def revoke_token() -> None:
        response = await api_a.delete(f"/v1/tokens/{admin['id']}")
        assert response.status_code == 204, response.text

    last = await _eof_after(url, admin["token"], revoke_token)
    assert last["reason"] == "forbidden: the token was revoked", last

    # A loan revoked on A: the borrower's stream on B ends.
    made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
    assert made.status_code == 201, made.text
    bob = made.json()
    lent = await api_a.post("/v1/grants", json={"device": device_id, "user": "bob"})
    assert lent.status_code == 201, lent.text

    async def revoke_grant() -> None:
        response = await api_a.delete(f"/v1/grants/{lent.json()['id']}")
        assert response.status_code == 204, response.text

    last = await _eof_after(url, bob["token"], revoke_grant)
    assert str(last["reason"]).startswith("forbidden: access to this device ended"), last
