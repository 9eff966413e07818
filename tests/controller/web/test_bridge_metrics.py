"""The bridge's own metrics on its optional local port (``device_bridge/metrics.py``, and
``droidwire bridge --metrics-port``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from device_bridge.metrics import serve_metrics
from tests.adb_support import free_port
from tests.conftest import TIME_SCALE
from tests.controller.web.conftest import WAIT_S, Stack


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.adb
@pytest.mark.asyncio(loop_scope="package")
async def test_a_connected_bridge_reports_its_link_and_devices(stack: Stack) -> None:
    server = await asyncio.to_thread(serve_metrics, stack.bridge, 0)
    try:
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            response = await client.get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        await asyncio.to_thread(server.close)
    assert response.status_code == 200
    found = values(response.text)
    assert found[("droidwire_bridge_link_open", ())] == 1
    assert found[("droidwire_bridge_link_connections_total", ())] == 1
    assert found[("droidwire_bridge_reconnects_total", ())] == 0
    assert found[("droidwire_bridge_devices", (("state", "device"),))] == 1
    assert found[("droidwire_bridge_sharing_paused", ())] == 0
    assert stack.serial not in response.text and stack.bridge_token not in response.text


async def _metrics_text(port: int) -> str:
    """The endpoint's text once it answers (the process is starting: bounded retries on a
    refused connection, which is the condition being waited for)."""
    async with httpx.AsyncClient(timeout=WAIT_S) as client, asyncio.timeout(WAIT_S):
        while True:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.ConnectError:
                await asyncio.sleep(0.05 * TIME_SCALE)
                continue
            return response.text


async def test_the_metrics_port_flag_serves_while_the_bridge_dials() -> None:
    port = free_port()
    with socket.socket() as closed:  # a controller address where nobody listens
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from droidwire import main; main()", "bridge",
        "--controller", f"ws://127.0.0.1:{nobody}", "--token", "dw_b_unused",
        "--no-start-adb", "--adb-port", str(free_port()), "--reconnect-budget", "3600",
        "--backoff-first-max", "0.05", "--backoff-base", "0.05", "--backoff-cap", "0.2",
        "--metrics-port", str(port), "--log-level", "warning",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        text = await _metrics_text(port)
        found = values(text)
        assert found[("droidwire_bridge_link_open", ())] == 0
        assert found[("droidwire_bridge_link_connections_total", ())] == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), WAIT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    # The port is closed with the bridge.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
