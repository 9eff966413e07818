"""The demo app's UI on the simulated device: two screens, a switch, a toast, a keyboard.

``com.droidwire.demo`` (once installed) starts on ``MainActivity``: a title, a text field and
three buttons — ``Load`` (toast "Loaded 3 items"), ``Settings`` (opens ``SettingsActivity``)
and ``Help`` (toast). ``SettingsActivity`` has a ``Dark mode`` switch and a ``Save`` button
whose toast "Settings saved" stays :data:`TOAST_S` seconds of the **UI clock**, then vanishes.
Tapping the text field shows the soft keyboard; BACK hides it first, then leaves the screen
(the device's own back stack).

What the screen shows is a :class:`DemoView`, a frozen snapshot that :mod:`.screen` lays out
(``uiautomator dump``, ``input tap`` hit-testing) and draws (``screencap``), so the three stay
consistent. Toasts are drawn but not dumped: on Android a toast lives in a window of its own
that ``uiautomator dump`` of the app window does not show — which is why an agent needs the
at-action frame to see one.

The UI clock (:class:`UiClock`) follows the wall clock by default; a test switches it to manual
and advances it itself, so nothing depends on real timing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PIL import Image, ImageDraw

from device_bridge.sim.apk import SimPackage, build_apk
from device_bridge.sim.screen import Screen, UiNode

if TYPE_CHECKING:
    from device_bridge.sim.device import SimDevice

__all__ = [
    "DEMO_PACKAGE",
    "MAIN_ACTIVITY",
    "SETTINGS_ACTIVITY",
    "TOAST_S",
    "DemoUi",
    "DemoView",
    "UiClock",
    "launch_demo",
]

DEMO_PACKAGE = "com.droidwire.demo"
MAIN_ACTIVITY = ".MainActivity"
SETTINGS_ACTIVITY = ".SettingsActivity"
#: How long a toast stays on screen (Toast.LENGTH_SHORT is 2 s; ours is short on purpose).
TOAST_S = 1.0

_BUTTON = "android.widget.Button"
_SWITCH = "android.widget.Switch"
_EDIT = "android.widget.EditText"
_TEXT = "android.widget.TextView"


class UiClock:
    """Seconds of UI time. Wall clock (monotonic) until :meth:`set_manual`; then it moves only
    when :meth:`advance` is called. Thread-safe: tests advance it from their own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manual: float | None = None

    def now(self) -> float:
        with self._lock:
            return time.monotonic() if self._manual is None else self._manual

    def set_manual(self, start: float = 0.0) -> None:
        with self._lock:
            self._manual = start

    @property
    def manual(self) -> bool:
        return self._manual is not None

    def advance(self, seconds: float) -> None:
        with self._lock:
            if self._manual is None:
                raise RuntimeError("the UI clock follows the wall clock; call set_manual() first")
            self._manual += max(seconds, 0.0)


