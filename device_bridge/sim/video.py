"""The simulated phone's ``screenrecord --output-format=h264 -`` (docs/screen.md).

A phone's ``screenrecord`` hands its display to the hardware encoder and writes the raw H.264
stream (Annex B) to stdout. The simulated phone does the same with libx264 from PyAV's wheel:
its rendered screen (the picture ``screencap`` returns), scaled to ``--size``, encoded at a
low frame rate (:data:`FPS`, so a test machine's CPU stays free) with a key frame every second
and SPS/PPS in front of each (as Android's encoder does), so a viewer can start at any key
frame. Baseline profile, no B-frames: what WebCodecs' ``avc1.42E01F`` decodes.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from PIL import Image

__all__ = ["FPS", "H264Encoder", "available"]

FPS = 5


def available() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


class H264Encoder:
    """Pictures in, Annex B bytes out (one call per picture; the encoder never waits)."""

    def __init__(self, width: int, height: int, *, fps: int = FPS, bit_rate: int = 2_000_000):
        import av

        self.width, self.height = width & ~1, height & ~1
        ctx: Any = av.CodecContext.create("libx264", "w")
        ctx.width, ctx.height = self.width, self.height
        ctx.pix_fmt = "yuv420p"
        ctx.time_base = Fraction(1, fps)
        ctx.framerate = Fraction(fps, 1)
        ctx.bit_rate = bit_rate
        ctx.profile = "Baseline"
        ctx.options = {
            "preset": "ultrafast",
            "tune": "zerolatency",
            "x264-params": f"keyint={fps}:min-keyint={fps}:scenecut=0:repeat-headers=1:bframes=0",
        }
        ctx.open()
        self._ctx = ctx
        self._pts = 0

    def encode(self, image: Image.Image) -> bytes:
        import av

        if image.size != (self.width, self.height):
            image = image.resize((self.width, self.height), Image.Resampling.BILINEAR)
        frame = av.VideoFrame.from_image(image.convert("RGB"))  # type: ignore[no-untyped-call]
        frame = frame.reformat(format="yuv420p")
        frame.pts = self._pts
        self._pts += 1
        return b"".join(bytes(packet) for packet in self._ctx.encode(frame))

    def close(self) -> bytes:
        out = b"".join(bytes(packet) for packet in self._ctx.encode(None))
        return out
