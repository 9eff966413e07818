"""A revocation on one replica ends work on every other (docs/security.md, "Threat model"):
streams, and sandbox runs.

Two replicas (real processes, PostgreSQL, Redis), the real bridge on replica A. Streams are
opened on replica B (relayed from A); a token revoked on A — an admin's — and a loan revoked
on A each end their stream on B at once: the replica handling the revocation tells the
others over Redis (the ``revoked`` message the bridges' tokens already used), and each
re-checks its own work. The replicas' periodic re-check is set to ten minutes
(tests/controller/cluster/procs.py): only the message can end these streams in time.
"""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace_template import template_dir
from tests.controller.cluster.procs import WAIT_S
from tests.controller.cluster.test_cluster import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    redis_ns,
)
from tests.controller.cluster.test_streams import two_replicas_bridge_on_a
from tests.controller.conftest import bearer, pg_url  # noqa: F401 - fixture
from tests.controller.executor.support import llm_style_test

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


async def test_a_loan_revoked_on_one_replica_stops_runs_on_another(
    cluster: Cluster,  # noqa: F811 - fixture
) -> None:
    """Bob's runs on replica B (the device's bridge on A) stop when the owner revokes the loan
    on A: the queued ones never start, the running one stops; nothing installs or runs on the
    device after the revocation. Prebuilt APKs: the bridge does not build."""
    _a, api_a, b, _api_b, device_id = await two_replicas_bridge_on_a(cluster)
    made = await api_a.post("/v1/tokens", json={"kind": "user", "name": "bob"})
    assert made.status_code == 201, made.text
    lent = await api_a.post("/v1/grants", json={"device": device_id, "user": "bob"})
    assert lent.status_code == 201, lent.text
    built = SimulatedToolchain().compile(Path(template_dir()), llm_style_test("saveDraftSync()"))
    assert built.ok and built.app_apk and built.test_apk
    apks = {"app": base64.b64encode(built.app_apk).decode(),
            "test": base64.b64encode(built.test_apk).decode()}
    async with httpx.AsyncClient(base_url=b.url, headers=bearer(made.json()["token"]),
                                 timeout=WAIT_S) as bob:
        run_ids = []
        for _ in range(4):
            response = await bob.post("/v1/sandbox/execute", params={"wait": "false"},
                                      json={"test_code": "prebuilt", "apks": apks,
                                            "device": device_id})
            assert response.status_code == 202, response.text
            run_ids.append(response.json()["run_id"])

        async def runs() -> list[dict[str, Any]]:
            return [(await bob.get(f"/v1/runs/{r}")).json() for r in run_ids]

        async def on_device() -> bool:
            return any(s["detail"].get("method") == "device.install"
                       for run in await runs() for s in run["steps"])

        async with asyncio.timeout(WAIT_S):
            while not await on_device():  # noqa: ASYNC110 - bounded poll of other processes
                await asyncio.sleep(0.02)
        response = await api_a.delete(f"/v1/grants/{lent.json()['id']}")
        assert response.status_code == 204, response.text
        revoked_at = datetime.now(UTC)  # committed once answered
        async with asyncio.timeout(WAIT_S):
            while any(r["status"] in ("queued", "running")  # noqa: ASYNC110 - bounded poll
                      for r in await runs()):
                await asyncio.sleep(0.02)
        states = await runs()
    after = [s for run in states for s in run["steps"]
             if s["kind"] == "rpc" and s["status"] != "refused"
             and s["detail"].get("method") in ("device.install", "device.instrument",
                                               "device.logcat.dump")
             # when its re-check began: one begun before the commit may run (the watch
             # stops it); one begun after it must have been refused
             and datetime.fromisoformat(s["detail"].get("reauth_at") or s["at"]) > revoked_at]
    assert after == [], after
    stopped = [r for r in states if r["result"].get("reason_code") == "access_revoked"]
    assert stopped, states
    # A run still queued at the revocation never started: it ended for the revocation. (One
    # whose tests were already on the device may finish with its verdict: B learns of the
    # revocation a moment after A answered, and the evidence was taken while the loan held.)
    for run in states:
        begun = [s for s in run["steps"] if s["detail"].get("method") == "device.install"
                 and datetime.fromisoformat(s["at"]) <= revoked_at]
        if not begun:
            assert run["result"].get("reason_code") == "access_revoked", run
