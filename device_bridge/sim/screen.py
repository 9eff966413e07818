"""What the simulated screen looks like: a real image of the profile's size, per focused window.

``screencap -p`` must return a PNG that PIL (adbutils' ``screenshot()``) decodes at the
device's resolution; without ``-p`` screencap writes the raw framebuffer: a little-endian
header (width, height, pixel format 1 = RGBA_8888, and from Android 9 a data-space word)
followed by width × height × 4 bytes.
"""

from __future__ import annotations

import hashlib
import io
import struct
from functools import lru_cache
from xml.sax.saxutils import quoteattr

from PIL import Image, ImageDraw

__all__ = ["render_png", "render_raw", "render_ui_xml"]


@lru_cache(maxsize=16)
def _image(width: int, height: int, focus: str) -> Image.Image:
    digest = hashlib.sha256(focus.encode()).digest()
    background = (digest[0] // 2 + 64, digest[1] // 2 + 64, digest[2] // 2 + 64)
    img = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(img)
    bar = max(height // 40, 1)
    draw.rectangle((0, 0, width, bar), fill=(20, 20, 20))  # status bar
    draw.rectangle((0, height - 2 * bar, width, height), fill=(0, 0, 0))  # navigation bar
    margin = width // 12
    draw.rectangle(
        (margin, height // 4, width - margin, height // 4 + height // 6), fill=(250, 250, 250)
    )
    draw.text((margin + 8, height // 4 + 8), focus, fill=(0, 0, 0))
    return img


@lru_cache(maxsize=16)
def render_png(width: int, height: int, focus: str) -> bytes:
    buf = io.BytesIO()
    _image(width, height, focus).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def render_raw(width: int, height: int, focus: str, *, sdk: int) -> bytes:
    header = struct.pack("<III", width, height, 1)
    if sdk >= 28:
        header += struct.pack("<I", 0)
    return header + _image(width, height, focus).convert("RGBA").tobytes()


def _node(index: int, cls: str, pkg: str, bounds: tuple[int, int, int, int], *, text: str = "",
          rid: str = "", desc: str = "", clickable: bool = False, focused: bool = False,
          children: str = "") -> str:
    left, top, right, bottom = bounds
    flags = {
        "checkable": False, "checked": False, "clickable": clickable, "enabled": True,
        "focusable": clickable or focused, "focused": focused, "scrollable": False,
        "long-clickable": False, "password": False, "selected": False,
    }
    attrs = " ".join(f'{k}="{str(v).lower()}"' for k, v in flags.items())
    return (
        f"<node index=\"{index}\" text={quoteattr(text)} resource-id={quoteattr(rid)} "
        f"class={quoteattr(cls)} package={quoteattr(pkg)} content-desc={quoteattr(desc)} "
        f'{attrs} bounds="[{left},{top}][{right},{bottom}]">{children}</node>'
    )


def render_ui_xml(width: int, height: int, focus: str, *, apps: list[str], typed: str,
                  launcher: bool) -> str:
    """A ``uiautomator dump`` hierarchy: launcher icons for ``apps``, or a simple app screen."""
    pkg, _, activity = focus.partition("/")
    bar = height // 40
    if launcher:
        size = width // 4
        icons = "".join(
            _node(i, "android.widget.TextView", pkg,
                  ((i % 4) * size, bar + (i // 4) * size, (i % 4 + 1) * size,
                   bar + (i // 4 + 1) * size),
                  text=name.rsplit(".", 1)[-1].capitalize(), desc=name, clickable=True)
            for i, name in enumerate(apps[:24])
        )
        body = _node(0, "android.view.ViewGroup", pkg, (0, bar, width, height - 2 * bar),
                     rid=f"{pkg}:id/workspace", children=icons)
    else:
        title = activity.rsplit(".", 1)[-1]
        margin = width // 12
        body = _node(0, "android.widget.LinearLayout", pkg, (0, bar, width, height - 2 * bar),
                     children=(
            _node(0, "android.widget.TextView", pkg, (margin, bar, width - margin, bar * 4),
                  text=title, rid=f"{pkg}:id/title")
            + _node(1, "android.widget.EditText", pkg,
                    (margin, bar * 5, width - margin, bar * 8), text=typed,
                    rid=f"{pkg}:id/input", clickable=True, focused=True)
            + _node(2, "android.widget.Button", pkg,
                    (margin, bar * 9, width // 2, bar * 12), text="OK",
                    rid=f"{pkg}:id/ok", clickable=True)
        ))
    root = _node(0, "android.widget.FrameLayout", pkg, (0, 0, width, height), children=body)
    return ("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>"
            f'<hierarchy rotation="0">{root}</hierarchy>')
