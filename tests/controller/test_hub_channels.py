"""``FrameOutbox``: the frames a tunnel's client gets, in order, then its end frame last."""

from __future__ import annotations

import asyncio

from controller.hub.channels import FrameOutbox


async def test_frames_go_in_order_then_the_final_one_then_none() -> None:
    box = FrameOutbox(1 << 20)
    box.put(b"a", 10)
    box.put(b"b", 5)
    assert box.queued == 15
    box.finish(b"end")
    assert [await box.next_frame() for _ in range(3)] == [b"a", b"b", b"end"]
    assert box.queued == 0
    assert await box.next_frame() is None


async def test_an_end_that_drops_what_is_queued_goes_out_next() -> None:
    box = FrameOutbox(1 << 20)
    box.put(b"a", 10)
    box.finish(b"end", drop_queued=True)
    assert box.queued == 0
    assert await box.next_frame() == b"end"
    assert await box.next_frame() is None


async def test_an_end_without_a_frame_of_its_own_lets_the_queue_drain() -> None:
    box = FrameOutbox(1 << 20)
    reader = asyncio.create_task(box.next_frame())
    await asyncio.sleep(0)
    assert not reader.done()  # waits for a frame
    box.put(b"holder's end", 0)
    assert await reader == b"holder's end"
    box.finish(None)
    assert await box.next_frame() is None


def test_a_frame_past_the_limit_is_not_queued() -> None:
    box = FrameOutbox(100)
    assert box.put(b"a", 60) and box.put(b"header", 0)
    assert not box.put(b"b", 41)  # 60 + 41 > 100: the holder ends the tunnel
    assert box.queued == 60 and box.put(b"c", 40) and box.queued == 100
