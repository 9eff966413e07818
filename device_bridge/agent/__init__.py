"""The agent toolkit on the bridge: page-aware device state, the UI tree with
Set-of-Marks screenshots, actions with two-frame evidence, and a policy dry run.

Modules: :mod:`.toolkit` (:class:`AgentToolkit`: the RPC handlers), :mod:`.state` (dumpsys
parsing, the Activity trail, the ``[Device State]`` text), :mod:`.uitree` (``uiautomator
dump`` parsing, element lookup), :mod:`.frames` (Set-of-Marks, composite, settle test).
"""

from __future__ import annotations

from typing import Any

from device_bridge.agent.state import ActivityTrail, Focus, parse_focus, state_text
from device_bridge.agent.toolkit import AgentSettings, AgentToolkit
from device_bridge.agent.uitree import find, parse_ui

__all__ = [
    "MARK_COLOR",
    "ActivityTrail",
    "AgentSettings",
    "AgentToolkit",
    "Focus",
    "composite",
    "draw_marks",
    "find",
    "parse_focus",
    "parse_ui",
    "same_frame",
    "state_text",
]

# Pillow (for the frames) is imported on first use, not with the bridge: a bridge that never
# draws a frame never loads it.
_FRAMES = {"MARK_COLOR", "composite", "draw_marks", "same_frame"}


def __getattr__(name: str) -> Any:
    if name in _FRAMES:
        from device_bridge.agent import frames

        return getattr(frames, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
