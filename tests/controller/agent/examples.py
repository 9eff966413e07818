"""One valid (params, result) pair per agent toolkit method, for the protocol's registry test
(``tests/protocol/test_methods.py`` merges them into its ``EXAMPLES``)."""

from __future__ import annotations

from typing import Any

__all__ = ["AGENT_EXAMPLES"]

SERIAL = "emulator-5554"
PNG = b"\x89PNG\r\n\x1a\n"

_STATE: dict[str, Any] = {
    "package": "com.droidwire.demo",
    "activity": "com.droidwire.demo.MainActivity",
    "activity_short": "MainActivity",
    "recent_activities": ["com.droidwire.demo.MainActivity"],
    "keyboard": False,
    "screen": {"width": 1080, "height": 2400},
    "orientation": 0,
    "battery": 87,
    "text": "[Device State] App: com.droidwire.demo Page: MainActivity "
    "Recent pages: MainActivity Keyboard: hidden",
}
_ELEMENT: dict[str, Any] = {
    "index": 3,
    "class_name": "android.widget.Button",
    "text": "Settings",
    "resource_id": "com.droidwire.demo:id/settings",
    "bounds": (90, 840, 990, 1020),
    "clickable": True,
    "actionable": True,
}
_ACTION: dict[str, Any] = {
    "ok": True,
    "action": "ui.tap",
    "command": ["input", "tap", "540", "930"],
    "exit_code": 0,
    "duration_ms": 12,
    "target": _ELEMENT,
    "at_action_png": PNG,
    "settled_png": PNG,
    "composite_png": PNG,
    "settled": True,
    "state": _STATE,
}

AGENT_EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "device.state": ({"serial": SERIAL}, _STATE),
    "ui.dump": ({"serial": SERIAL}, {"elements": [_ELEMENT]}),
    "ui.screenshot": ({"serial": SERIAL, "marks": True}, {"png": PNG}),
    "ui.tap": ({"serial": SERIAL, "index": 3, "settled": True}, _ACTION),
    "ui.swipe": (
        {"serial": SERIAL, "x1": 500, "y1": 1800, "x2": 500, "y2": 600, "duration_ms": 250},
        {**_ACTION, "action": "ui.swipe", "target": None},
    ),
    "ui.text": ({"serial": SERIAL, "text": "hello"}, {**_ACTION, "action": "ui.text"}),
    "ui.key": ({"serial": SERIAL, "key": "BACK"}, {**_ACTION, "action": "ui.key"}),
    "app.start": (
        {"serial": SERIAL, "package": "com.droidwire.demo", "activity": ".MainActivity"},
        {**_ACTION, "action": "app.start"},
    ),
    "app.stop": ({"serial": SERIAL, "package": "com.droidwire.demo"}, _ACTION),
    "agent.check": (
        {"serial": SERIAL, "steps": [{"method": "device.shell", "params": {"argv": ["reboot"]}}]},
        {"ok": False, "results": [{"ok": False, "code": "forbidden", "rule": "reboot"}]},
    ),
}
