"""The controller's screen fan-out rules (controller/hub/screen.py, docs/screen.md): a viewer
never queues stale frames — a picture viewer keeps only the newest, an H.264 viewer starts at
a key frame and, once too far behind, skips to the next one; a joiner gets the current group
of pictures; duplicates and malformed frames change nothing."""

from __future__ import annotations

from typing import Any

from controller.auth import DeviceRef
from controller.hub.screen import MAX_BEHIND, ScreenFeed, Viewer
from protocol.envelope import Evt
from protocol.screen_methods import ScreenFrame

DEVICE = DeviceRef("b1", "emulator-5554", "u1", "desk")


def _feed(codec: str) -> ScreenFeed:
    return ScreenFeed(feeds=None, device=DEVICE, codec=codec)  # type: ignore[arg-type]


def _evt(seq: int, codec: str, *, key: bool = True) -> Evt:
    frame = ScreenFrame(codec=codec, data=bytes([seq % 256]) * 8, key=key, w=4, h=8, n=seq)
    return Evt(ch="sc-1", seq=seq, d=frame.to_wire())


async def test_a_picture_viewer_shows_only_the_newest_frame() -> None:
    feed = _feed("jpeg")
    viewer = Viewer(feed)
    feed.join(viewer)
    for seq in range(5):
        feed.on_event(_evt(seq, "jpeg"))
    assert (await viewer.get()).n == 4
    assert viewer.skipped == 4
    late = Viewer(feed)
    feed.join(late)  # a joiner sees the current picture at once
    assert (await late.get()).n == 4


async def test_an_h264_viewer_starts_at_a_key_frame_and_skips_to_the_next_when_behind() -> None:
    feed = _feed("h264")
    early = Viewer(feed)
    feed.join(early)
    feed.on_event(_evt(0, "h264", key=False))  # before any key frame: undecodable
    feed.on_event(_evt(1, "h264", key=True))
    feed.on_event(_evt(2, "h264", key=False))
    joiner = Viewer(feed)
    feed.join(joiner)  # gets the group of pictures: the key frame and what follows it
    assert [(await joiner.get()).n for _ in range(2)] == [1, 2]
    for seq in range(3, 3 + MAX_BEHIND):
        feed.on_event(_evt(seq, "h264", key=False))
    # early held 1, 2, 3 … and fell MAX_BEHIND behind: it dropped them and waits for a key.
    feed.on_event(_evt(100, "h264", key=False))
    feed.on_event(_evt(101, "h264", key=True))
    feed.on_event(_evt(102, "h264", key=False))
    assert [(await early.get()).n for _ in range(2)] == [101, 102]
    assert early.skipped >= MAX_BEHIND


def test_duplicates_and_malformed_frames_are_ignored() -> None:
    feed = _feed("jpeg")
    viewer = Viewer(feed)
    feed.join(viewer)
    feed.on_event(_evt(3, "jpeg"))
    feed.on_event(_evt(2, "jpeg"))  # a re-sent older frame
    bad: dict[str, Any] = {"codec": "gif", "data": b"x"}
    feed.on_event(Evt(ch="sc-1", seq=4, d=bad))
    assert feed.received == 1 and feed.latest is not None and feed.latest.n == 3
