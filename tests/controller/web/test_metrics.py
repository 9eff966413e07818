"""``/metrics`` after real activity (a bridge, a device, runs, shell calls, a live stream):
the issue's names are there, and no label carries a serial, a name or a secret."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.metrics import Metrics
from controller.store import Run, RunStep, Store
from protocol.envelope import DeviceInfo
from tests.controller.web.conftest import Stack


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


@pytest.mark.adb
@pytest.mark.asyncio(loop_scope="package")
async def test_metrics_after_activity_name_no_serial(stack: Stack) -> None:
    async with stack.api("olivia") as api:
        shell = await api.post(f"/v1/devices/{stack.device_id}/shell", json={"argv": ["echo"]})
        assert shell.status_code == 200
    async with stack.client() as anonymous:  # /metrics needs no token (docs/design.md §6)
        response = await anonymous.get("/metrics")
    assert response.status_code == 200
    text = response.text
    found = samples(text)
    names = {name for name, _ in found}

    # Connected bridges, devices by state, reconnects.
    assert value(found, "droidwire_bridges", state="connected") == 1
    assert value(found, "droidwire_bridges", state="disconnected") == 0
    assert value(found, "droidwire_bridges_connected") == 1
    assert value(found, "droidwire_devices", state="device") == 1
    assert value(found, "droidwire_bridge_reconnects_total") == 0
    assert value(found, "droidwire_bridge_connections_total") >= 1
    # RPC latency histograms by method.
    assert value(found, "droidwire_rpc_duration_seconds_count", method="device.shell") >= 1
    assert value(found, "droidwire_rpc_duration_seconds_count", method="workspace.compile") >= 2
    assert ("droidwire_rpc_duration_seconds_bucket",
            (("le", "+Inf"), ("method", "device.instrument"))) in found
    # Runs by verdict, and the queue.
    assert value(found, "droidwire_sandbox_runs_total", verdict="CONFIRMED",
                 reason_code="strict_mode_violation") >= 1
    assert value(found, "droidwire_sandbox_runs_total", verdict="PENDING",
                 reason_code="no_device") >= 1
    assert value(found, "droidwire_runs", status="finished") >= 2
    assert value(found, "droidwire_run_queue_depth") == 0
    assert value(found, "droidwire_rpc_pending") == 0
    assert all(n.startswith("droidwire_") for n in names)

    # No serial, name or secret in any label value, nor anywhere in the text.
    secrets = [stack.bridge_token, *stack.tokens.values()]
    identities = [stack.serial, stack.serial.split(":")[-1], "desk", "olivia", "bob", "sam"]
    for (_, labels) in found:
        for _, label_value in labels:
            assert not any(x in label_value for x in identities), labels
    assert not any(x in text for x in [*secrets, stack.serial, stack.device_id])


class _Session:
    pending_count = 2


def _entry(state: str, devices: dict[str, str], connections: int, streams: int = 0) -> Any:
    infos = {s: DeviceInfo(serial=s, state=st) for s, st in devices.items()}
    return SimpleNamespace(id=state, state=state, connections=connections, session=_Session(),
                           live_devices=lambda: infos,
                           subscriptions={object() for _ in range(streams)})


async def test_state_is_read_at_scrape_time_and_labels_stay_in_a_vocabulary(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    await store.migrate()
    try:
        async with store.session() as session, session.begin():
            waiting = Run(status="running")
            session.add_all([Run(status="queued"), Run(status="finished", verdict="REFUTED"),
                             waiting])
            await session.flush()
            session.add(RunStep(run_id=waiting.id, seq=0, kind="device_busy", status="running"))
        hub = SimpleNamespace(entries=lambda: [
            _entry("connected", {"emulator-5554": "device",
                                 "evil\"}serial-123": "<script>", "R58M": "unauthorized"}, 3,
                   streams=2),
            _entry("reconnecting", {}, 1),
        ])
        metrics = Metrics()
        await metrics.refresh(SimpleNamespace(services=SimpleNamespace(hub=hub, store=store)))
        text = metrics.render().decode()
    finally:
        await store.close()
    found = samples(text)
    assert value(found, "droidwire_bridges", state="connected") == 1
    assert value(found, "droidwire_bridges", state="reconnecting") == 1
    assert value(found, "droidwire_devices", state="device") == 1
    assert value(found, "droidwire_devices", state="unauthorized") == 1
    assert value(found, "droidwire_devices", state="other") == 1  # not the bridge's text
    assert value(found, "droidwire_bridge_reconnects_total") == 2
    assert value(found, "droidwire_rpc_pending") == 4
    assert value(found, "droidwire_logcat_streams", kind="local") == 2
    assert value(found, "droidwire_logcat_streams", kind="relayed") == 0  # no cluster
    assert value(found, "droidwire_runs", status="queued") == 1
    assert value(found, "droidwire_runs", status="running") == 1
    assert value(found, "droidwire_run_queue_depth") == 2  # one queued, one waiting its device
    assert "serial" not in text and "<script>" not in text and "5554" not in text


async def test_a_failing_store_keeps_the_scrape_alive() -> None:
    class Broken:
        def session(self) -> Any:
            raise OSError("database down")

    metrics = Metrics()
    await metrics.refresh(SimpleNamespace(services=SimpleNamespace(hub=None, store=Broken())))
    assert b"droidwire_run_queue_depth 0.0" in metrics.render()
