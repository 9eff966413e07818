"""What a command of the simulated shell runs with: its standard streams (sinks, sources, the
bounded pipe between two commands of a pipeline) and :class:`Proc` (argv, environment, streams,
working directory, the device), and the signature every command has (:data:`CommandFn`)."""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "BufferSink",
    "BytesSource",
    "CommandFn",
    "NullSink",
    "Pipe",
    "Proc",
    "Sink",
    "Source",
    "parse_int",
]


class Sink(Protocol):
    async def write(self, data: bytes) -> None: ...


class Source(Protocol):
    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all available when -1); ``b""`` at end of input."""
        ...


class NullSink:
    async def write(self, data: bytes) -> None:
        return None


class BufferSink:
    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data += data


class BytesSource:
    def __init__(self, data: bytes = b"") -> None:
        self._data = memoryview(data)

    async def read(self, n: int = -1) -> bytes:
        if n < 0 or n >= len(self._data):
            out, self._data = bytes(self._data), memoryview(b"")
            return out
        out, self._data = bytes(self._data[:n]), self._data[n:]
        return out


class Pipe:
    """A bounded in-memory pipe between two commands of a pipeline."""

    def __init__(self, limit: int = 64 * 1024) -> None:
        self._buf = bytearray()
        self._limit = limit
        self._cond = asyncio.Condition()
        self._write_closed = False
        self._read_closed = False

    async def write(self, data: bytes) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: len(self._buf) < self._limit or self._read_closed)
            if self._read_closed:
                raise BrokenPipeError("pipe reader has gone")
            self._buf += data
            self._cond.notify_all()

    async def read(self, n: int = -1) -> bytes:
        async with self._cond:
            await self._cond.wait_for(lambda: bool(self._buf) or self._write_closed)
            take = len(self._buf) if n < 0 else min(n, len(self._buf))
            out = bytes(self._buf[:take])
            del self._buf[:take]
            self._cond.notify_all()
            return out

    async def close_write(self) -> None:
        async with self._cond:
            self._write_closed = True
            self._cond.notify_all()

    async def close_read(self) -> None:
        async with self._cond:
            self._read_closed = True
            self._buf.clear()
            self._cond.notify_all()


@dataclass
class Proc:
    """What a command sees: its argv, environment, standard streams and the device."""

    argv: list[str]
    env: dict[str, str]
    stdin: Source
    stdout: Sink
    stderr: Sink
    device: Any
    cwd: str = "/"

    async def out(self, text: str) -> None:
        await self.stdout.write(text.encode())

    async def err(self, text: str) -> None:
        await self.stderr.write(text.encode())

    def path(self, p: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, p))


CommandFn = Callable[[Proc], Awaitable[int]]


def parse_int(text: str) -> int | None:
    """A command's integer argument, or ``None`` when ``text`` is not one."""
    try:
        return int(text)
    except ValueError:
        return None
