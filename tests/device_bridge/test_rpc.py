"""RPC handlers (device_bridge.rpc) through the real adb server to the simulated device.

Fixtures ``adb_server`` / ``sim_device`` come from ``tests/adb_support.py``. The dispatcher is
called as the link calls it (``await dispatcher(method, params)``); streams go to a recording
sink with the link's ``emit`` contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.policy import Policy, PolicyConfig, Profile
from device_bridge.rpc import DEVICE_METHODS, Dispatcher, StreamStats
from device_bridge.sim.apk import SimPackage, build_apk
from protocol import METHODS, DeviceInfo, ErrorCode, RpcError, parse_log_batch
from protocol.methods import PING, Empty, Method, PingParams, PingResult, validate_result
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE

pytestmark = pytest.mark.adb

WAIT = 20.0 * TIME_SCALE


class Sink:
    """Records ``evt`` batches per channel, like the link's ``emit`` (always open here)."""

    def __init__(self) -> None:
        self.events: dict[str, list[Any]] = {}
        self.changed = asyncio.Event()
        self.open = True

    async def emit(self, ch: str, d: Any) -> bool:
        if not self.open:
            return False
        self.events.setdefault(ch, []).append(d)
        self.changed.set()
        return True

    async def wait_for(self, ch: str, predicate: Any, limit_s: float = WAIT) -> list[Any]:
        async with asyncio.timeout(limit_s):
            while not predicate(self.events.get(ch, [])):
                self.changed.clear()
                await self.changed.wait()
        return self.events[ch]


@pytest.fixture
async def devices(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.025)
    try:
        yield layer
    finally:
        await layer.aclose()


def make(devices: AdbDevices, config: PolicyConfig | None = None, **kwargs: Any) -> Dispatcher:
    return Dispatcher(policy=Policy(config or PolicyConfig()), devices=devices, **kwargs)