@dataclass(frozen=True)
class DemoView:
    """What the demo app shows at one instant (hashable: renderings are cached by it)."""

    activity: str  # ".MainActivity", ".SettingsActivity", or another class (generic screen)
    dark: bool = False
    toast: str = ""

    def layout(self, s: Screen) -> tuple[UiNode, ...]:
        bar = max(s.height // 40, 1)
        margin = s.width // 12
        pkg = DEMO_PACKAGE
        nodes = [
            UiNode("android.widget.FrameLayout", (0, 0, s.width, s.height), depth=0),
            UiNode("android.widget.LinearLayout", (0, bar, s.width, s.height - 2 * bar), depth=1),
        ]
        right = s.width - margin

        def row(top: int) -> tuple[int, int, int, int]:
            return (margin, bar * top, right, bar * (top + 3))

        if self.activity == SETTINGS_ACTIVITY:
            nodes += [
                UiNode(_TEXT, (margin, bar * 2, right, bar * 5), text="Settings",
                       rid=f"{pkg}:id/title"),
                UiNode(_SWITCH, row(6), text="Dark mode", rid=f"{pkg}:id/dark_mode",
                       clickable=True, checkable=True, checked=self.dark),
                UiNode(_BUTTON, row(10), text="Save", rid=f"{pkg}:id/save", clickable=True),
            ]
        else:
            title = "Droidwire Demo" if self.activity == MAIN_ACTIVITY else (
                self.activity.rsplit(".", 1)[-1])
            nodes += [
                UiNode(_TEXT, (margin, bar * 2, right, bar * 5), text=title,
                       rid=f"{pkg}:id/title"),
                UiNode(_EDIT, row(6), text=s.typed, rid=f"{pkg}:id/input", clickable=True,
                       focused=s.keyboard),
                UiNode(_BUTTON, row(10), text="Load", rid=f"{pkg}:id/load", clickable=True),
                UiNode(_BUTTON, row(14), text="Settings", rid=f"{pkg}:id/settings",
                       desc="Open settings", clickable=True),
                UiNode(_BUTTON, row(18), text="Help", rid=f"{pkg}:id/help", clickable=True),
            ]
        return tuple(nodes)

    def draw(self, s: Screen) -> Image.Image:
        bg, fg = ((28, 28, 30), (235, 235, 235)) if self.dark else ((246, 246, 246), (20, 20, 20))
        img = Image.new("RGB", (s.width, s.height), bg)
        draw = ImageDraw.Draw(img)
        bar = max(s.height // 40, 1)
        draw.rectangle((0, 0, s.width, bar), fill=(20, 20, 20))  # status bar
        draw.rectangle((0, s.height - 2 * bar, s.width, s.height), fill=(0, 0, 0))  # nav bar
        for node in self.layout(s):
            if node.depth < 2:
                continue
            left, top, right, bottom = node.bounds
            pad = max(bar // 4, 2)
            box = (left + pad, top + pad, right - pad, bottom - pad)
            if node.cls == _BUTTON:
                draw.rectangle(box, fill=(30, 110, 220))
                draw.text((left + 3 * pad, top + 3 * pad), node.text, fill=(255, 255, 255))
            elif node.cls == _EDIT:
                draw.rectangle(box, fill=(255, 255, 255), outline=(120, 120, 120))
                draw.text((left + 3 * pad, top + 3 * pad), node.text, fill=(0, 0, 0))
            elif node.cls == _SWITCH:
                draw.text((left + 3 * pad, top + 3 * pad), node.text, fill=fg)
                track = (right - bar * 4, top + bar, right - pad, bottom - bar)
                on = self.dark
                draw.rectangle(track, fill=(60, 170, 90) if on else (150, 150, 150))
                knob_x = track[2] - bar if on else track[0]
                draw.rectangle((knob_x, track[1], knob_x + bar, track[3]), fill=(250, 250, 250))
            else:
                draw.text((left + pad, top + pad), node.text, fill=fg)
        if s.keyboard:
            draw.rectangle((0, s.height * 6 // 10, s.width, s.height - 2 * bar), fill=(60, 60, 60))
        if self.toast:
            w = s.width * 6 // 10
            left = (s.width - w) // 2
            box = (left, bar * 30, left + w, bar * 33)
            draw.rectangle(box, fill=(50, 50, 50))
            draw.text((left + bar, bar * 31), self.toast, fill=(255, 255, 255))
        return img


class DemoUi:
    """The demo app's state on one device: dark mode (saved or not) and the current toast."""

    def __init__(self, clock: UiClock | None = None) -> None:
        self.clock = clock or UiClock()
        self.dark = False
        self.saved_dark = False
        self._toast = ""
        self._toast_until = 0.0

    def view(self, focus: str) -> DemoView | None:
        """The demo app's view when it has the focus, else None (another screen)."""
        pkg, _, activity = focus.partition("/")
        if pkg != DEMO_PACKAGE:
            return None
        activity = activity.removeprefix(DEMO_PACKAGE)
        return DemoView(activity, dark=self.dark, toast=self.toast)

    @property
    def toast(self) -> str:
        return self._toast if self.clock.now() < self._toast_until else ""

    def show_toast(self, text: str) -> None:
        self._toast = text
        self._toast_until = self.clock.now() + TOAST_S

    def tap(self, dev: SimDevice, node: UiNode) -> bool:
        """A tap on ``node`` of the demo app; False when the node is not one of ours."""
        if not node.rid.startswith(DEMO_PACKAGE + ":id/"):
            return False
        name = node.rid.split("/", 1)[1]
        if name == "settings":
            dev.start_activity(DEMO_PACKAGE, SETTINGS_ACTIVITY)
        elif name == "load":
            self.show_toast("Loaded 3 items")
        elif name == "help":
            self.show_toast("Tap Settings to change the theme")
        elif name == "dark_mode":
            self.dark = not self.dark
        elif name == "save":
            self.saved_dark = self.dark
            self.show_toast("Settings saved")
        elif name == "input":
            dev.keyboard_shown = True
        else:
            return False
        dev.log("I", "DemoApp", f"click {name}", pid=dev.pid_of(DEMO_PACKAGE) or dev.system_pid,
                tid=dev.pid_of(DEMO_PACKAGE) or dev.system_pid)
        return True

    def reset(self) -> None:
        """Back to a fresh install's state (tests)."""
        self.dark = self.saved_dark = False
        self._toast_until = 0.0

    def stopped(self) -> None:
        """The process died: unsaved changes are lost."""
        self.dark = self.saved_dark
        self._toast_until = 0.0


def launch_demo(dev: SimDevice) -> None:
    """Install the demo app if needed and bring it up on MainActivity (device loop only)."""
    if DEMO_PACKAGE not in dev.packages:
        outcome = dev.install(build_apk(SimPackage(DEMO_PACKAGE, "app")), source="demo.apk")
        if outcome != "Success":
            raise RuntimeError(outcome)
    dev.start_activity(DEMO_PACKAGE, MAIN_ACTIVITY)
