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

from PIL import Image, ImageDraw

__all__ = ["render_png", "render_raw"]


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
