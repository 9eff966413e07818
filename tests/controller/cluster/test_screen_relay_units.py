"""The screen relay's reading side without Redis (controller/cluster/screens.py): a relayed
viewer reads like a local one, bounded; a gap in the numbering makes an H.264 viewer wait for
the next key frame, a picture viewer does not care; the end is said once and first wins."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from controller.auth.authorization import DeviceRef, Principal
from controller.cluster.screens import RemoteViewer
from controller.hub.screen import MAX_BEHIND
from controller.store import TokenKind
from protocol.screen_methods import ScreenFrame

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
