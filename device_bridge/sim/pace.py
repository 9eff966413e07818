"""How fast the simulated phone does what takes a phone time (docs/simulated-device.md, "Pace").

By default (``instant``) the simulated phone installs, starts processes and plays a test in
no time: a test's own time (its sleeps, a slow disk read on the main thread) only moves the
device's clock, so log lines carry the times a phone would print and tests run fast.

A real phone spends wall time on those, on its own CPU: verifying and optimizing an APK,
forking an app process from zygote, running the test. ``phone`` makes the simulated phone take
that time, asleep, so a benchmark of many devices measures what a lab of phones would see —
the stack's own cost and how it scales — rather than the simulated phones' Python competing
with the stack for the host's cores (a lab's phones never share the host's CPU). Its figures
are deliberately at the fast end of real phones (a small APK on a recent Pixel: installs in
about a second; cold starts of 136 ms to 1.3 s in the corpus's ``Displayed`` lines), so the
stack's share of a run is not understated.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

__all__ = ["PACES", "Pace", "get_pace"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Pace:
    """Wall time the simulated phone spends on each step, in seconds."""

    name: str
    install_s: float = 0.0  # pm install of a small APK: verification, dexopt
    install_s_per_mib: float = 0.0  # and per MiB of APK
    uninstall_s: float = 0.0
    process_start_s: float = 0.0  # am instrument: an app process forked and bound
    real_time: bool = False  # a test's own time elapses for real, not only on the clock

    async def installing(self, size: int) -> None:
        await self.wait(self.install_s + self.install_s_per_mib * size / MIB)

    async def uninstalling(self) -> None:
        await self.wait(self.uninstall_s)

    async def starting_process(self) -> None:
        await self.wait(self.process_start_s)

    async def wait(self, seconds: float) -> None:
        """Spend ``seconds`` of wall time (every step's wait goes through here)."""
        if seconds > 0:
            await asyncio.sleep(seconds)


PACES: dict[str, Pace] = {
    "instant": Pace("instant"),
    "phone": Pace("phone", install_s=0.6, install_s_per_mib=0.1, uninstall_s=0.2,
                  process_start_s=0.3, real_time=True),
}


def get_pace(name: str) -> Pace:
    """The named pace; ``KeyError`` naming the known ones otherwise."""
    try:
        return PACES[name]
    except KeyError:
        raise KeyError(f"unknown pace {name!r}; known: {', '.join(sorted(PACES))}") from None
