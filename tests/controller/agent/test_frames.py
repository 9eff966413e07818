"""Evidence frames in the store: retention, degradation, and serving them across a controller
restart and through another replica on the same database — SQLite and PostgreSQL.

The store-level tests use a real migrated store and no device; the end-to-end ones go httpx →
real controllers (uvicorn) → a bridge session → the real adb server → the simulated demo app.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from controller.agent import DbFrameStore, FrameNotKept, RulePlanner, TraceStore
from controller.api.agent import FRAME_MAX_AGE_S
from controller.config import ControllerConfig
from controller.services import services_of
from controller.store import Frame, Store, User
from device_bridge.rpc import Dispatcher
from protocol.envelope import DeviceInfo
from tests.adb_support import ConnectedSim
from tests.conftest import TIME_SCALE
from tests.controller.agent.support import toast_shown
from tests.controller.conftest import (  # noqa: F401 - fixtures
    ADMIN_TOKEN,
    bearer,
    db_url,
    pg_url,
    sqlite_url,
)
from tests.controller.test_hub_support import FakeBridge, InLoopController, fast_settings

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:  # noqa: F811 - the fixture above
    async with Store(db_url) as s:
        await s.migrate()
        yield s


async def frame_count(store: Store) -> int:
    async with store.session() as session:
        return int((await session.execute(select(func.count()).select_from(Frame))).scalar_one())


async def test_the_store_keeps_the_newest_traces_within_the_byte_cap(store: Store) -> None:
    traces = TraceStore(store, DbFrameStore(store, 2, max_bytes=100))
    frames = traces.frames
    t1, t2, t3, t4 = [
        (await traces.open(user_id=None, device="d", tool="actions")).id for _ in range(4)
    ]
    await frames.put(t1, None, "0-a.png", PNG + b"1" * 2)
    await frames.put(t2, None, "0-a.png", PNG + b"2" * 2)
    await frames.put(t1, None, "1-a.png", PNG + b"1" * 2)  # t1 written last: t2 is the oldest
    await frames.put(t3, None, "0-a.png", PNG + b"3" * 2)
    assert await frames.get(t2, "0-a.png") is None
    assert await frames.get(t1, "0-a.png") is not None and await frames.get(t3, "0-a.png")
    # 95 bytes: the byte cap leaves room for no other trace, and never drops the new one.
    await frames.put(t4, None, "0-big.png", PNG + b"4" * 87)
    assert await frames.get(t1, "1-a.png") is None and await frames.get(t3, "0-a.png") is None
    kept = await frames.get(t4, "0-big.png")
    assert kept is not None and kept.png == PNG + b"4" * 87 and await frame_count(store) == 1
    with pytest.raises(FrameNotKept, match="101 bytes"):
        await frames.put(t4, None, "1-huge.png", PNG + b"5" * 93)
    assert await frame_count(store) == 1


async def test_a_frame_not_kept_is_named_in_the_step_and_fails_nothing(store: Store) -> None:
    traces = TraceStore(store, DbFrameStore(store, 4, max_bytes=50))
    trace = await traces.open(user_id=None, device="d", tool="actions")
    result: dict[str, Any] = {"ok": True, "at_action_png": PNG + b"a", "settled_png": PNG * 10}
    kept = await trace.keep_frames(0, result)
    assert kept["frames"] == {"at_action": f"/v1/agent/traces/{trace.id}/frames/0-at_action.png"}
    assert "80 bytes" in kept["frames_not_kept"]["settled"]
    assert result["settled_png"] == PNG * 10  # the caller still has it for its own answer

    # The store failing (its table gone) costs the links, not the call nor the step log.
    async with store.engine.begin() as conn:
        await conn.execute(text("DROP TABLE frames"))
    kept = await trace.keep_frames(1, {"at_action_png": PNG + b"b"})
    assert kept == {"frames": {}, "frames_not_kept": {"at_action": "the store failed"}}
    step = await trace.record("tool", "ok", **kept)
    assert step.detail["frames_not_kept"] == {"at_action": "the store failed"}


async def test_frames_go_with_their_run(store: Store) -> None:
    """The rows belong to the trace's run: deleting a run deletes its frames (ON DELETE
    CASCADE, on SQLite too — the store turns foreign keys on)."""
    traces = TraceStore(store)
    trace = await traces.open(user_id=None, device="d", tool="actions")
    await traces.frames.put(trace.id, None, "0-a.png", PNG)
    async with store.engine.begin() as conn:
        await conn.execute(text("DELETE FROM runs WHERE id = :id"), {"id": trace.id})
    assert await frame_count(store) == 0


# --- End to end: real controllers, one database ------------------------------------------


def config(url: str, **overrides: Any) -> ControllerConfig:
    # Actions wait for settled frames: a generous RPC deadline for slow machines.
    return ControllerConfig(db_url=url, bootstrap_token=ADMIN_TOKEN,
                            settings=fast_settings(rpc_timeout_s=60 * TIME_SCALE), **overrides)


class Controllers:
    """Controllers started (and stopped) on one database; the device's bridge (one token,
    kept in the database) connects to those started with ``bridged``."""

    def __init__(self, url: str, bridge: Dispatcher, sim: ConnectedSim) -> None:
        self.url = url
        self.bridge = bridge
        self.sim = sim
        self.running: dict[InLoopController, FakeBridge | None] = {}
        self.token: str | None = None

    async def start(self, *, bridged: bool = False, **overrides: Any) -> InLoopController:
        ctl = InLoopController(config(self.url, **overrides))
        await ctl.start()
        self.running[ctl] = None
        ctl.app.state.agent_planner = RulePlanner()  # no LLM in the environment, whatever it says
        if bridged:
            self.token = self.token or await ctl.bridge_token("desk")
            link = self.running[ctl] = FakeBridge(
                ctl.url, self.token, handler=self.bridge,
                devices=[DeviceInfo(serial=self.sim.address, state="device", sdk=34)])
            await link.connect()
        return ctl

    async def stop(self, ctl: InLoopController) -> None:
        link = self.running.pop(ctl)
        if link is not None:
            await link.close()
        await ctl.stop()

    async def close(self) -> None:
        for ctl in list(self.running):
            await self.stop(ctl)


@pytest.fixture
async def controllers(
    db_url: str, bridge: Dispatcher, sim: ConnectedSim  # noqa: F811
) -> AsyncIterator[Controllers]:
    group = Controllers(db_url, bridge, sim)
    try:
        yield group
    finally:
        await group.close()


async def user_token(http: httpx.AsyncClient, name: str) -> str:
    made = await http.post("/v1/tokens", json={"kind": "user", "name": name})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


async def tap_save(http: httpx.AsyncClient, sim: ConnectedSim) -> dict[str, Any]:
    """Open Settings, then tap Save with the settled frame: the step links three frames."""
    await http.post(f"/v1/devices/{sim.address}/actions", json={"action": "key", "key": "HOME"})
    await http.post(f"/v1/devices/{sim.address}/actions",
                    json={"action": "start", "package": "com.droidwire.demo"})
    ui = (await http.get(f"/v1/devices/{sim.address}/ui")).json()
    settings = next(e for e in ui["elements"] if e["text"] == "Settings")
    opened = await http.post(f"/v1/devices/{sim.address}/actions",
                             json={"action": "tap", "index": settings["index"]})
    assert opened.status_code == 200, opened.text
    saved = await http.post(f"/v1/devices/{sim.address}/actions",
                            json={"action": "tap", "text": "Save", "settled": True})
    assert saved.status_code == 200, saved.text
    return dict(saved.json())


async def step_detail(http: httpx.AsyncClient, trace_id: str) -> dict[str, Any]:
    run = await http.get(f"/v1/runs/{trace_id}")
    assert run.status_code == 200, run.text
    return dict(run.json()["steps"][0]["detail"])


@pytest.mark.adb
async def test_frames_outlive_a_restart_and_any_replica_serves_them(
    controllers: Controllers, sim: ConnectedSim
) -> None:
    first = await controllers.start(bridged=True)
    sam = await user_token(first.http, "sam")
    mallory = await user_token(first.http, "mallory")
    lent = await first.http.post("/v1/grants", json={"device": sim.address, "user": "sam"})
    assert lent.status_code == 201, lent.text
    async with httpx.AsyncClient(base_url=first.url, headers=bearer(sam),
                                 timeout=60 * TIME_SCALE) as as_sam:
        body = await tap_save(as_sam, sim)
        links = (await step_detail(as_sam, body["trace_id"]))["frames"]
    assert set(links) == {"at_action", "settled", "composite"}
    at_action = base64.b64decode(body["at_action_png"])
    assert toast_shown(at_action)

    # Another replica on the same database, while the first still runs (cluster mode).
    replica = await controllers.start()
    async with httpx.AsyncClient(base_url=replica.url, headers=bearer(sam)) as as_sam:
        got = await as_sam.get(links["at_action"])
    assert got.status_code == 200 and got.content == at_action
    assert got.headers["content-type"] == "image/png"
    assert got.headers["cache-control"] == f"private, max-age={FRAME_MAX_AGE_S}, immutable"

    # Both stopped, a fresh controller on the same database: the frames are still there.
    await controllers.stop(first)
    await controllers.stop(replica)
    again = await controllers.start()
    async with (httpx.AsyncClient(base_url=again.url, headers=bearer(sam)) as as_sam,
                httpx.AsyncClient(base_url=again.url, headers=bearer(mallory)) as as_mallory):
        for name, link in links.items():
            got = await as_sam.get(link)
            assert got.status_code == 200, (name, got.text)
            assert got.content == base64.b64decode(body[f"{name}_png"])
        etag = got.headers["etag"]
        assert (await as_sam.get(link, headers={"If-None-Match": etag})).status_code == 304
        assert (await as_sam.get(link, headers={"If-None-Match": '"other"'})).status_code == 200
        assert (await again.http.get(link)).status_code == 200  # an admin sees every frame
        # Someone else: the same 404 as for a frame that never existed.
        theirs = await as_mallory.get(link)
        absent = await as_mallory.get(link.replace("-at_action", "-nothing"))
        assert theirs.status_code == absent.status_code == 404
        assert theirs.json() == absent.json()
        assert (await as_mallory.get(link, headers={"If-None-Match": etag})).status_code == 404


@pytest.mark.adb
async def test_retention_and_an_oversized_frame_on_a_live_controller(
    controllers: Controllers, sim: ConnectedSim
) -> None:
    # One trace kept; 1 KB of PNG at most: the simulated device's frames (tens of KB) are
    # each too large to keep, so the actions go on without them.
    ctl = await controllers.start(bridged=True, agent_frame_traces=1, agent_frame_bytes=1024)
    body = await tap_save(ctl.http, sim)
    assert body["ok"] is True and base64.b64decode(body["settled_png"]).startswith(PNG)
    detail = await step_detail(ctl.http, body["trace_id"])
    assert detail["frames"] == {}
    assert set(detail["frames_not_kept"]) == {"at_action", "settled", "composite"}
    assert "more than the 1024 bytes kept in all" in detail["frames_not_kept"]["settled"]
    await controllers.stop(ctl)

    # The same database, one trace kept and room enough: the newer trace evicts the older.
    ctl = await controllers.start(bridged=True, agent_frame_traces=1)
    old = await ctl.http.post(f"/v1/devices/{sim.address}/actions",
                              json={"action": "key", "key": "BACK"})
    old_link = (await step_detail(ctl.http, old.json()["trace_id"]))["frames"]["at_action"]
    assert (await ctl.http.get(old_link)).status_code == 200
    new = await ctl.http.post(f"/v1/devices/{sim.address}/actions",
                              json={"action": "key", "key": "BACK"})
    new_link = (await step_detail(ctl.http, new.json()["trace_id"]))["frames"]["at_action"]
    assert (await ctl.http.get(new_link)).status_code == 200
    assert (await ctl.http.get(old_link)).status_code == 404
    async with services_of(ctl.app).store.session() as session:
        owners = (await session.execute(select(Frame.run_id, Frame.user_id))).all()
        admin = (await session.execute(select(User.id).where(User.is_admin))).scalars().all()
    assert {run_id for run_id, _ in owners} == {new.json()["trace_id"]}
    assert {user_id for _, user_id in owners} <= set(admin)
