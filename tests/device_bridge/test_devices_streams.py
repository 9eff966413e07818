"""Line streams of the device layer: batching, order, backpressure, drop markers, shutdown.

The reader thread reads a real socket (one end of a socketpair); a writer thread plays adb.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from device_bridge.adb.streams import LineBuffer, LineStream, RawDecoder, ShellV2Decoder
from protocol.methods import LogBatch

WAIT_S = 10.0  # generous bound on every wait; never a synchronisation sleep


def v2_packet(kind: int, data: bytes) -> bytes:
    return bytes([kind]) + len(data).to_bytes(4, "little") + data


# --------------------------------------------------------------------------------------------
# LineBuffer: no I/O


def test_buffer_batches_in_order() -> None:
    buf = LineBuffer(max_lines=1000, batch_lines=100)
    for i in range(250):
        assert buf.put(f"line {i}")
    sizes = []
    seen: list[str] = []
    while (batch := buf.take()) is not None:
        sizes.append(len(batch.lines))
        seen += batch.lines
        assert batch.dropped == 0 and not batch.eof
    assert sizes == [100, 100, 50]
    assert seen == [f"line {i}" for i in range(250)]


def test_buffer_drops_with_an_explicit_marker_when_the_consumer_stays_away() -> None:
    buf = LineBuffer(max_lines=10, batch_lines=100, stall_s=0)
    for i in range(25):
        buf.put(f"{i}")
    first = buf.take()
    assert first == LogBatch(lines=[str(i) for i in range(10)], dropped=0)
    buf.put("25")
    second = buf.take()
    assert second == LogBatch(lines=["25"], dropped=15)  # the gap sits right before line 25
    assert buf.total_dropped == 15
    assert buf.take() is None


def test_buffer_waits_one_stall_then_drops_without_waiting_until_the_consumer_returns() -> None:
    buf = LineBuffer(max_lines=1, batch_lines=10, stall_s=0.01)
    for i in range(101):
        buf.put(str(i))
    assert buf.stalls == 1 and buf.total_dropped == 100
    assert buf.take() == LogBatch(lines=["0"], dropped=0)
    buf.put("101")  # room again: stored, after the marker for the gap
    buf.put("102")  # full again: a new stall before dropping
    assert buf.stalls == 2
    assert buf.take() == LogBatch(lines=["101"], dropped=100)
    assert buf.take() is None
    buf.put("103")
    assert buf.take() == LogBatch(lines=["103"], dropped=1)


def test_buffer_reports_drops_at_the_end_in_the_eof_batch() -> None:
    buf = LineBuffer(max_lines=2, batch_lines=10, stall_s=0)
    for i in range(5):
        buf.put(str(i))
    buf.close("closed")
    assert buf.take() == LogBatch(lines=["0", "1"], dropped=0)
    assert buf.take() == LogBatch(lines=[], dropped=3, eof=True, reason="closed")
    assert buf.take() is None  # eof is handed out once


def test_buffer_waits_for_room_instead_of_dropping() -> None:
    ready = threading.Event()
    buf = LineBuffer(max_lines=3, batch_lines=3, stall_s=None, on_ready=ready.set)

    def writer() -> None:
        for i in range(30):
            buf.put(str(i))
        buf.close("closed")

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[str] = []
    while True:
        ready.clear()
        batch = buf.take()
        if batch is None:
            assert ready.wait(WAIT_S), "the writer made no progress"
            continue
        assert len(batch.lines) <= 3 and batch.dropped == 0
        seen += batch.lines
        if batch.eof:
            break
    thread.join(WAIT_S)
    assert seen == [str(i) for i in range(30)]
    assert buf.total_dropped == 0


def test_buffer_cancel_releases_a_waiting_writer() -> None:
    buf = LineBuffer(max_lines=1, batch_lines=1, stall_s=None)
    buf.put("a")
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(buf.put("b")))
    thread.start()
    buf.cancel()
    thread.join(WAIT_S)
    assert result == [False]


def test_buffer_rejects_nonsense_bounds() -> None:
    with pytest.raises(ValueError):
        LineBuffer(max_lines=0, batch_lines=1)


# --------------------------------------------------------------------------------------------
# decoders


def test_raw_decoder_splits_across_chunks_and_strips_cr() -> None:
    dec = RawDecoder()
    assert dec.feed(b"ab") == []
    assert dec.feed(b"c\r\nde\nf") == ["abc", "de"]
    assert dec.finish() == ["f"]
    assert dec.finish() == []


def test_raw_decoder_cuts_overlong_lines_and_replaces_bad_utf8() -> None:
    dec = RawDecoder(max_line_bytes=4)
    assert dec.feed(b"abcdefghij") == ["abcd", "efgh"]
    assert dec.feed(b"\n\xff\xfe\n") == ["ij", "\ufffd\ufffd"]


def test_shell_v2_decoder_packets_split_anywhere() -> None:
    data = (
        v2_packet(1, b"out1\nou")
        + v2_packet(2, b"err\n")
        + v2_packet(1, b"t2\n")
        + v2_packet(3, b"\x07")
    )
    dec = ShellV2Decoder()
    lines: list[str] = []
    for i in range(len(data)):  # one byte at a time: headers straddle every boundary
        lines += dec.feed(data[i : i + 1])
    assert lines == ["out1", "err", "out2"]
    assert dec.exit_code == 7 and dec.done


# --------------------------------------------------------------------------------------------
# LineStream over a socket


Pair = tuple[socket.socket, socket.socket]


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A socketpair: ours for the stream's reader, theirs for the writer playing adb.

    Both are shut and closed whatever the test did: a socket left to the garbage collector
    fails some later test with a ResourceWarning, and shutting them ends any thread still
    reading or writing."""
    ours, theirs = socket.socketpair()
    try:
        yield ours, theirs
    finally:
        for sock in (theirs, ours):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def start_writer(sock: socket.socket, payload: bytes, *, close: bool = True) -> threading.Thread:
    def run() -> None:
        try:
            sock.sendall(payload)
        except OSError:
            return
        if close:
            sock.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def collect(stream: LineStream) -> list[LogBatch]:
    out = []
    async with asyncio.timeout(WAIT_S):
        async for batch in stream:
            out.append(batch)
    return out


