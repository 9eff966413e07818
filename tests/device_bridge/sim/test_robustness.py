"""Bad input never crashes the simulated device: fuzzed shell text, frames and sync requests."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from device_bridge.sim.files import SimFiles
from device_bridge.sim.sync import serve_sync
from device_bridge.sim.transport import FramingError, MessageReader
from tests.conftest import TIME_SCALE
from tests.device_bridge.sim.helpers import Feed, new_device, sh

# Pieces of what clients really send, plus the metacharacters the shell must survive.
# (No `sleep` and no `logcat` without -d: those wait by design.)
PIECES = st.sampled_from([
    "echo", "true", "false", "exit", "exec", "export", "getprop", "ls", "rm", "-f", "-rf",
    "/data/local/tmp/x", "/data", "pm", "list", "packages", "install", "am", "start",
    "instrument", "-w", "-r", "force-stop", "dumpsys", "window", "wm", "size", "input", "tap",
    "1", "99999", "-1", "cat", "grep", "logcat -d", "logcat -c", "screencap", "nosuch",
    ";", "&&", "||", "|", "&", "<", ">", ">>", "2>&1", "$?", "$", "${", "}", "$(", ")", "`",
    "'", '"', "\\", "#", "*", "\n", "X4EXIT:$?", "</dev/null", "!", "(", "=", "A=1",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=12))
def test_any_command_line_ends_with_a_status(pieces):
    async def main() -> int:
        dev = new_device()
        result = await asyncio.wait_for(sh(dev, " ".join(pieces)), 10 * TIME_SCALE)
        return result.code

    code = asyncio.run(main())
    assert 0 <= code <= 255


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_framing_only_ever_raises_framing_errors(chunks):
    reader = MessageReader()
    try:
        for chunk in chunks:
            reader.feed(chunk)
    except FramingError:
        pass


SYNC_IDS = st.sampled_from([b"STAT", b"STA2", b"LST2", b"LIST", b"LIS2", b"SEND", b"RECV",
                            b"DATA", b"DONE", b"QUIT", b"XXXX"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(SYNC_IDS, st.integers(0, 2000), st.binary(max_size=40)), max_size=6))
def test_sync_requests_in_any_order_never_crash(requests):
    data = b"".join(rid + n.to_bytes(4, "little") + body for rid, n, body in requests)
    feed = Feed(data)
    files = SimFiles(quota=1 << 20)
    asyncio.run(serve_sync(feed, files))
