"""Pictures for agents, drawn with Pillow (PNG in, PNG out; pure, CPU-bound: call them in a
worker thread).

* :func:`draw_marks` — Set-of-Marks: a magenta (:data:`MARK_COLOR`, #FF00B4) **crosshair**
  at the centre of every actionable element and its index just outside the cross (upper
  right). Never a filled dot: a dot reads as an in-app badge or radio button, a thin cross in
  a colour apps rarely use does not, and the centre pixel stays visible under it.
* :func:`composite` — the at-action and settled frames side by side, labelled, for a verifier.
* :func:`same_frame` — whether two frames show the same screen (the settle test), ignoring
  the status bar (its clock ticks) and noise below a threshold.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from PIL import Image, ImageChops, ImageDraw, ImageFont, ImageStat

from protocol.agent_methods import UiElement
from protocol.errors import ErrorCode, RpcError

__all__ = ["MARK_COLOR", "composite", "cross_arm", "draw_marks", "same_frame"]

MARK_COLOR = (0xFF, 0x00, 0xB4)
_OUTLINE = (0, 0, 0)
_MAX_PIXELS = 40_000_000


def _open(png: bytes) -> Image.Image:
    try:
        img = Image.open(io.BytesIO(png))
        if img.width * img.height > _MAX_PIXELS:
            raise RpcError(ErrorCode.UNAVAILABLE, "screenshot is too large to process")
        img.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise RpcError(ErrorCode.UNAVAILABLE, f"unreadable screenshot: {exc}") from exc
    return img.convert("RGB")


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=3)
    return buf.getvalue()


def cross_arm(width: int, height: int) -> tuple[int, int]:
    """Half-length of a cross arm and its line width, scaled to the screen."""
    short = min(width, height)
    return max(short // 40, 8), max(short // 360, 2)


def draw_marks(png: bytes, elements: Iterable[UiElement]) -> bytes:
    img = _open(png)
    draw = ImageDraw.Draw(img)
    arm, line = cross_arm(img.width, img.height)
    font = ImageFont.load_default(size=max(arm, 12))
    for e in elements:
        if not e.actionable:
            continue
        cx, cy = e.center
        half = line // 2
        # The cross: two thin bars through the centre, nothing filled around it.
        draw.rectangle((cx - arm, cy - half, cx + arm, cy - half + line - 1), fill=MARK_COLOR)
        draw.rectangle((cx - half, cy - arm, cx - half + line - 1, cy + arm), fill=MARK_COLOR)
        label = str(e.index)
        x, y = float(cx + arm + line * 2), float(cy - arm - line * 2)
        left, top, right, bottom = draw.textbbox((x, y), label, font=font, anchor="lb")
        if right > img.width:  # keep the label on screen: mirror it to the left of the cross
            x = cx - arm - line * 2 - (right - left)
        if top < 0:
            y = cy + arm + line * 2 + (bottom - top)
        draw.text(
            (x, y),
            label,
            font=font,
            fill=MARK_COLOR,
            anchor="lb",
            stroke_width=max(line // 2, 1),
            stroke_fill=_OUTLINE,
        )
    return _png(img)


def composite(at_action: bytes, settled: bytes, *, scale: float = 0.5) -> bytes:
    """Both frames side by side (at-action left, settled right), scaled, with labels."""
    left, right = _open(at_action), _open(settled)
    w = max(int(left.width * scale), 1)
    h = max(int(left.height * scale), 1)
    gap, band = max(w // 50, 4), max(h // 30, 16)
    out = Image.new("RGB", (w * 2 + gap, h + band), (255, 255, 255))
    out.paste(left.resize((w, h)), (0, band))
    out.paste(right.resize((w, h)), (w + gap, band))
    draw = ImageDraw.Draw(out)
    font = ImageFont.load_default(size=max(band * 2 // 3, 10))
    draw.text((4, 2), "at action", fill=(0, 0, 0), font=font)
    draw.text((w + gap + 4, 2), "settled", fill=(0, 0, 0), font=font)
    return _png(out)


def same_frame(a: bytes, b: bytes, *, threshold: float = 0.5) -> bool:
    """True when ``a`` and ``b`` show the same screen: identical bytes, or a mean absolute
    difference (0–255 grey levels, status bar excluded, at 1/4 scale) below ``threshold``."""
    if a == b:
        return True
    x, y = _open(a), _open(b)
    if x.size != y.size:
        return False
    skip = max(x.height // 30, 1)  # the status bar and its clock
    box = (0, skip, x.width, x.height)
    size = (max(x.width // 4, 1), max((x.height - skip) // 4, 1))
    gx = x.crop(box).convert("L").resize(size)
    gy = y.crop(box).convert("L").resize(size)
    diff = ImageChops.difference(gx, gy)
    return float(ImageStat.Stat(diff).mean[0]) < threshold
