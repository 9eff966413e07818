"""The agent toolkit's RPCs: where am I, what is on screen, act with evidence.

Registered into :data:`protocol.methods.METHODS` when :mod:`protocol` is imported:

==================  =====================================  ===================================
method              params                                 result
==================  =====================================  ===================================
``device.state``    :class:`DeviceParams`                  :class:`DeviceStateResult`
``ui.dump``         :class:`DeviceParams`                  :class:`UiDumpResult`
``ui.screenshot``   :class:`UiScreenshotParams`            :class:`~protocol.methods.ScreenshotResult`
``ui.tap``          :class:`TapParams`                     :class:`ActionResult`
``ui.swipe``        :class:`SwipeParams`                   :class:`ActionResult`
``ui.text``         :class:`TextParams`                    :class:`ActionResult`
``ui.key``          :class:`KeyParams`                     :class:`ActionResult`
``app.start``       :class:`AppStartParams`                :class:`ActionResult`
``app.stop``        :class:`AppStopParams`                 :class:`ActionResult`
``agent.check``     :class:`AgentCheckParams`              :class:`AgentCheckResult`
==================  =====================================  ===================================

``agent.check`` is a dry run: the bridge applies to each step exactly the policy checks the
step would meet if it were sent (profile, allow-list, bounds it can know without the device)
and sends nothing to the device. A planner checks a whole plan with it before the first step.

Every action returns an *at-action* frame (captured shortly after the action, to catch toasts
and transient feedback) and, when ``settled`` is asked, a *settled* frame (after the screen
stopped changing, or at the cap) with a side-by-side composite of the two.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from protocol.methods import (
    DeviceParams,
    Method,
    Package,
    Params,
    Result,
    ScreenshotResult,
    register,
)

__all__ = [
    "ACTIONS",
    "ACTION_METHODS",
    "AGENT_CHECK",
    "AGENT_METHODS",
    "APP_START",
    "APP_STOP",
    "DEVICE_STATE",
    "UI_DUMP",
    "UI_KEY",
    "UI_SCREENSHOT",
    "UI_SWIPE",
    "UI_TAP",
    "UI_TEXT",
    "ActionParams",
    "ActionResult",
    "AgentCheckParams",
    "AgentCheckResult",
    "AppStartParams",
    "AppStopParams",
    "CheckOutcome",
    "CheckStep",
    "DeviceStateResult",
    "KeyParams",
    "ScreenSize",
    "SwipeParams",
    "TapParams",
    "TextParams",
    "UiDumpResult",
    "UiElement",
    "UiScreenshotParams",
]

#: Longest text ``ui.text`` types (the shell allow-list's bound, docs/design.md §6).
MAX_TEXT = 500
#: Longest swipe.
MAX_SWIPE_MS = 10_000
#: Upper bound of the settled frame's wait.
MAX_SETTLE_S = 30.0

_Selector = Annotated[str, StringConstraints(min_length=1, max_length=200)]
_Coord = Annotated[int, Field(ge=0, le=100_000)]
#: An Activity class: ``.MainActivity`` or ``com.example.MainActivity``.
Activity = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=255,
        pattern=r"^\.?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_$]*)*$",
    ),
]
#: A key: a name (``BACK``, ``KEYCODE_ENTER``) or a code (``4``).
Key = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=48, pattern=r"^((KEYCODE_)?[A-Z0-9_]{1,40}|\d{1,3})$"
    ),
]


# --- state and UI ----------------------------------------------------------------------------


class ScreenSize(Result):
    width: int
    height: int


class DeviceStateResult(Result):
    """Where the device is. ``activity`` is the full class name, ``activity_short`` the last
    part; ``recent_activities`` the last Activity changes the bridge saw, oldest first, ending
    with the current one; ``text`` the compact block for an LLM prompt."""

    package: str | None = None
    activity: str | None = None
    activity_short: str | None = None
    recent_activities: list[str] = Field(default_factory=list)
    keyboard: bool = False
    screen: ScreenSize | None = None
    orientation: int = 0  # 0..3, quarter turns
    battery: int | None = None
    text: str = ""


class UiElement(Result):
    """One node of ``uiautomator dump``; ``index`` is its position in document order."""

    index: int
    class_name: str = ""
    text: str = ""
    desc: str = ""
    resource_id: str = ""
    package: str = ""
    bounds: tuple[int, int, int, int] = (0, 0, 0, 0)  # left, top, right, bottom
    clickable: bool = False
    focused: bool = False
    focusable: bool = False
    checkable: bool = False
    checked: bool = False
    scrollable: bool = False
    enabled: bool = True
    actionable: bool = False  # clickable, checkable or scrollable: gets a mark

    @property
    def center(self) -> tuple[int, int]:
        left, top, right, bottom = self.bounds
        return (left + right) // 2, (top + bottom) // 2


class UiDumpResult(Result):
    elements: list[UiElement] = Field(default_factory=list)


class UiScreenshotParams(DeviceParams):
    marks: bool = False  # Set-of-Marks: a crosshair and the index on every actionable element


# --- actions ---------------------------------------------------------------------------------


class ActionParams(DeviceParams):
    """What every action takes besides its own fields."""

    settled: bool = False  # also wait for the screen to stop changing (with a cap)
    settle_timeout_s: Annotated[float, Field(gt=0, le=MAX_SETTLE_S)] | None = None


class TapParams(ActionParams):
    """Exactly one target: ``index`` (from ``ui.dump``), ``x``/``y``, or a selector (``text``,
    ``desc``, ``resource_id``: the first element whose field equals it, then one containing
    it, case-insensitively)."""

    index: Annotated[int, Field(ge=0, le=10_000)] | None = None
    x: _Coord | None = None
    y: _Coord | None = None
    text: _Selector | None = None
    desc: _Selector | None = None
    resource_id: _Selector | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y")
        given = [
            self.index is not None,
            self.x is not None,
            self.text is not None,
            self.desc is not None,
            self.resource_id is not None,
        ]
        if sum(given) != 1:
            raise ValueError("give exactly one of index, x/y, text, desc and resource_id")
        return self


class SwipeParams(ActionParams):
    x1: _Coord
    y1: _Coord
    x2: _Coord
    y2: _Coord
    duration_ms: Annotated[int, Field(ge=0, le=MAX_SWIPE_MS)] = 300


class TextParams(ActionParams):
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]


class KeyParams(ActionParams):
    key: Key


class AppStartParams(ActionParams):
    package: Package
    activity: Activity | None = None  # None: the app's launcher activity (``.MainActivity``)


class AppStopParams(ActionParams):
    package: Package


class ActionResult(Result):
    """What an action did and what the screen showed. ``ok``: the command exited 0."""

    ok: bool
    action: str
    command: list[str] = Field(default_factory=list)
    exit_code: int = 0
    output: str = ""  # stdout + stderr, truncated
    duration_ms: int = 0
    target: UiElement | None = None  # the element a tap resolved to
    at_action_png: bytes = b""
    settled_png: bytes | None = None
    composite_png: bytes | None = None
    settled: bool | None = None  # True: the screen stopped changing before the cap
    state: DeviceStateResult | None = None


# --- dry run ---------------------------------------------------------------------------------

CheckMethod = Literal[
    "ui.tap", "ui.swipe", "ui.text", "ui.key", "app.start", "app.stop", "device.shell"
]


class CheckStep(Params):
    method: CheckMethod
    params: dict[str, Any] = Field(default_factory=dict, max_length=16)


class AgentCheckParams(DeviceParams):
    steps: list[CheckStep] = Field(min_length=1, max_length=50)


class CheckOutcome(Result):
    ok: bool
    code: str | None = None  # the error code a refused step would get (``forbidden`` …)
    rule: str | None = None
    message: str | None = None
    command: list[str] | None = None  # the argv that would be sent, when it is known already


class AgentCheckResult(Result):
    ok: bool
    results: list[CheckOutcome] = Field(default_factory=list)


# --- registration ----------------------------------------------------------------------------

#: Actions: each returns an :class:`ActionResult`.

DEVICE_STATE = Method(
    "device.state", DeviceParams, DeviceStateResult, "devices", idempotent=True
)
UI_DUMP = Method("ui.dump", DeviceParams, UiDumpResult, "devices", idempotent=True)
UI_SCREENSHOT = Method(
    "ui.screenshot", UiScreenshotParams, ScreenshotResult, "devices", idempotent=True
)
UI_TAP = Method("ui.tap", TapParams, ActionResult, "devices")
UI_SWIPE = Method("ui.swipe", SwipeParams, ActionResult, "devices")
UI_TEXT = Method("ui.text", TextParams, ActionResult, "devices")
UI_KEY = Method("ui.key", KeyParams, ActionResult, "devices")
APP_START = Method("app.start", AppStartParams, ActionResult, "devices")
APP_STOP = Method("app.stop", AppStopParams, ActionResult, "devices")
#: The action methods by name (each answers an :class:`ActionResult`).
ACTIONS: dict[str, Method[Any, ActionResult]] = {
    m.name: m for m in (UI_TAP, UI_SWIPE, UI_TEXT, UI_KEY, APP_START, APP_STOP)
}
AGENT_CHECK = Method(
    "agent.check", AgentCheckParams, AgentCheckResult, "devices", idempotent=True
)

#: The action methods' params models by name.
ACTION_METHODS: dict[str, type[ActionParams]] = {name: m.params for name, m in ACTIONS.items()}

AGENT_METHODS: tuple[Method[Any, Any], ...] = (
    DEVICE_STATE, UI_DUMP, UI_SCREENSHOT, *ACTIONS.values(), AGENT_CHECK,
)


def _register() -> None:
    for spec in AGENT_METHODS:
        register(spec, replace=True)


_register()
