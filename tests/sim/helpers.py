"""Run shell command lines on a SimDevice directly (no sockets): for interpreter tests."""

from __future__ import annotations

from dataclasses import dataclass

from device_bridge.sim.device import SimDevice
from device_bridge.sim.shell import BufferSink, BytesSource


@dataclass
class Result:
    code: int
    out: str
    err: str


async def sh(dev: SimDevice, cmdline: str, stdin: bytes = b"") -> Result:
    out, err = BufferSink(), BufferSink()
    code = await dev.run_shell(cmdline, stdin=BytesSource(stdin), stdout=out, stderr=err)
    return Result(code, out.data.decode(errors="replace"), err.data.decode(errors="replace"))


def new_device(**kwargs: object) -> SimDevice:
    kwargs.setdefault("noise_interval", None)
    kwargs.setdefault("seed", 7)
    return SimDevice(**kwargs)  # type: ignore[arg-type]
