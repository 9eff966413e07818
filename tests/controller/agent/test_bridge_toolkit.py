"""The agent toolkit on the bridge, end to end: Dispatcher → AdbDevices → the real adb server
→ the simulated device's demo app. Pixel checks on the PNGs; the UI clock is driven by the
test (``ui_sleep``), never the wall clock."""

from __future__ import annotations

from typing import Any

import pytest

from device_bridge.agent import AgentToolkit
from device_bridge.agent.frames import MARK_COLOR, cross_arm
from device_bridge.policy import Policy, PolicyConfig, Profile
from device_bridge.rpc import Dispatcher
from protocol.agent_methods import ActionResult, DeviceStateResult, UiElement
from protocol.errors import ErrorCode, RpcError
from tests.adb_support import ConnectedSim
from tests.controller.agent.support import image, shell_log, toast_shown

pytestmark = pytest.mark.adb

MAIN = "com.droidwire.demo.MainActivity"
SETTINGS = "com.droidwire.demo.SettingsActivity"


async def call(bridge: Dispatcher, sim: ConnectedSim, method: str, **params: Any) -> Any:
    return await bridge(method, {"serial": sim.address, **params})


async def act(bridge: Dispatcher, sim: ConnectedSim, method: str, **params: Any) -> ActionResult:
    return ActionResult.model_validate(await call(bridge, sim, method, **params))


async def elements(bridge: Dispatcher, sim: ConnectedSim) -> list[UiElement]:
    out = await call(bridge, sim, "ui.dump")
    return [UiElement.model_validate(e) for e in out["elements"]]


