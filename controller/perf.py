"""Performance samples of a device's app in front, for the perf stream (docs/agent.md).

Every ``interval_s`` (default 2 s) :class:`PerfSampler` reads, through the caller's own
authorized device calls: ``device.state`` (the app and page in front — a focus change is
flagged — and the battery level), ``dumpsys gfxinfo PKG`` (frames rendered and janky frames:
FPS is the frames rendered since the previous sample over the time between them), ``dumpsys
meminfo PKG`` (total PSS) and ``dumpsys cpuinfo`` (the app's CPU share). A read that fails or
does not apply (no app in front, no process) leaves its field ``null``; a refusal (``forbidden``,
``not_found``: the loan ended) ends the stream.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from protocol.agent_methods import DEVICE_STATE
from protocol.errors import ErrorCode, RpcError
from protocol.methods import SHELL, Method

__all__ = [
    "DEFAULT_INTERVAL_S",
    "MIN_INTERVAL_S",
    "PerfSampler",
    "parse_cpuinfo",
    "parse_gfxinfo",
    "parse_meminfo",
]

Call = Callable[[Method[Any, Any], dict[str, Any]], Awaitable[dict[str, Any]]]

DEFAULT_INTERVAL_S = 2.0
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 60.0
_FRAMES = re.compile(r"Total frames rendered:\s*(\d+)")
_JANKY = re.compile(r"Janky frames:\s*(\d+)\s*\(([\d.]+)%\)")
_PSS = re.compile(r"^\s*TOTAL(?: PSS)?:?\s+(\d+)", re.MULTILINE)
_CPU_LINE = re.compile(r"^\s*([\d.]+)% (\d+)/([\w.:]+): ", re.MULTILINE)
_ENDING = (ErrorCode.FORBIDDEN, ErrorCode.NOT_FOUND)


def parse_gfxinfo(text: str) -> tuple[int | None, float | None]:
    """(frames rendered, janky %) of a ``dumpsys gfxinfo PKG`` report."""
    frames = _FRAMES.search(text)
    janky = _JANKY.search(text)
    return (int(frames[1]) if frames else None, float(janky[2]) if janky else None)


def parse_meminfo(text: str) -> int | None:
    """Total PSS in kB of a ``dumpsys meminfo PKG`` report."""
    m = _PSS.search(text)
    return int(m[1]) if m else None


def parse_cpuinfo(text: str, package: str) -> float | None:
    """The CPU share (%) of ``package``'s processes in a ``dumpsys cpuinfo`` report."""
    shares = [float(m[1]) for m in _CPU_LINE.finditer(text)
              if m[3] == package or m[3].startswith(package + ":")]
    return round(sum(shares), 1) if shares else None


@dataclass
class PerfSampler:
    """Takes samples for one stream; remembers the previous one for FPS and focus changes."""

    call: Call
    _frames: tuple[float, int] | None = None  # (monotonic time, frames rendered)
    _focus: str | None = None

    async def _shell(self, *argv: str) -> str | None:
        try:
            out = await self.call(SHELL, {"argv": list(argv)})
        except RpcError as exc:
            if exc.code in _ENDING:
                raise
            return None
        return str(out.get("stdout", "")) if int(out.get("exit_code", 1)) == 0 else None

    async def sample(self) -> dict[str, Any]:
        state = await self.call(DEVICE_STATE, {})
        package = state.get("package") or None
        focus = f"{package}/{state.get('activity') or ''}" if package else None
        changed = self._focus is not None and focus != self._focus
        self._focus = focus
        out: dict[str, Any] = {
            "ts": time.time(), "package": package, "activity": state.get("activity_short"),
            "focus_changed": changed, "battery": state.get("battery"),
            "cpu_pct": None, "memory_kb": None, "fps": None, "janky_pct": None,
        }
        if package is None:
            self._frames = None
            return out
        gfx = await self._shell("dumpsys", "gfxinfo", package)
        if gfx is not None:
            frames, out["janky_pct"] = parse_gfxinfo(gfx)
            now = time.monotonic()
            if frames is not None:
                before = self._frames
                if before is not None and not changed and frames >= before[1] and now > before[0]:
                    out["fps"] = round((frames - before[1]) / (now - before[0]), 1)
                self._frames = (now, frames)
        mem = await self._shell("dumpsys", "meminfo", package)
        if mem is not None:
            out["memory_kb"] = parse_meminfo(mem)
        cpu = await self._shell("dumpsys", "cpuinfo")
        if cpu is not None:
            out["cpu_pct"] = parse_cpuinfo(cpu, package)
        return out
