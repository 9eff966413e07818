"""Drive a SimDevice directly (no sockets): shell command lines for interpreter tests, and a
byte feed standing in for an adb stream for the sync service."""

from __future__ import annotations

from dataclasses import dataclass

from device_bridge.sim.device import SimDevice
from device_bridge.sim.shell import BufferSink, BytesSource


class Feed:
    """An adb stream's two ends for a service: ``data`` is what the host sent, ``out`` the reply."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.out = bytearray()

    async def read_exactly(self, n: int) -> bytes:
        if len(self.data) < n:
            raise EOFError
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk

    async def write(self, data: bytes) -> None:
        self.out += data


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
