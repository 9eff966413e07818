"""What the simulated screen shows: one layout, drawn three ways.

:func:`layout` lays out the focused window as a list of :class:`UiNode` — launcher icons for the
installed apps, or a simple app screen (title, text field, button). The same nodes are

* dumped as ``uiautomator dump`` XML (:func:`render_ui_xml`),
* drawn into the screenshot (:func:`render_png`, :func:`render_raw`), and
* hit-tested by ``input tap`` (:func:`hit`), so what an agent sees is what it can touch.

``screencap -p`` must return a PNG that PIL (adbutils' ``screenshot()``) decodes at the
device's resolution; without ``-p`` screencap writes the raw framebuffer: a little-endian header
(width, height, pixel format 1 = RGBA_8888, and from Android 9 a data-space word) followed by
width × height × 4 bytes.
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from xml.sax.saxutils import quoteattr

from PIL import Image, ImageDraw

__all__ = ["Screen", "UiNode", "hit", "layout", "picture", "render_png", "render_raw", "render_ui_xml"]


@dataclass(frozen=True)
class Screen:
    """Everything the picture depends on (hashable, so renderings are cached)."""

    width: int
    height: int
    focus: str  # package/activity of the focused window
    launcher: bool
    apps: tuple[str, ...] = ()  # launcher icons, in order
    typed: str = ""  # text in the focused field
    keyboard: bool = False
    # An app's own screen (``layout(s)`` and ``draw(s)``, hashable), e.g. ui_demo.DemoView.
    app_view: Any = None


@dataclass(frozen=True)
class UiNode:
    cls: str
    bounds: tuple[int, int, int, int]  # left, top, right, bottom
    text: str = ""
    rid: str = ""
    desc: str = ""
    clickable: bool = False
    focused: bool = False
    checkable: bool = False
    checked: bool = False
    depth: int = 2  # 0 root, 1 container, 2 widget

    def contains(self, x: float, y: float) -> bool:
        left, top, right, bottom = self.bounds
        return left <= x < right and top <= y < bottom


def _bar(s: Screen) -> int:
    return max(s.height // 40, 1)


@lru_cache(maxsize=64)
def layout(s: Screen) -> tuple[UiNode, ...]:
    if s.app_view is not None:
        return tuple(s.app_view.layout(s))
    pkg, _, activity = s.focus.partition("/")
    bar = _bar(s)
    nodes = [UiNode("android.widget.FrameLayout", (0, 0, s.width, s.height), depth=0)]
    if s.launcher:
        nodes.append(UiNode("android.view.ViewGroup", (0, bar, s.width, s.height - 2 * bar),
                            rid=f"{pkg}:id/workspace", depth=1))
        size = s.width // 4
        for i, name in enumerate(s.apps[:24]):
            col, row = i % 4, i // 4
            nodes.append(UiNode(
                "android.widget.TextView",
                (col * size, bar + row * size, (col + 1) * size, bar + (row + 1) * size),
                text=name.rsplit(".", 1)[-1].capitalize(), desc=name, clickable=True,
            ))
        return tuple(nodes)
    margin = s.width // 12
    nodes += [
        UiNode("android.widget.LinearLayout", (0, bar, s.width, s.height - 2 * bar), depth=1),
        UiNode("android.widget.TextView", (margin, bar, s.width - margin, bar * 4),
               text=activity.rsplit(".", 1)[-1], rid=f"{pkg}:id/title"),
        UiNode("android.widget.EditText", (margin, bar * 5, s.width - margin, bar * 8),
               text=s.typed, rid=f"{pkg}:id/input", clickable=True, focused=s.keyboard),
        UiNode("android.widget.Button", (margin, bar * 9, s.width // 2, bar * 12), text="OK",
               rid=f"{pkg}:id/ok", clickable=True),
    ]
    return tuple(nodes)


def hit(s: Screen, x: float, y: float) -> UiNode | None:
    """The topmost clickable node under (x, y), if any."""
    for node in reversed(layout(s)):
        if node.clickable and node.contains(x, y):
            return node
    return None


def render_ui_xml(s: Screen) -> str:
    pkg = s.focus.partition("/")[0]
    nodes = layout(s)

    def attrs(index: int, n: UiNode) -> str:
        flags = {
            "checkable": n.checkable, "checked": n.checked, "clickable": n.clickable, "enabled": True,
            "focusable": n.clickable or n.focused, "focused": n.focused, "scrollable": False,
            "long-clickable": False, "password": False, "selected": False,
        }
        left, top, right, bottom = n.bounds
        return (
            f'index="{index}" text={quoteattr(n.text)} resource-id={quoteattr(n.rid)} '
            f"class={quoteattr(n.cls)} package={quoteattr(pkg)} content-desc={quoteattr(n.desc)} "
            + " ".join(f'{k}="{str(v).lower()}"' for k, v in flags.items())
            + f' bounds="[{left},{top}][{right},{bottom}]"'
        )

    root, container, *widgets = nodes
    inner = "".join(f"<node {attrs(i, n)} />" for i, n in enumerate(widgets))
    body = f"<node {attrs(0, container)}>{inner}</node>"
    return ("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>"
            f'<hierarchy rotation="0"><node {attrs(0, root)}>{body}</node></hierarchy>')


@lru_cache(maxsize=16)
def _image(s: Screen) -> Image.Image:
    if s.app_view is not None:
        image: Image.Image = s.app_view.draw(s)
        return image
    digest = hashlib.sha256(s.focus.encode()).digest()
    background = (digest[0] // 2 + 64, digest[1] // 2 + 64, digest[2] // 2 + 64)
    img = Image.new("RGB", (s.width, s.height), background)
    draw = ImageDraw.Draw(img)
    bar = _bar(s)
    draw.rectangle((0, 0, s.width, bar), fill=(20, 20, 20))  # status bar
    draw.rectangle((0, s.height - 2 * bar, s.width, s.height), fill=(0, 0, 0))  # nav bar
    for node in layout(s):
        if node.depth < 2:
            continue
        left, top, right, bottom = node.bounds
        pad = max((right - left) // 16, 2)
        fill = (250, 250, 250) if node.cls != "android.widget.Button" else (30, 110, 220)
        draw.rectangle((left + pad, top + pad, right - pad, bottom - pad), fill=fill)
        draw.text((left + 2 * pad, top + 2 * pad), node.text, fill=(0, 0, 0))
    if s.keyboard:
        draw.rectangle((0, s.height * 6 // 10, s.width, s.height - 2 * bar), fill=(60, 60, 60))
    return img


def picture(s: Screen) -> Image.Image:
    """The rendered screen as a picture (cached; do not change it)."""
    return _image(s)


@lru_cache(maxsize=16)
def render_png(s: Screen) -> bytes:
    buf = io.BytesIO()
    _image(s).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def render_raw(s: Screen, *, sdk: int) -> bytes:
    header = struct.pack("<III", s.width, s.height, 1)
    if sdk >= 28:
        header += struct.pack("<I", 0)
    return header + _image(s).convert("RGBA").tobytes()
