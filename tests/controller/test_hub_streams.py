"""LogStream: bounded, ordered, deduplicated by seq, resumed without gap or duplicate."""

from __future__ import annotations

from controller.hub.streams import LogStream
from protocol.methods import LogBatch


def _stream(max_batches: int = 8) -> LogStream:
    return LogStream(channel="c1", bridge_id="b", serial="s", max_batches=max_batches)


def _lines(a: int, b: int) -> list[str]:
    return [f"l{i}" for i in range(a, b)]


async def _drain(stream: LogStream) -> list[dict[str, object]]:
    out = []
    while True:
        chunk = await stream.get()
        out.append(chunk.to_json())
        if chunk.eof:
            return out


async def test_order_duplicates_and_gaps() -> None:
    s = _stream()
    s.feed(LogBatch(_lines(0, 2), seq=0))
    s.feed(LogBatch(_lines(0, 2), seq=0))  # duplicate
    s.feed(LogBatch(_lines(4, 6), seq=2, dropped=1))  # seq 1 lost, 1 line dropped upstream
    s.end("done")
    chunks = await _drain(s)
    assert chunks[0] == {"lines": ["l0", "l1"], "dropped": 0}
    assert chunks[1] == {"lines": ["l4", "l5"], "dropped": 1, "lost_batches": 1}
    assert chunks[2]["eof"] and chunks[2]["reason"] == "done"
    assert s.duplicates == 1


async def test_a_full_queue_drops_with_an_explicit_count() -> None:
    s = _stream(max_batches=2)
    for seq in range(5):
        s.feed(LogBatch(_lines(seq * 10, seq * 10 + 10), seq=seq))
    first = await s.get()
    s.feed(LogBatch(["late"], seq=5))
    assert first.lines == _lines(0, 10)
    assert (await s.get()).lines == _lines(10, 20)
    marked = await s.get()
    assert (marked.lines, marked.dropped) == (["late"], 30)


async def test_resync_skips_what_was_delivered() -> None:
    s = _stream()
    s.feed(LogBatch(_lines(0, 100), seq=0))
    s.resync("c2", tail=50)
    # The tail of the buffer (overlapping), then new lines, on the new channel from seq 0.
    s.feed(LogBatch(_lines(60, 90), seq=0))
    s.feed(LogBatch(_lines(90, 130), seq=1))
    s.feed(LogBatch(_lines(130, 140), seq=2, eof=True, reason="x"))
    got = [line for c in await _drain(s) for line in c["lines"]]  # type: ignore[attr-defined]
    assert got == _lines(0, 140)


async def test_resync_without_the_anchor_reports_a_gap() -> None:
    s = _stream()
    s.feed(LogBatch(_lines(0, 10), seq=0))
    s.resync("c2", tail=20)
    s.feed(LogBatch(_lines(500, 520), seq=0))
    s.end("e")
    chunks = await _drain(s)
    assert chunks[1]["lines"] == _lines(500, 520) and chunks[1]["lost_batches"] == 1