async def test_stream_ten_thousand_lines_in_order_in_bounded_batches(pair: Pair) -> None:
    ours, theirs = pair
    lines = [f"11-30 05:00:00.000  100  100 I Tag: line {i}" for i in range(10_000)]
    writer = start_writer(theirs, ("\n".join(lines) + "\n").encode())
    stream = LineStream(
        ours, decoder=RawDecoder(), batch_lines=100, flush_s=0.025, max_lines=500, stall_s=None
    ).start()
    batches = await collect(stream)
    writer.join(WAIT_S)
    got = [line for b in batches for line in b.lines]
    assert got == lines
    assert all(len(b.lines) <= 100 for b in batches)
    assert sum(b.dropped for b in batches) == 0
    assert batches[-1].eof and batches[-1].reason == "closed"
    assert sum(1 for b in batches if b.eof) == 1


async def test_stream_hands_out_a_partial_batch_without_waiting_for_a_full_one(pair: Pair) -> None:
    ours, theirs = pair
    theirs.sendall(b"a\nb\nc\n")
    stream = LineStream(
        ours, decoder=RawDecoder(), batch_lines=100, flush_s=0.01, max_lines=1000
    ).start()
    try:
        async with asyncio.timeout(WAIT_S):
            batch = await anext(stream)
        assert batch.lines == ["a", "b", "c"] and not batch.eof
    finally:
        await stream.aclose()
        theirs.close()


async def test_stream_aclose_stops_a_reader_blocked_on_a_full_buffer(pair: Pair) -> None:
    ours, theirs = pair
    theirs.setblocking(False)
    payload = b"x\n" * 50_000
    writer = start_writer(theirs, payload, close=False)
    released = threading.Event()
    # flush_s is the whole wait: a batch is handed out only once full, whatever the machine's
    # speed, so the reader has filled the buffer (max_lines == batch_lines) by then.
    stream = LineStream(
        ours,
        decoder=RawDecoder(),
        batch_lines=10,
        flush_s=WAIT_S,
        max_lines=10,
        stall_s=None,
        on_done=released.set,
    ).start()
    async with asyncio.timeout(WAIT_S):
        first = await anext(stream)
    assert first.lines == ["x"] * 10
    await stream.aclose()
    assert released.wait(WAIT_S)  # the reader thread ended and gave back its stream slot
    rest = await collect(stream)
    assert rest[-1].eof and rest[-1].reason == "cancelled"
    theirs.close()
    writer.join(WAIT_S)


