"""Pure parts of the agent toolkit: dumpsys and uiautomator parsing across Android versions,
the trail, the settle loop's cap (with a fake device layer and a virtual clock), plan models."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from controller.agent import Check, Plan, PlanError, PlanStep, evaluate, parse_plan, step_call
from device_bridge.agent import ActivityTrail, AgentSettings, AgentToolkit, same_frame
from device_bridge.agent.state import (
    parse_battery,
    parse_focus,
    parse_keyboard,
    parse_rotation,
    state_text,
)
from device_bridge.agent.uitree import extract_xml, find, parse_ui
from protocol.agent_methods import UI_KEY
from protocol.errors import ErrorCode, RpcError
from protocol.methods import SHELL


@pytest.mark.parametrize(
    ("activities", "window", "expected"),
    [
        ("  mResumedActivity: ActivityRecord{3a1 u0 com.a/.Main t5}\n", "", "com.a.Main"),
        ("    ResumedActivity: ActivityRecord{3a1 u0 com.a/com.a.ui.Home t5}", "", "com.a.ui.Home"),
        ("  topResumedActivity=ActivityRecord{9f u0 com.b/.Settings$Inner t9}", "",
         "com.b.Settings$Inner"),
        ("", "  mCurrentFocus=Window{1c u0 com.c/com.c.Login}", "com.c.Login"),
        ("", "  mFocusedApp=ActivityRecord{77 u0 com.d/.X t3}", "com.d.X"),
    ],
)
def test_focus_from_several_android_versions(activities: str, window: str, expected: str) -> None:
    focus = parse_focus(activities, window)
    assert focus is not None and focus.activity == expected
    assert focus.short == expected.rsplit(".", 1)[-1]


def test_no_focus_keyboard_rotation_battery() -> None:
    assert parse_focus("nothing here", "mCurrentFocus=null") is None
    assert parse_keyboard("  mInputShown=true\n") is True
    assert parse_keyboard("  mInputShown=false\n", "mInputMethodWindow=Window{1 u0 IME}") is False
    assert parse_keyboard("", "  mInputMethodWindow=Window{1 u0 InputMethod}") is True
    assert parse_keyboard("", "  mInputMethodWindow=null") is False
    assert parse_rotation("mCurrentRotation=ROTATION_90") == 1
    assert parse_rotation("  mRotation=3 mAltOrientation=false") == 3
    assert parse_rotation("") == 0
    assert parse_battery("  level: 42\n  scale: 100") == 42 and parse_battery("") is None
    assert state_text(None, [], keyboard=False) == (
        "[Device State] App: unknown Page: unknown Recent pages: none Keyboard: hidden")


def test_the_trail_drops_repeats_and_keeps_five() -> None:
    trail = ActivityTrail()
    for a in ["A", "A", "B", None, "C", "D", "E", "F"]:
        trail.observe("s", a)
    assert trail.get("s") == ["B", "C", "D", "E", "F"]
    assert trail.get("other") == []


XML = (
    "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
    '<node index="0" text="" class="android.widget.FrameLayout" bounds="[0,0][100,200]">'
    '<node text="OK" resource-id="a:id/ok" class="android.widget.Button" clickable="true" '
    'bounds="[10,20][30,40]" content-desc="" package="a" checkable="false" />'
    '<node text="Wi-Fi" class="android.widget.Switch" checkable="true" checked="true" '
    'bounds="[0,50][100,60]" />'
    '<node text="gone" class="android.view.View" clickable="true" bounds="[5,5][5,5]" />'
    "</node></hierarchy>"
)


def test_ui_dump_parsing_and_lookup() -> None:
    elements = parse_ui(extract_xml(XML + "UI hierchary dumped to: /dev/tty\n"))
    assert [e.index for e in elements] == [0, 1, 2, 3]
    ok, wifi, gone = elements[1], elements[2], elements[3]
    assert ok.bounds == (10, 20, 30, 40) and ok.center == (20, 30) and ok.actionable
    assert wifi.checkable and wifi.checked and wifi.actionable and not wifi.clickable
    assert not gone.actionable  # zero-sized: nothing to mark or tap
    assert find(elements, text="ok") == ok and find(elements, text="wi") == wifi
    assert find(elements, resource_id="ok") == ok and find(elements, desc="x") is None


@pytest.mark.parametrize("bad", [
    "no xml at all",
    "<hierarchy><node></hierarchy>",
    '<!DOCTYPE x [<!ENTITY a "aaaa">]><hierarchy><node text="&a;"/></hierarchy>',
])
def test_bad_dumps_are_typed_errors(bad: str) -> None:
    with pytest.raises(RpcError) as info:
        parse_ui(extract_xml(bad))
    assert info.value.code is ErrorCode.UNAVAILABLE


def png(color: tuple[int, int, int], size: tuple[int, int] = (120, 240)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_same_frame_ignores_the_status_bar_and_noise() -> None:
    base = Image.new("RGB", (120, 240), (200, 200, 200))
    clock = base.copy()
    clock.paste((0, 0, 0), (0, 0, 120, 5))  # the status bar changed (a clock tick)
    toast = base.copy()
    toast.paste((50, 50, 50), (20, 150, 100, 180))

    def enc(img: Image.Image) -> bytes:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        return buf.getvalue()

    assert same_frame(enc(base), enc(clock))
    assert not same_frame(enc(base), enc(toast))
    assert not same_frame(png((1, 1, 1)), png((1, 1, 1), (240, 120)))


class FlickeringDevices:
    """A device layer whose screen changes on every screenshot (an animation that never ends)."""

    def __init__(self) -> None:
        self.shots = 0

    async def screenshot(self, serial: str) -> bytes:
        self.shots += 1
        return png((self.shots * 40 % 256, 0, 0))


class FakeRpc:
    def __init__(self) -> None:
        self.devices: Any = FlickeringDevices()

    def adb(self) -> Any:  # the dispatcher's device layer (Dispatcher.adb)
        return self.devices


async def test_the_settled_wait_stops_at_its_cap() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    settings = AgentSettings(settle_poll_s=0.5, settle_timeout_s=2.0, settle_quiet_s=1.0)
    toolkit = AgentToolkit(FakeRpc(), settings=settings, sleep=sleep)  # type: ignore[arg-type]
    frames = await toolkit.evidence("s", settled=True)
    assert frames["settled"] is False
    assert slept == [0.35, 0.5, 0.5, 0.5, 0.5]  # at-action delay, then polls up to the cap
    assert frames["settled_png"] != frames["at_action_png"]
    assert frames["composite_png"].startswith(b"\x89PNG")
    quick = await toolkit.evidence("s", settled=False)
    assert set(quick) == {"at_action_png"}


def test_plan_models_refuse_incomplete_or_unknown_steps() -> None:
    for bad in ({"action": "tap"}, {"action": "type"}, {"action": "swipe", "x": 1},
                {"action": "tap", "target": "x", "retries": 9},
                {"action": "tap", "target": "x", "colour": "red"}):
        with pytest.raises(ValidationError):
            PlanStep.model_validate(bad)
    with pytest.raises(ValidationError):
        Plan(steps=[])
    with pytest.raises(PlanError):
        parse_plan('{"steps": [{"action": "shell"}]}')
    plan = parse_plan('```json\n{"steps": [{"action": "key", "target": "back"}]}\n```')
    assert plan.source == "llm"
    assert step_call(plan.steps[0], settled=False) == (UI_KEY, {"key": "BACK", "settled": False})
    shell = PlanStep(action="shell", argv=["getprop"])
    assert step_call(shell) == (SHELL, {"argv": ["getprop"]})


def test_checks_against_a_state() -> None:
    state = {"package": "p", "activity": "p.ui.Main", "activity_short": "Main", "keyboard": False}
    elements = [{"text": "Dark mode", "checked": True, "actionable": True}, {"desc": "Hello"}]
    assert evaluate(Check(package="p", activity="Main", text="hello", checked="dark mode",
                          keyboard=False), state, elements) == []
    failures = evaluate(Check(package="q", activity="Settings", text="nope", keyboard=True),
                        state, elements)
    assert len(failures) == 4


async def test_the_memory_frame_store_is_bounded_by_traces_and_bytes() -> None:
    from controller.agent import FrameNotKept, MemoryFrameStore

    frames = MemoryFrameStore(keep=2, max_bytes=100)
    await frames.put("t1", "u", "a.png", b"x" * 10)
    await frames.put("t2", "u", "a.png", b"x" * 10)
    await frames.put("t3", None, "a.png", b"x" * 10)
    assert await frames.get("t1", "a.png") is None
    kept = await frames.get("t3", "a.png")
    assert kept is not None and (kept.user_id, kept.png) == (None, b"x" * 10)
    await frames.put("t4", "u", "big.png", b"y" * 95)  # over budget: older traces go, not this one
    assert await frames.get("t2", "a.png") is None and await frames.get("t3", "a.png") is None
    assert await frames.get("t4", "big.png") is not None and frames.bytes == 95
    assert await frames.get("t4", "other.png") is None
    with pytest.raises(FrameNotKept, match="101 bytes"):  # could never fit: not kept at all
        await frames.put("t5", "u", "huge.png", b"z" * 101)
    assert await frames.get("t4", "big.png") is not None