async def refused(dispatcher: Dispatcher, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as info:
        await dispatcher(method, params)
    return info.value


async def test_shell_through_adb(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    d = make(devices)
    serial = sim_device.address
    out = await d("device.shell", {"serial": serial, "argv": ["echo", "hello", "world"]})
    validate_result("device.shell", out)
    assert out["exit_code"] == 0 and out["stdout"] == "hello world\n"
    out = await d("device.shell", {"serial": serial, "command": "getprop ro.product.model"})
    assert out["stdout"].strip() == sim_device.device.profile.model


async def test_policy_refusal_names_the_rule(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    d = make(devices)
    serial = sim_device.address
    err = await refused(d, "device.shell", {"serial": serial, "command": "echo hi; reboot"})
    assert err.code is ErrorCode.FORBIDDEN and err.data and err.data["rule"] == "metacharacter"
    err = await refused(d, "device.shell", {"serial": serial, "argv": ["reboot"]})
    assert err.code is ErrorCode.FORBIDDEN and err.data and err.data["rule"] == "reboot"
    err = await refused(d, "device.push", {"serial": serial, "path": "/sdcard/x", "data": b""})
    assert err.code is ErrorCode.FORBIDDEN
    assert err.data and err.data["rule"] == "path_outside_workspace"


async def test_exposure_and_pause_come_before_anything_else(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    serial = sim_device.address
    hidden = make(devices, PolicyConfig(hide=frozenset({serial})))
    # even with malformed params, a hidden device is simply not there
    err = await refused(hidden, "device.shell", {"serial": serial, "argv": 5})
    assert err.code is ErrorCode.NOT_FOUND and err.data == {"rule": "not_exposed"}
    paused = make(devices, PolicyConfig(paused=True))
    err = await refused(paused, "device.screenshot", {"serial": serial})
    assert err.code is ErrorCode.FORBIDDEN and err.data == {"rule": "paused"}


async def test_params_are_validated(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    d = make(devices)
    err = await refused(d, "device.shell", {"serial": sim_device.address, "argv": ["echo"], "x": 1})
    assert err.code is ErrorCode.BAD_REQUEST and err.data and err.data["errors"]
    err = await refused(d, "device.launch_missiles", {})
    assert err.code is ErrorCode.BAD_REQUEST and err.data == {"reason": "unknown_method"}


async def test_profile_governs_every_kind(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    serial = sim_device.address
    d = make(devices, PolicyConfig(devices={serial: Profile.INSTRUMENT_ONLY}))
    err = await refused(d, "device.shell", {"serial": serial, "argv": ["echo", "x"]})
    assert err.data and err.data["rule"] == "shell_not_allowed"
    err = await refused(d, "device.screenshot", {"serial": serial})
    assert err.data and err.data["rule"] == "screenshot_not_allowed"
    err = await refused(d, "device.logcat.dump", {"serial": serial})
    assert err.data and err.data["rule"] == "logcat_scope"
    err = await refused(d, "device.push", {"serial": serial, "path": "/data/local/tmp/x"})
    assert err.code is ErrorCode.BAD_REQUEST or (err.data and err.data["rule"])
    assert await d("device.logcat.clear", {"serial": serial}) == {}  # a run starts with it


async def test_adb_errors_are_typed(devices: AdbDevices, adb_server: AdbServer) -> None:
    d = make(devices)
    err = await refused(d, "device.shell", {"serial": "127.0.0.1:1", "argv": ["echo", "x"]})
    assert err.code in (ErrorCode.NOT_FOUND, ErrorCode.DEVICE_OFFLINE)


async def test_screenshot_pull_and_push(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    d = make(devices)
    serial = sim_device.address
    shot = await d("device.screenshot", {"serial": serial})
    assert shot["png"].startswith(b"\x89PNG")
    path = "/data/local/tmp/droidwire/note.txt"
    assert (await d("device.push", {"serial": serial, "path": path, "data": b"hi"}))["size"] == 2
    assert (await d("device.pull", {"serial": serial, "path": path}))["data"] == b"hi"


async def test_installed_packages_are_tracked_allowed_and_cleaned_up(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    d = make(devices)
    serial = sim_device.address
    pkg = "com.example.tracked"
    stop = {"serial": serial, "argv": ["am", "force-stop", pkg]}
    err = await refused(d, "device.shell", stop)
    assert err.data and err.data["rule"] == "package_scope"
    apk = build_apk(SimPackage(package=pkg, kind="app"))
    assert (await d("device.install", {"serial": serial, "apk": apk}))["package"] == pkg
    assert d.installed[serial] == {pkg}
    assert (await d("device.shell", stop))["exit_code"] == 0  # now ours: allowed
    err = await refused(d, "device.install", {"serial": serial, "path": "/etc/passwd"})
    assert err.code is ErrorCode.FORBIDDEN
    assert await d.cleanup() == [f"{serial}:{pkg}"]
    listed = await asyncio.to_thread(sim_device.adb.shell, "pm list packages")
    assert pkg not in listed
    err = await refused(d, "device.shell", stop)  # no longer ours
    assert err.data and err.data["rule"] == "package_scope"


async def test_logcat_subscription_streams_batches(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    sink = Sink()
    d = make(devices, sink=sink, batch_lines=100, flush_s=0.025)
    serial = sim_device.address
    await d("device.logcat.clear", {"serial": serial})
    ch = (await d("device.logcat.subscribe", {"serial": serial}))["channel"]
    assert ch in d.subscriptions
    count = 1000
    await asyncio.to_thread(sim_device.run, lambda: sim_device.device.log_burst(count, tag="Burst"))

    def burst_lines(batches: list[Any]) -> list[str]:
        return [ln for b in batches for ln in parse_log_batch(b).lines if " Burst" in ln]

    batches = await sink.wait_for(ch, lambda bs: len(burst_lines(bs)) >= count)
    lines = burst_lines(batches)
    assert [ln.rsplit("line ", 1)[1] for ln in lines] == [str(i) for i in range(count)]
    assert all(len(parse_log_batch(b).lines) <= 100 for b in batches)
    assert len(batches) < count / 10  # batched, never a frame per line
    assert sum(parse_log_batch(b).dropped for b in batches) == 0
    await d("device.logcat.unsubscribe", {"channel": ch})
    last = parse_log_batch(sink.events[ch][-1])
    assert last.eof and last.reason == "unsubscribed"
    assert d.subscriptions == []
    await d("device.logcat.unsubscribe", {"channel": ch})  # idempotent


async def test_streams_end_when_the_link_drops(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    sink = Sink()
    d = make(devices, sink=sink)
    await d("device.logcat.subscribe", {"serial": sim_device.address})
    await d.end_streams()
    assert d.subscriptions == []


async def test_logcat_dump(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    d = make(devices)
    serial = sim_device.address
    await d("device.logcat.clear", {"serial": serial})
    await asyncio.to_thread(sim_device.run, lambda: sim_device.device.log_burst(5, tag="Dump"))
    out = await d("device.logcat.dump", {"serial": serial, "lines": 100})
    assert sum(" Dump" in ln for ln in out["lines"]) == 5


async def test_inventory_methods_and_capabilities(devices: AdbDevices) -> None:
    info = DeviceInfo(serial="127.0.0.1:5555", state="device", model="Pixel 7")
    d = make(
        devices,
        inventory=lambda: [info],
        info=lambda: {"software": "1.0", "session": "s"},
    )
    listed = await d("devices.list", {})
    assert listed == {"devices": [info.model_dump(mode="json", exclude_none=True)]}
    about = await d("bridge.info", {})
    validate_result("bridge.info", about)
    assert about["software"] == "1.0" and about["caps"]["devices"] is True
    assert (await d("ping", {"payload": b"x"})) == {"payload": b"x"}
    methods = set(d.methods())
    assert DEVICE_METHODS <= methods and "workspace.compile" not in methods  # no build here
    err = await refused(d, "workspace.compile", {"test_code": "class T"})
    assert err.code is ErrorCode.UNAVAILABLE
    assert "workspace.compile" not in methods and "source.lookup" not in methods
    assert methods <= set(METHODS)

    async def extra(params: dict[str, Any]) -> dict[str, Any]:
        return {"devices": []}

    served = set(d.methods())
    spare = next((m for m in METHODS if m not in served and METHODS[m].capability != "build"), None)
    if spare is not None:  # another toolkit's method plugs in and is then advertised
        d.add(METHODS[spare], extra)
        assert spare in d.methods()
    with pytest.raises(ValueError):  # a descriptor the registry does not hold
        d.add(Method("no.such.method", Empty, Empty), extra)
    with pytest.raises(ValueError):  # served already
        d.add(PING, extra)


async def test_a_typed_handler_gets_its_params_model_and_bad_params_are_bad_requests() -> None:
    d = Dispatcher(policy=Policy(PolicyConfig()))
    seen: list[PingParams] = []

    async def echo(p: PingParams) -> PingResult:
        seen.append(p)
        return PingResult(payload=p.payload[::-1])

    d.serve(PING, echo, replace=True)
    assert await d("ping", {"payload": b"abc"}) == {"payload": b"cba"}
    assert seen == [PingParams(payload=b"abc")]
    assert d.immediate("ping") is None  # a handler that may wait is never run inline
    with pytest.raises(RpcError) as bad:
        await d("ping", {"payload": 5})
    assert bad.value.code is ErrorCode.BAD_REQUEST and len(seen) == 1


async def test_immediate_handlers_answer_as_the_awaited_ones_do() -> None:
    # The handlers the link may run without a task (Dispatcher.immediate) give the same
    # results and the same typed errors as the ordinary call, and stop being immediate when
    # another handler replaces them.
    info = DeviceInfo(serial="127.0.0.1:5555", state="device")
    d = Dispatcher(
        policy=Policy(PolicyConfig()), inventory=lambda: [info], info=lambda: {"software": "1"}
    )
    ping = d.immediate("ping")
    assert ping is not None
    assert ping({"payload": b"x"}) == await d("ping", {"payload": b"x"}) == {"payload": b"x"}
    with pytest.raises(RpcError) as now:
        ping({"payload": 3})
    err = await refused(d, "ping", {"payload": 3})
    assert now.value.code is err.code is ErrorCode.BAD_REQUEST
    assert now.value.data == err.data
    about = d.immediate("bridge.info")
    assert about is not None and about({}) == await d("bridge.info", {})
    listing = d.immediate("devices.list")
    assert listing is not None  # this bridge serves no devices: unavailable, both ways
    with pytest.raises(RpcError) as now:
        listing({})
    assert now.value.code is (await refused(d, "devices.list", {})).code
    assert now.value.code is ErrorCode.UNAVAILABLE
    assert d.immediate("device.shell") is None and d.immediate("no.such") is None

    async def waits(params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"payload": b"replaced"}

    d.add(PING, waits, replace=True)
    assert d.immediate("ping") is None
    assert await d("ping", {"payload": b"x"}) == {"payload": b"replaced"}



async def test_a_bridge_without_devices_gives_its_toolkits_the_same_unavailable() -> None:
    # The adb layer has one home (Dispatcher.adb): the toolkits reach it there, also when
    # called directly rather than through the dispatcher (the agent's planner calls
    # AgentToolkit.state), and a build-only bridge answers them alike.
    from device_bridge.agent import AgentToolkit

    d = Dispatcher(policy=Policy(PolicyConfig()))
    errors = []
    with pytest.raises(RpcError) as direct:
        d.adb()
    errors.append(direct.value)
    with pytest.raises(RpcError) as planner:
        await AgentToolkit.install(d).state("emulator-5554")
    errors.append(planner.value)
    errors.append(await refused(d, "devices.list", {}))
    assert {(e.code, e.message) for e in errors} == {
        (ErrorCode.UNAVAILABLE, "this bridge serves no devices")
    }

class SlowSink(Sink):
    """A consumer that, once ``block()``-ed, stays away until ``release`` is set (a link whose
    send queue is full)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.release.set()

    def block(self) -> None:
        self.release.clear()

    async def emit(self, ch: str, d: Any) -> bool:
        await self.release.wait()
        return await super().emit(ch, d)


def has_line(tag: str) -> Any:
    return lambda bs: any(f" {tag}" in ln for b in bs for ln in parse_log_batch(b).lines)


async def _burst_at_a_stalled_link(
    adb_server: AdbServer, sim_device: ConnectedSim, *, stall_s: float | None
) -> tuple[list[int], int, int, StreamStats]:
    """3,000 lines logged while the link's sink is blocked: released as soon as the pump
    holds the device back, or — when the device layer may drop (``stall_s``) — only once it
    has dropped lines. Returns the burst's line numbers received, the ``dropped`` total, how
    many end markers were logged (one that lands in a drop is followed by another), the
    stats."""
    layer = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, stall_s=stall_s)
    try:
        sink = SlowSink()
        d = make(layer, sink=sink, batch_lines=50, stream_max_lines=100, queue_batches=4)
        serial = sim_device.address
        await d("device.logcat.clear", {"serial": serial})
        ch = (await d("device.logcat.subscribe", {"serial": serial}))["channel"]
        # the stream is flowing end to end before the consumer goes away
        await asyncio.to_thread(sim_device.run, lambda: sim_device.device.log_burst(1, tag="Start"))
        await sink.wait_for(ch, has_line("Start"))
        sink.block()
        stats = d.stream_stats(ch)
        assert stats is not None
        count = 3000
        burst = asyncio.create_task(
            asyncio.to_thread(
                sim_device.run, lambda: sim_device.device.log_burst(count, tag="Burst")
            )
        )
        async with asyncio.timeout(WAIT):
            await stats.overflowed.wait()  # the device ran ahead of the stalled link: held back
            if stall_s is not None:
                stream = d.logcat.subs[ch].stream
                while stream.dropped == 0:  # noqa: ASYNC110 - the reader thread's counter
                    await asyncio.sleep(0.01)
        sink.release.set()
        await burst
        # one more line after the burst: a gap at the very end is reported with it (on a
        # starved host the marker itself may land in a drop: then log another)
        ends = 0
        while True:
            ends += 1
            await asyncio.to_thread(
                sim_device.run, lambda: sim_device.device.log_burst(1, tag="End")
            )
            try:
                batches = await sink.wait_for(ch, has_line("End"), limit_s=2.0 * TIME_SCALE)
                break
            except TimeoutError:
                assert ends < 10, "no end marker arrived"
        parsed = [parse_log_batch(b) for b in batches]
        got = [
            int(ln.split("line ")[1].split()[0]) for p in parsed for ln in p.lines if " Burst" in ln
        ]
        assert got == sorted(got) and len(set(got)) == len(got)  # in order, no duplicate
        assert all(len(p.lines) <= 50 for p in parsed)
        await d.end_streams()
        return got, sum(p.dropped for p in parsed), ends, stats
    finally:
        await layer.aclose()


async def test_a_link_briefly_behind_holds_the_device_back_and_loses_nothing(
    adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    # The device layer never drops here, so any loss would be the pump's own (it dropped
    # whole batches when its queue was full).
    got, dropped, _, stats = await _burst_at_a_stalled_link(adb_server, sim_device, stall_s=None)
    assert (dropped, stats.dropped_lines) == (0, 0)
    assert got == list(range(len(got))) and len(got) == 3000


async def test_a_link_away_too_long_gets_a_dropped_marker_not_silent_loss(
    adb_server: AdbServer, sim_device: ConnectedSim
) -> None:
    got, dropped, ends, stats = await _burst_at_a_stalled_link(
        adb_server, sim_device, stall_s=0.2 * TIME_SCALE
    )
    assert dropped > 0  # the buffers are bounded: lines were dropped …
    # … and every one of them was counted (end markers that landed in a drop too)
    assert 3000 <= len(got) + dropped <= 3000 + ends - 1
    assert stats.dropped_lines == dropped


async def test_compile_and_source_lookup_on_the_demo_project(tmp_path: Any) -> None:
    from device_bridge.build import BuildService
    from device_bridge.sim.toolchain import SimulatedToolchain
    from device_bridge.workspace import ProjectRegistry, WorkspaceManager
    from tests.device_bridge.test_build import NO_SDK, kotlin_test

    manager = WorkspaceManager(ProjectRegistry.from_config(), state_dir=tmp_path / "state")
    build = BuildService(manager, host=NO_SDK, simulated=SimulatedToolchain(), prefer="simulated")
    d = Dispatcher(policy=Policy(), build=build)
    try:
        caps = d.capabilities()
        assert caps.build and caps.toolchain == "simulated" and not caps.devices
        assert {"workspace.compile", "source.lookup"} <= set(caps.methods)
        assert not DEVICE_METHODS & set(caps.methods)  # no adb layer: no device methods
        out = await d("workspace.compile", {"test_code": kotlin_test("FormatTitleTest")})
        validate_result("workspace.compile", out)
        assert out["ok"] and out["toolchain"] == "simulated"
        assert {apk["role"] for apk in out["apks"]} == {"app", "test"}
        found = await d("source.lookup", {"names": ["loadSettingsFromDisk"]})
        validate_result("source.lookup", found)
        (method,) = found["methods"]
        assert method["owner"].endswith("MainActivity") and method["line"] > 0
        assert "fun loadSettingsFromDisk" in method["text"]
        err = await refused(d, "source.lookup", {"project": "nope", "names": ["x"]})
        assert err.code is ErrorCode.NOT_FOUND
        err = await refused(d, "device.shell", {"serial": "x", "argv": ["echo"]})
        assert err.code is ErrorCode.UNAVAILABLE
    finally:
        await manager.stop()


async def test_pausing_ends_live_streams(devices: AdbDevices, sim_device: ConnectedSim) -> None:
    sink = Sink()
    d = make(devices, sink=sink)
    serial = sim_device.address
    ch = (await d("device.logcat.subscribe", {"serial": serial, "tail": 1}))["channel"]
    d.policy.pause()
    await asyncio.to_thread(sim_device.run, lambda: sim_device.device.log_burst(1, tag="After"))
    batches = await sink.wait_for(ch, lambda bs: any(parse_log_batch(b).eof for b in bs))
    last = parse_log_batch(batches[-1])
    assert last.eof and last.reason == "paused" and last.lines == []
    assert not any(" After" in ln for b in batches for ln in parse_log_batch(b).lines)
    err = await refused(d, "device.logcat.subscribe", {"serial": serial})
    assert err.data == {"rule": "paused"}


async def test_instrument_a_package_installed_through_the_bridge(
    devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    from device_bridge.sim.apk import SimTest

    d = make(devices)
    serial = sim_device.address
    app = SimPackage(package="com.example.app", kind="app")
    test = SimPackage(
        package="com.example.app.test",
        kind="test",
        target_package="com.example.app",
        tests=[SimTest(class_name="com.example.app.ExampleTest", method="works")],
    )
    params = {"serial": serial, "package": test.package}
    err = await refused(d, "device.instrument", params)
    assert err.data and err.data["rule"] == "package_scope"  # not ours (yet)
    for pkg in (app, test):
        await d("device.install", {"serial": serial, "apk": build_apk(pkg)})
    out = await d("device.instrument", params)
    validate_result("device.instrument", out)
    assert "INSTRUMENTATION_STATUS_CODE" in out["output"]
    assert "com.example.app.ExampleTest" in out["output"]
    await d("device.uninstall", {"serial": serial, "package": test.package})
    assert d.installed[serial] == {app.package}
    assert await d.cleanup() == [f"{serial}:{app.package}"]
