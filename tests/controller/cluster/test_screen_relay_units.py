"""The screen relay's reading side without Redis (controller/cluster/screens.py): a relayed
viewer reads like a local one, bounded; a gap in the numbering makes an H.264 viewer wait for
the next key frame, a picture viewer does not care; the end is said once and first wins. The
holder answers a latest-picture request only from a live replica; what it answers is a bounded
picture or none."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from controller.auth.authorization import DeviceRef, Principal
from controller.cluster.screens import RemoteViewer, ScreenRelays
from controller.cluster.wire import unpack
from controller.hub.screen import MAX_BEHIND
from controller.store import TokenKind
from protocol.errors import ErrorCode, RpcError
from protocol.screen_methods import MAX_FRAME_DATA, ScreenFrame

BOB = Principal("t1", TokenKind.USER, "bob", "u-bob", "bob", False, None, ("devices:use",))
DEVICE = DeviceRef("b1", "emulator-5554", "u-olivia", "desk")


def _relayed(codec: str) -> tuple[RemoteViewer, list[dict[str, Any]]]:
    told: list[dict[str, Any]] = []
    relays: Any = SimpleNamespace(_screens={}, replica_id="r-b",
                                  _tell=lambda _replica, body: told.append(body))
    viewer = RemoteViewer(relays, "r-a", BOB, DEVICE, codec)
    relays._screens[viewer.relay] = viewer
    return viewer, told


def _frame(viewer: RemoteViewer, seq: int, n: int, *, key: bool = False,
           codec: str | None = None) -> None:
    frame = ScreenFrame(codec=codec or viewer.codec, data=b"x%d" % n, key=key, w=4, h=4, n=n)
    viewer.take({"k": "vframe", "id": viewer.relay, "from": "r-a", "seq": seq,
                 "f": frame.to_wire()})


async def _drain(viewer: RemoteViewer) -> list[ScreenFrame]:
    got = []
    while True:
        frame = await asyncio.wait_for(viewer.get(), 1.0)
        got.append(frame)
        if frame.eof:
            return got


async def test_h264_after_a_gap_waits_for_the_next_key_frame() -> None:
    viewer, _told = _relayed("h264")
    _frame(viewer, 0, 0, key=True)
    _frame(viewer, 1, 1)
    _frame(viewer, 3, 3)  # frame 2 never came: 3 refers to it
    _frame(viewer, 4, 4)
    _frame(viewer, 5, 5, key=True)
    _frame(viewer, 6, 6)
    viewer.take({"k": "vframe", "id": viewer.relay, "seq": 7,
                 "f": {"eof": True, "reason": "bridge_disconnected"}})
    got = await _drain(viewer)
    assert [f.n for f in got if not f.eof] == [0, 1, 5, 6]
    assert got[-1].reason == "bridge_disconnected"
    assert viewer.lost == 1
    assert viewer.relay not in viewer.relays._screens  # forgotten at its end


async def test_pictures_after_a_gap_are_shown_and_only_the_newest_is_held() -> None:
    viewer, _told = _relayed("jpeg")
    _frame(viewer, 0, 0, key=True)
    _frame(viewer, 2, 2, key=True)  # 1 lost: harmless for pictures
    assert (await viewer.get()).n == 2  # 0 was replaced by the newer picture
    _frame(viewer, 3, 3, key=True)
    assert (await viewer.get()).n == 3
    assert viewer.lost == 1


async def test_a_relayed_h264_viewer_is_bounded_like_a_local_one() -> None:
    viewer, _told = _relayed("h264")
    _frame(viewer, 0, 0, key=True)
    for seq in range(1, 3 * MAX_BEHIND):
        _frame(viewer, seq, seq)
    assert len(viewer._pending) <= MAX_BEHIND
    # It fell behind: it skipped what it held and waits for a key frame.
    seq = 3 * MAX_BEHIND
    _frame(viewer, seq, seq, key=True)
    assert (await viewer.get()).n == seq


async def test_malformed_or_stale_messages_never_raise() -> None:
    viewer, _told = _relayed("h264")
    _frame(viewer, 0, 0, key=True)
    viewer.take({"k": "vframe", "id": viewer.relay, "seq": "1", "f": {}})
    viewer.take({"k": "vframe", "id": viewer.relay, "seq": 0, "f": {}})  # a duplicate
    viewer.take({"k": "vframe", "id": viewer.relay, "seq": 1, "f": {"codec": "gif"}})
    _frame(viewer, 2, 2)  # refers to the malformed 1: skipped
    _frame(viewer, 3, 3, key=True)
    assert [(await viewer.get()).n, (await viewer.get()).n] == [0, 3]


async def test_the_first_end_wins_and_closing_tells_the_holder_once() -> None:
    viewer, told = _relayed("jpeg")
    viewer.end("replica_lost")
    _frame(viewer, 0, 0, key=True)  # too late: nobody reads it
    viewer.end("shutdown")
    assert [f.reason for f in await _drain(viewer)] == ["replica_lost"]
    await viewer.close()
    await viewer.close()
    assert told == [{"k": "vend", "id": viewer.relay, "from": "r-b"}]


class _Holder:
    """What :meth:`ScreenRelays._serve_latest` uses of its replica: who is alive, the hub's
    latest picture, and what it publishes."""

    def __init__(self, picture: ScreenFrame | None) -> None:
        self.alive = {"r-b"}
        self.asked: list[tuple[DeviceRef, bool]] = []
        self.published: list[tuple[str, dict[str, Any]]] = []

        async def latest_picture(device: DeviceRef, *, route: bool) -> ScreenFrame | None:
            self.asked.append((device, route))
            return picture

        async def publish(channel: str, data: bytes) -> int:
            self.published.append((channel, unpack(data) or {}))
            return 1

        self.hub = SimpleNamespace(screens=SimpleNamespace(latest_picture=latest_picture))
        self.redis = SimpleNamespace(publish=publish)

    async def replica_alive(self, replica: str) -> bool:
        return replica in self.alive

    def channel(self, replica: str) -> str:
        return f"P:rpc:{replica}"


async def test_the_latest_picture_is_served_only_to_a_live_replica() -> None:
    picture = ScreenFrame(codec="jpeg", data=b"\xff\xd8pic", w=4, h=4, n=9, ts=1.0)
    holder: Any = _Holder(picture)
    ask = {"k": "vlatest", "bridge": DEVICE.bridge_id, "serial": DEVICE.serial}
    # Not a live replica of this cluster (a stranger on the channel, or one that died): no
    # answer at all, and the hub is not asked.
    await ScreenRelays._serve_latest(holder, {**ask, "id": "q1", "from": "intruder"})
    assert holder.published == [] and holder.asked == []
    await ScreenRelays._serve_latest(holder, {**ask, "id": "q2", "from": "r-b"})
    [(device, route)] = holder.asked
    assert (device.bridge_id, device.serial, route) == (DEVICE.bridge_id, DEVICE.serial, False)
    assert holder.published == [("P:rpc:r-b", {"k": "res", "id": "q2",
                                                "r": {"frame": picture.to_wire()}})]
    # A malformed request from a live replica is answered with a typed error.
    await ScreenRelays._serve_latest(holder, {"k": "vlatest", "id": "q3", "from": "r-b"})
    assert holder.published[-1][1]["e"]["code"] == "bad_request"


async def test_the_holders_answer_is_a_bounded_picture_or_none() -> None:
    answers: list[dict[str, Any]] = []

    async def ask(_replica: str, message: dict[str, Any], *_rest: Any) -> dict[str, Any]:
        assert message["k"] == "vlatest" and message["serial"] == DEVICE.serial
        return answers.pop(0)

    requester: Any = SimpleNamespace(_waiting={}, replica_id="r-b", _ask=ask,
                                     settings=SimpleNamespace(rpc_timeout_s=1.0))
    picture = ScreenFrame(codec="png", data=b"\x89PNG", w=4, h=4, n=3, ts=2.0)
    answers += [{"frame": None}, {"frame": picture.to_wire()}]
    assert await ScreenRelays.latest_picture(requester, "r-a", DEVICE) is None
    assert (await ScreenRelays.latest_picture(requester, "r-a", DEVICE)) == picture
    too_big = ScreenFrame(codec="jpeg", data=b"x" * (MAX_FRAME_DATA + 1))
    for wrong in (too_big.to_wire(), {"codec": "h264", "data": b"x"}, {"eof": True}, "x"):
        answers.append({"frame": wrong})
        with pytest.raises(RpcError) as failed:
            await ScreenRelays.latest_picture(requester, "r-a", DEVICE)
        assert failed.value.code is ErrorCode.INTERNAL
    assert requester._waiting == {}
