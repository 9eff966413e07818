"""A logcat subscription with a priority filter (issue 19): ``?priority=W`` keeps warnings,
errors and fatal lines; the rest never reach the consumer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from controller.api.devices import line_priority
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import FakeBridge, InLoopController, in_loop_controller

WAIT_S = 30.0 * TIME_SCALE
LINES = [
    "12-01 10:00:00.000  1000  1100 V Verbose: v",
    "12-01 10:00:00.001  1000  1100 D Debug: d",
    "12-01 10:00:00.002  1000  1100 I Info: i",
    "12-01 10:00:00.003  1000  1100 W Warn: w",
    "12-01 10:00:00.004  1000  1100 E Err: e",
    "12-01 10:00:00.005  1000  1100 F libc: f",
    "--------- beginning of crash",
    "12-01 10:00:00.006  1000  1100 A DEBUG: abort",
]


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[InLoopController]:
    async with in_loop_controller(tmp_path) as c:
        yield c


@pytest.mark.parametrize(("priority", "kept"), [("W", ["w", "e", "f", "abort"]),
                                                ("E", ["e", "f", "abort"]),
                                                ("F", ["f", "abort"])])
async def test_the_stream_keeps_lines_of_the_priority_and_above(
    controller: InLoopController, priority: str, kept: list[str]
) -> None:
    subscribed = asyncio.Event()

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            subscribed.set()
            return {"channel": "log-1"}
        return {}

    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
    await fake.connect()
    url = (controller.ws_url + "/v1/devices/emulator-5554/logcat/stream"
           f"?priority={priority}")
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S) as ws:
        await asyncio.wait_for(subscribed.wait(), WAIT_S)
        await fake.emit("log-1", {"lines": LINES[:4], "dropped": 0})
        await fake.emit("log-1", {"lines": ["12-01 10:00:01.000  1 1 I Only: info"], "dropped": 0})
        await fake.emit("log-1", {"lines": LINES[4:], "dropped": 0})
        await fake.emit("log-1", {"lines": [], "dropped": 0, "eof": True, "reason": "gone"})
        messages = [json.loads(m) async for m in ws]
    await fake.close()
    got = [line.rsplit(": ", 1)[1] for m in messages for line in m["lines"]]
    assert got == kept
    assert all(m["lines"] for m in messages[:-1])  # an all-filtered batch sends nothing
    assert messages[-1]["eof"] is True


async def test_an_unknown_priority_is_refused(controller: InLoopController) -> None:
    url = controller.ws_url + "/v1/devices/emulator-5554/logcat/stream?priority=X"
    with pytest.raises(Exception):  # noqa: B017 - the handshake is refused, however it says so
        async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S):
            pass


def test_priorities_are_read_from_the_usual_formats() -> None:
    assert line_priority("12-01 10:00:00.000  1000  1100 W ActivityManager: x") == "W"
    assert line_priority("12-01 10:00:00.000 E/Tag( 123): x") == "E"
    assert line_priority("F/libc    ( 4321): Fatal signal 6") == "F"
    assert line_priority("--------- beginning of main") is None