async def test_state_follows_navigation_with_a_page_trail(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    state = DeviceStateResult.model_validate(await call(bridge, sim, "device.state"))
    assert (state.package, state.activity, state.activity_short) == (
        "com.droidwire.demo", MAIN, "MainActivity")
    assert state.keyboard is False and state.battery == 87 and state.orientation == 0
    assert state.screen is not None and (state.screen.width, state.screen.height) == (1080, 2400)

    tapped = await act(bridge, sim, "ui.tap", text="Settings")
    assert tapped.ok and tapped.target is not None and tapped.target.text == "Settings"
    assert tapped.state is not None and tapped.state.activity == SETTINGS
    back = await act(bridge, sim, "ui.key", key="BACK")
    assert back.command == ["input", "keyevent", "KEYCODE_BACK"]
    assert back.state is not None and back.state.activity == MAIN

    state = DeviceStateResult.model_validate(await call(bridge, sim, "device.state"))
    assert state.recent_activities[-3:] == [MAIN, SETTINGS, MAIN]
    assert len(state.recent_activities) <= 5
    assert state.text.startswith("[Device State] App: com.droidwire.demo Page: MainActivity ")
    assert "MainActivity → SettingsActivity → MainActivity Keyboard: hidden" in state.text


async def test_the_trail_keeps_the_last_five_changes(bridge: Dispatcher, sim: ConnectedSim) -> None:
    for _ in range(4):
        await act(bridge, sim, "ui.tap", text="Settings")
        await act(bridge, sim, "ui.key", key="4")
    state = DeviceStateResult.model_validate(await call(bridge, sim, "device.state"))
    assert state.recent_activities == [MAIN, SETTINGS, MAIN, SETTINGS, MAIN]


async def test_the_trail_sees_pages_visited_between_calls(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    """Navigation by plain shell commands, no state read in between: the event log has it."""
    await call(bridge, sim, "device.state")
    settings = next(e for e in await elements(bridge, sim) if e.text == "Settings")
    x, y = settings.center
    await call(bridge, sim, "device.shell", argv=["input", "tap", str(x), str(y)])
    await call(bridge, sim, "device.shell", argv=["input", "keyevent", "KEYCODE_BACK"])
    state = DeviceStateResult.model_validate(await call(bridge, sim, "device.state"))
    assert state.recent_activities[-3:] == [MAIN, SETTINGS, MAIN]
    again = DeviceStateResult.model_validate(await call(bridge, sim, "device.state"))
    assert again.recent_activities == state.recent_activities  # nothing new, nothing repeated


async def test_ui_dump_parses_the_hierarchy(bridge: Dispatcher, sim: ConnectedSim) -> None:
    found = await elements(bridge, sim)
    assert [e.index for e in found] == list(range(len(found)))
    settings = next(e for e in found if e.text == "Settings")
    assert settings.class_name == "android.widget.Button" and settings.clickable
    assert settings.resource_id == "com.droidwire.demo:id/settings"
    assert settings.desc == "Open settings" and settings.actionable
    left, top, right, bottom = settings.bounds
    assert 0 <= left < right <= 1080 and 0 <= top < bottom <= 2400
    title = next(e for e in found if e.text == "Droidwire Demo")
    assert not title.clickable and not title.actionable


async def test_set_of_marks_crosshairs_at_element_centres(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    found = await elements(bridge, sim)
    plain = image((await call(bridge, sim, "ui.screenshot"))["png"])
    marked = image((await call(bridge, sim, "ui.screenshot", marks=True))["png"])
    assert plain.size == marked.size == (1080, 2400)
    arm, line = cross_arm(*marked.size)
    actionable = [e for e in found if e.actionable]
    assert len(actionable) == 4  # the text field and three buttons
    for e in actionable:
        cx, cy = e.center
        assert plain.getpixel((cx, cy)) != MARK_COLOR
        assert marked.getpixel((cx, cy)) == MARK_COLOR
        for point in ((cx + arm - 1, cy), (cx - arm + 1, cy), (cx, cy + arm - 1), (cx, cy - arm + 1)):
            assert marked.getpixel(point) == MARK_COLOR, (e.index, point)
        # A cross, not a dot: the quadrants between its arms keep the app's pixels.
        for dx, dy in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
            point = (cx + dx * (line + 3), cy + dy * (line + 3))
            assert marked.getpixel(point) == plain.getpixel(point), (e.index, point)
        # The index label sits just outside the cross (upper right), in magenta.
        label = [
            (x, y)
            for x in range(cx + arm, cx + arm + 6 * arm)
            for y in range(cy - 3 * arm, cy - arm)
            if marked.getpixel((x, y)) == MARK_COLOR
        ]
        assert label, f"no index label next to element {e.index}"
    for e in found:
        if not e.actionable and e.bounds[2] > e.bounds[0] and e.text:
            assert marked.getpixel(e.center) != MARK_COLOR


async def test_the_toast_is_in_the_at_action_frame_not_the_settled_one(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    await act(bridge, sim, "ui.tap", text="Settings")
    saved = await act(bridge, sim, "ui.tap", text="Save", settled=True)
    assert saved.ok and saved.settled is True
    assert saved.settled_png is not None and saved.composite_png is not None
    assert toast_shown(saved.at_action_png)
    assert not toast_shown(saved.settled_png)
    both = image(saved.composite_png)
    assert both.width > image(saved.at_action_png).width // 2 * 2
    # Without `settled` there is one frame only.
    quick = await act(bridge, sim, "ui.tap", text="Save")
    assert toast_shown(quick.at_action_png) and quick.settled_png is None


async def test_switch_keyboard_and_text(bridge: Dispatcher, sim: ConnectedSim) -> None:
    field = next(e for e in await elements(bridge, sim) if e.class_name.endswith("EditText"))
    shown = await act(bridge, sim, "ui.tap", index=field.index)
    assert shown.state is not None and shown.state.keyboard
    assert shown.state.text.endswith("Keyboard: shown")
    typed = await act(bridge, sim, "ui.text", text="hello world")
    assert typed.command == ["input", "text", "hello%sworld"]
    field = next(e for e in await elements(bridge, sim) if e.class_name.endswith("EditText"))
    assert field.text == "hello world" and field.focused

    await act(bridge, sim, "ui.key", key="BACK")  # hides the keyboard first
    await act(bridge, sim, "ui.tap", text="Settings")
    await act(bridge, sim, "ui.tap", text="Dark mode")
    switch = next(e for e in await elements(bridge, sim) if e.text == "Dark mode")
    assert switch.checkable and switch.checked


async def test_app_start_and_stop(bridge: Dispatcher, sim: ConnectedSim) -> None:
    stopped = await act(bridge, sim, "app.stop", package="com.droidwire.demo")
    assert stopped.ok and stopped.state is not None
    assert stopped.state.package != "com.droidwire.demo"
    started = await act(bridge, sim, "app.start", package="com.droidwire.demo",
                        activity=".SettingsActivity")
    assert started.command == ["am", "start", "-n", "com.droidwire.demo/.SettingsActivity"]
    assert started.state is not None and started.state.activity == SETTINGS


async def test_policy_refuses_before_anything_is_sent(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    before = len(shell_log(sim))
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.tap", x=5000, y=10)
    assert info.value.code is ErrorCode.FORBIDDEN and info.value.data["rule"] == "outside_screen"
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "app.start", package="com.android.chrome")
    assert info.value.data["rule"] == "package_scope"
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.text", text="a;reboot")
    assert info.value.data["rule"] == "metacharacter"
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.tap", text="No such button")
    assert info.value.code is ErrorCode.NOT_FOUND
    sent = shell_log(sim)[before:]
    assert not any(line.startswith(("input", "am start")) for line in sent), sent

    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.tap", index=1, x=3)
    assert info.value.code is ErrorCode.BAD_REQUEST


async def test_instrument_only_has_no_ui(adb: Any, sim: ConnectedSim) -> None:
    locked = Dispatcher(policy=Policy(PolicyConfig(profile=Profile.INSTRUMENT_ONLY)), devices=adb)
    AgentToolkit.install(locked)
    for method, params in (("device.state", {}), ("ui.dump", {}), ("ui.key", {"key": "BACK"}),
                           ("ui.screenshot", {"marks": True})):
        with pytest.raises(RpcError) as info:
            await locked(method, {"serial": sim.address, **params})
        assert info.value.data["rule"] == "ui_not_allowed"


async def test_check_is_a_dry_run(bridge: Dispatcher, sim: ConnectedSim) -> None:
    await call(bridge, sim, "device.state")  # the screen size is known from here on
    before = len(shell_log(sim))
    out = await call(bridge, sim, "agent.check", steps=[
        {"method": "ui.tap", "params": {"text": "Settings"}},
        {"method": "ui.key", "params": {"key": "HOME"}},
        {"method": "ui.tap", "params": {"x": 99999, "y": 1}},
        {"method": "device.shell", "params": {"argv": ["reboot"]}},
        {"method": "device.shell", "params": {"command": "dumpsys battery"}},
        {"method": "ui.text", "params": {"text": "x" * 501}},
    ])
    assert out["ok"] is False
    results = out["results"]
    assert [r["ok"] for r in results] == [True, True, False, False, True, False]
    assert results[1]["command"] == ["input", "keyevent", "KEYCODE_HOME"]
    assert results[2]["rule"] == "outside_screen" and results[3]["rule"] == "reboot"
    assert results[5]["code"] == "bad_request"
    assert shell_log(sim)[before:] == []


async def test_swipe_reaches_the_device_within_bounds(
    bridge: Dispatcher, sim: ConnectedSim
) -> None:
    swiped = await act(bridge, sim, "ui.swipe", x1=540, y1=1800, x2=540, y2=600, duration_ms=200)
    assert swiped.ok and swiped.command == ["input", "swipe", "540", "1800", "540", "600", "200"]
    kind, args = sim.call(lambda: sim.device.input_log[-1])
    assert kind == "swipe" and (args["y1"], args["y2"], args["ms"]) == (1800.0, 600.0, 200)
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.swipe", x1=1, y1=1, x2=1, y2=1, duration_ms=10_001)
    assert info.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(RpcError) as info:
        await call(bridge, sim, "ui.swipe", x1=1, y1=1, x2=1, y2=2400)
    assert info.value.data["rule"] == "outside_screen"