async def test_stream_v2_carries_the_exit_code(pair: Pair) -> None:
    ours, theirs = pair
    payload = v2_packet(1, b"INSTRUMENTATION_STATUS_CODE: 1\n") + v2_packet(
        1, b"INSTRUMENTATION_CODE: -1\n"
    )
    payload += v2_packet(3, b"\x00")
    start_writer(theirs, payload, close=False)
    stream = LineStream(
        ours, decoder=ShellV2Decoder(), batch_lines=100, flush_s=0.01, max_lines=100
    ).start()
    batches = await collect(stream)
    assert [line for b in batches for line in b.lines] == [
        "INSTRUMENTATION_STATUS_CODE: 1",
        "INSTRUMENTATION_CODE: -1",
    ]
    assert batches[-1].eof and batches[-1].reason == "exited"
    assert stream.exit_code == 0
    theirs.close()


async def test_stream_reports_drops_when_the_consumer_stalls(pair: Pair) -> None:
    ours, theirs = pair
    start_writer(theirs, b"".join(f"{i}\n".encode() for i in range(1000)))
    stream = LineStream(
        ours, decoder=RawDecoder(), batch_lines=50, flush_s=0.01, max_lines=50, stall_s=0
    ).start()
    batches = await collect(stream)  # the reader may outrun us: whatever it lost, it says so
    received = [int(line) for b in batches for line in b.lines]
    assert received == sorted(received)
    assert len(received) + sum(b.dropped for b in batches) == 1000
    assert stream.dropped == sum(b.dropped for b in batches)


async def test_an_absent_consumer_loses_the_overflow_after_one_stall_and_is_told(
    pair: Pair,
) -> None:
    """The reader waits ``stall_s`` once, then drops whatever overflows (never one line per
    stall, which would stall the device as well); the next batch counts the gap."""
    ours, theirs = pair
    start_writer(theirs, b"".join(f"{i}\n".encode() for i in range(1000)))
    finished = threading.Event()
    stream = LineStream(
        ours, decoder=RawDecoder(), batch_lines=50, flush_s=0.01, max_lines=50, stall_s=0.05,
        on_done=finished.set,
    ).start()
    # The consumer stays away until the device has sent everything and the reader is done.
    assert await asyncio.to_thread(finished.wait, WAIT_S)
    assert stream.buffer.stalls == 1 and stream.dropped == 950
    batches = await collect(stream)
    assert batches == [
        LogBatch(lines=[str(i) for i in range(50)], dropped=0),
        LogBatch(lines=[], dropped=950, eof=True, reason="closed"),
    ]


async def test_a_slow_consumer_hears_of_each_gap_in_the_batch_after_it() -> None:
    """Each absence costs one stall and the lines that overflowed during it, counted in the
    first batch after the gap; lines kept stay in order."""
    buf = LineBuffer(max_lines=4, batch_lines=4, stall_s=0)
    sent = 0
    received: list[int] = []
    batches: list[LogBatch] = []
    for _ in range(5):  # the consumer comes back five times, each after 10 lines were offered
        for _ in range(10):
            buf.put(str(sent))
            sent += 1
        while (batch := buf.take()) is not None:
            batches.append(batch)
            received += [int(line) for line in batch.lines]
    buf.close("closed")
    batches += [b for b in iter(buf.take, None)]
    assert received == sorted(received)
    assert len(received) + sum(b.dropped for b in batches) == sent == 50
    assert buf.stalls == 5 and buf.total_dropped == 30
    # every gap is reported right where it happened: before the first line after it
    assert [b.dropped for b in batches] == [0, 6, 6, 6, 6, 6]
    assert [b.lines[0] for b in batches[1:-1]] == ["10", "20", "30", "40"]
