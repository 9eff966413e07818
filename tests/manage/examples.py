"""One valid (params, result) pair per device management method, for the protocol's registry
test (``tests/protocol/test_methods.py`` merges them into its ``EXAMPLES``)."""

from __future__ import annotations

from typing import Any

__all__ = ["MANAGE_EXAMPLES"]

S = "emulator-5554"
ST = "st-" + "0" * 32
_STAGE = {"stage": ST, "size": 3}
_APP = {"serial": S, "package": "com.example.app"}

MANAGE_EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "stage.open": ({"serial": S, "size": 3}, {"stage": ST, "size": 0}),
    "stage.write": ({"serial": S, "stage": ST, "offset": 0, "data": b"abc"}, _STAGE),
    "stage.read": (
        {"serial": S, "stage": ST, "offset": 0, "length": 3},
        {"data": b"abc", "eof": True},
    ),
    "stage.close": ({"serial": S, "stage": ST}, {}),
    "files.push": ({"serial": S, "stage": ST, "path": "/data/local/tmp/droidwire/a"}, _STAGE),
    "files.pull": ({"serial": S, "path": "/data/local/tmp/droidwire/a", "max_bytes": 9}, _STAGE),
    "files.remove": ({"serial": S, "path": "/data/local/tmp/droidwire/a"}, {}),
    "apps.list": ({"serial": S}, {"apps": [{"package": "com.example.app", "managed": True}]}),
    "apps.install": (
        {"serial": S, "stage": ST, "temporary": True},
        {"package": "com.example.app", "replaced": False},
    ),
    "apps.uninstall": (_APP, {}),
    "apps.launch": (_APP, {}),
    "apps.stop": (_APP, {}),
    "apps.clear": (_APP, {}),
    "device.health": (
        {"serial": S},
        {"battery_level": 87, "battery_temperature_c": 28.5, "charging": True,
         "storage_free_bytes": 1, "storage_total_bytes": 2, "cpu_load": 0.5,
         "memory_used_ratio": 0.4, "read_at": 1.0},
    ),
}
