"""``uiautomator dump`` XML → :class:`protocol.agent_methods.UiElement` list (pure).

The XML comes from the device, so it is untrusted: a document type declaration (the door to
entity expansion) is refused, the size is bounded by the caller, and at most
:data:`MAX_ELEMENTS` nodes are kept. ``index`` numbers every ``node`` in document order — the
same numbers the Set-of-Marks screenshot draws and ``ui.tap`` takes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from protocol.agent_methods import UiElement
from protocol.errors import ErrorCode, RpcError

__all__ = ["MAX_ELEMENTS", "extract_xml", "find", "parse_ui"]

MAX_ELEMENTS = 2000
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_MAX_TEXT = 1000


def extract_xml(output: str) -> str:
    """The hierarchy out of ``uiautomator dump /dev/tty``'s output (a trailer follows it)."""
    start = output.find("<hierarchy")
    end = output.rfind("</hierarchy>")
    if start < 0 or end < 0:
        raise RpcError(
            ErrorCode.UNAVAILABLE,
            "uiautomator returned no window hierarchy",
            {"output": output[-300:]},
        )
    return output[start : end + len("</hierarchy>")]


def _flag(node: ET.Element, name: str) -> bool:
    return node.get(name) == "true"


def parse_ui(xml: str) -> list[UiElement]:
    if "<!DOCTYPE" in xml or "<!ENTITY" in xml:
        raise RpcError(ErrorCode.UNAVAILABLE, "refusing a UI dump with a document type")
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise RpcError(ErrorCode.UNAVAILABLE, f"malformed UI dump: {exc}") from exc
    out: list[UiElement] = []
    for node in root.iter("node"):
        if len(out) >= MAX_ELEMENTS:
            break
        match = _BOUNDS.fullmatch(node.get("bounds", ""))
        bounds = tuple(int(v) for v in match.groups()) if match else (0, 0, 0, 0)
        left, top, right, bottom = bounds
        clickable = _flag(node, "clickable") or _flag(node, "long-clickable")
        checkable = _flag(node, "checkable")
        scrollable = _flag(node, "scrollable")
        out.append(
            UiElement(
                index=len(out),
                class_name=node.get("class", "")[:200],
                text=node.get("text", "")[:_MAX_TEXT],
                desc=node.get("content-desc", "")[:_MAX_TEXT],
                resource_id=node.get("resource-id", "")[:200],
                package=node.get("package", "")[:255],
                bounds=(left, top, right, bottom),
                clickable=clickable,
                focused=_flag(node, "focused"),
                focusable=_flag(node, "focusable"),
                checkable=checkable,
                checked=_flag(node, "checked"),
                scrollable=scrollable,
                enabled=node.get("enabled", "true") != "false",
                actionable=(clickable or checkable or scrollable) and right > left and bottom > top,
            )
        )
    return out


def find(
    elements: list[UiElement],
    *,
    text: str | None = None,
    desc: str | None = None,
    resource_id: str | None = None,
) -> UiElement | None:
    """The element whose field equals the selector (case-insensitively), else the first one
    containing it; actionable elements first in both rounds. ``resource_id`` also matches the
    part after ``:id/``."""

    def value(e: UiElement) -> str:
        if text is not None:
            return e.text
        if desc is not None:
            return e.desc
        rid = e.resource_id
        return rid.split(":id/", 1)[-1] if resource_id and ":id/" not in resource_id else rid

    wanted = (text or desc or resource_id or "").casefold()
    if not wanted:
        return None
    ordered = sorted(elements, key=lambda e: not e.actionable)
    for e in ordered:
        if value(e).casefold() == wanted:
            return e
    for e in ordered:
        if wanted in value(e).casefold():
            return e
    return None
