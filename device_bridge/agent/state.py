"""Where the device is, from ``dumpsys`` text: pure parsing, no I/O.

Sources (AOSP formats, several Android versions):

* the resumed Activity: ``dumpsys activity activities`` — ``mResumedActivity:`` (≤ 9),
  ``ResumedActivity:`` (10–11), ``topResumedActivity=`` (12+), each an
  ``ActivityRecord{HASH u0 PKG/CLASS tN}``; failing that, ``dumpsys window``'s
  ``mCurrentFocus=Window{HASH u0 PKG/CLASS}`` or ``mFocusedApp=``;
* the keyboard: ``mInputShown=true`` (``dumpsys input_method``), else a non-null
  ``mInputMethodWindow`` marked visible in ``dumpsys window``;
* the rotation: ``mCurrentRotation=ROTATION_90`` / ``mRotation=1`` (``dumpsys window``);
* the battery: ``level: N`` (``dumpsys battery``).

:class:`ActivityTrail` keeps the last Activity changes the bridge saw on each device.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

__all__ = [
    "TRAIL_LENGTH",
    "ActivityTrail",
    "Focus",
    "parse_battery",
    "parse_focus",
    "parse_keyboard",
    "parse_rotation",
    "short_name",
    "state_text",
]

TRAIL_LENGTH = 5

_RECORD = r"\{\S+ u\d+ (?P<pkg>[A-Za-z0-9_.]+)/(?P<cls>[A-Za-z0-9_.$]+)"
_RESUMED = re.compile(
    r"(?:topResumedActivity=|mResumedActivity: |ResumedActivity: )ActivityRecord" + _RECORD
)
_WINDOW_FOCUS = re.compile(r"mCurrentFocus=Window" + _RECORD)
_FOCUSED_APP = re.compile(
    r"mFocusedApp=(?:AppWindowToken\{\S+ token=Token\{\S+ )?ActivityRecord" + _RECORD
)
_INPUT_SHOWN = re.compile(r"mInputShown=(true|false)")
_IME_WINDOW = re.compile(r"mInputMethodWindow=Window\{")
_ROTATION = re.compile(r"mCurrentRotation=(?:ROTATION_)?(\d+)|mRotation=(\d)\b")
_LEVEL = re.compile(r"^\s*level: (\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Focus:
    package: str
    activity: str  # fully qualified class name

    @property
    def component(self) -> str:
        return f"{self.package}/{self.activity}"

    @property
    def short(self) -> str:
        return short_name(self.activity)


def short_name(activity: str) -> str:
    """``com.example.ui.MainActivity`` → ``MainActivity``."""
    return activity.rsplit(".", 1)[-1]


def _focus(match: re.Match[str]) -> Focus:
    pkg, cls = match["pkg"], match["cls"]
    return Focus(pkg, pkg + cls if cls.startswith(".") else cls)


def parse_focus(activities: str, window: str = "") -> Focus | None:
    """The resumed Activity, or the focused window's, or None (e.g. the lock screen)."""
    for pattern, text in ((_RESUMED, activities), (_WINDOW_FOCUS, window), (_FOCUSED_APP, window)):
        match = pattern.search(text)
        if match is not None:
            return _focus(match)
    return None


def parse_keyboard(input_method: str, window: str = "") -> bool:
    match = _INPUT_SHOWN.search(input_method)
    if match is not None:
        return match[1] == "true"
    return _IME_WINDOW.search(window) is not None


def parse_rotation(window: str) -> int:
    """Quarter turns (0–3); 0 when the text does not say."""
    match = _ROTATION.search(window)
    if match is None:
        return 0
    if match[1] is not None:
        value = int(match[1])
        return (value // 90) % 4 if value >= 90 else value % 4
    return int(match[2]) % 4


def parse_battery(battery: str) -> int | None:
    match = _LEVEL.search(battery)
    return int(match[1]) if match else None


class ActivityTrail:
    """The last :data:`TRAIL_LENGTH` Activities each device showed, oldest first.

    The bridge feeds it, on each state read (every action reads the state after it), the
    resumes the device's event log recorded since the previous read
    (``wm_set_resumed_activity``), then the current Activity: pages visited between two agent
    calls count too. Consecutive repeats are one entry.
    """

    def __init__(self, length: int = TRAIL_LENGTH) -> None:
        self.length = length
        self._trails: dict[str, deque[str]] = {}

    def observe(self, serial: str, activity: str | None) -> list[str]:
        trail = self._trails.setdefault(serial, deque(maxlen=self.length))
        if activity and (not trail or trail[-1] != activity):
            trail.append(activity)
        return list(trail)

    def get(self, serial: str) -> list[str]:
        return list(self._trails.get(serial, ()))

    def forget(self, serial: str) -> None:
        self._trails.pop(serial, None)


def state_text(focus: Focus | None, trail: list[str], *, keyboard: bool) -> str:
    """``[Device State] App: … Page: … Recent pages: A → B → C Keyboard: hidden``."""
    app = focus.package if focus else "unknown"
    page = focus.short if focus else "unknown"
    recent = " → ".join(short_name(a) for a in trail) or "none"
    return (
        f"[Device State] App: {app} Page: {page} Recent pages: {recent} "
        f"Keyboard: {'shown' if keyboard else 'hidden'}"
    )
