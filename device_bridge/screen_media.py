"""What a screen stream carries: pictures and H.264 access units (docs/screen.md).

:func:`to_picture` turns ``screencap -p`` output into the stream's codec (JPEG or PNG), scaled;
:class:`AnnexB` cuts the phone's ``screenrecord`` H.264 byte stream into access units, and
:class:`H264Reader` reads that stream in a thread of its own, keeping only the newest units.
:class:`device_bridge.screen.ScreenService` sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from protocol.screen_methods import MAX_FRAME_DATA

if TYPE_CHECKING:
    from device_bridge.adb import ShellSocket

__all__ = ["AnnexB", "H264Reader", "to_picture"]


def to_picture(png: bytes, codec: str, max_side: int) -> tuple[bytes, int, int]:
    """``screencap -p`` output → (``codec`` bytes, width, height), scaled to ``max_side``."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as opened:
        opened.load()
        img: Image.Image = opened
        w, h = img.size
        scale = min(1.0, max_side / max(w, h))
        if scale < 1.0 or codec == "jpeg":
            if scale < 1.0:
                size = (max(1, round(w * scale)), max(1, round(h * scale)))
                img = img.resize(size, Image.Resampling.BILINEAR)
            out = io.BytesIO()
            if codec == "jpeg":
                img.convert("RGB").save(out, "JPEG", quality=70)
            else:
                img.save(out, "PNG", compress_level=1)
            return out.getvalue(), img.size[0], img.size[1]
        return png, w, h


class AnnexB:
    """An H.264 Annex B byte stream → access units (bytes), with a key-frame flag.

    An access unit starts at an access unit delimiter, an SPS/PPS/SEI that follows a picture,
    or a picture slice whose ``first_mb_in_slice`` is 0 after another picture. Bounded: an
    access unit longer than :data:`MAX_FRAME_DATA` is dropped (and counted).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._unit = bytearray()
        self._has_picture = False
        self._key = False
        self.oversized = 0

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        self._buf += data
        out: list[tuple[bytes, bool]] = []
        while True:
            head = self._buf.find(b"\x00\x00\x01")
            start = self._buf.find(b"\x00\x00\x01", head + 3) if head >= 0 else -1
            if start < 0:
                break
            # A 4-byte start code belongs to the next NAL unit.
            cut = start - 1 if self._buf[start - 1] == 0 else start
            self._nal(bytes(self._buf[:cut]), out)
            del self._buf[:cut]
        if len(self._buf) > MAX_FRAME_DATA:
            self._buf.clear()
            self._unit.clear()
            self._has_picture = False
            self.oversized += 1
        return out

    def finish(self) -> list[tuple[bytes, bool]]:
        out: list[tuple[bytes, bool]] = []
        if self._buf:
            self._nal(bytes(self._buf), out)
            self._buf.clear()
        self._emit(out)
        return out

    def _emit(self, out: list[tuple[bytes, bool]]) -> None:
        if self._has_picture and self._unit:
            if len(self._unit) <= MAX_FRAME_DATA:
                out.append((bytes(self._unit), self._key))
            else:
                self.oversized += 1
        self._unit.clear()
        self._has_picture = False
        self._key = False

    def _nal(self, nal: bytes, out: list[tuple[bytes, bool]]) -> None:
        head = nal.find(b"\x00\x00\x01")
        if head < 0 or head + 3 >= len(nal):
            return
        kind = nal[head + 3] & 0x1F
        picture = kind in (1, 5)
        if self._has_picture:
            if kind in (6, 7, 8, 9):
                self._emit(out)
            elif picture and head + 4 < len(nal) and nal[head + 4] & 0x80:
                self._emit(out)  # first_mb_in_slice == 0 (ue(v) "1"): a new picture
        self._unit += nal
        if picture:
            self._has_picture = True
        if kind == 5:
            self._key = True


class H264Reader:
    """A thread reading ``screenrecord`` output into access units; the loop takes the newest.

    Holds at most ``keep`` units: when the consumer is slower than the device, older units
    are dropped here (counted as ``backlog`` for the consumer, which then waits for a key
    frame) — the device is never held back and nothing stale piles up.
    """

    def __init__(self, sock: ShellSocket, loop: asyncio.AbstractEventLoop, w: int, h: int,
                 clock: Callable[[], float], keep: int = 8) -> None:
        self.sock = sock
        self.w, self.h = w, h
        self._loop = loop
        self._clock = clock
        self._keep = keep
        self.units: list[tuple[bytes, bool, int, float]] = []
        self.sent = 0  # units taken by the consumer
        self._lost = 0
        self.first = asyncio.Event()
        self._wake = asyncio.Event()
        self._ended = False
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="screenrecord", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        parser = AnnexB()
        n = 0
        try:
            while True:
                data = self.sock.sock.recv(65536)
                if not data:
                    break
                units = parser.feed(data)
                if units:
                    with self._lock:
                        for unit, key in units:
                            n += 1
                            self.units.append((unit, key, n, self._clock() * 1000))
                        while len(self.units) > self._keep:
                            self.units.pop(0)
                            self._lost += 1
                    self._loop.call_soon_threadsafe(self._ready)
            self.reason = "closed"
        except OSError as exc:
            self.reason = f"connection lost: {exc}"
        finally:
            self._ended = True
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._ready)

    def _ready(self) -> None:
        self.first.set()
        self._wake.set()

    def backlog(self) -> int:
        with self._lock:
            lost, self._lost = self._lost, 0
            return lost + len(self.units)

    async def next(self) -> tuple[bytes, bool, int, float] | None:
        while True:
            with self._lock:
                if self.units:
                    return self.units.pop(0)
            if self._ended:
                return None
            self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        self.sock.close()
