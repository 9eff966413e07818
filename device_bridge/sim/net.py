"""The simulated phone's own loopback: sockets between things that run *on the device*.

A real phone's ``127.0.0.1`` is not the host's: ``adb forward tcp:8000 tcp:9000`` reaches port
9000 of the phone, and ``adb reverse tcp:9000 tcp:8000`` makes adbd listen on the phone's port
9000. The simulated phone has the same separation, in memory: :class:`DeviceNet` maps socket
names (``tcp:9000``, ``localabstract:NAME``, ``localreserved:NAME``, ``localfilesystem:PATH``)
to listeners on the device — a ``reverse`` listener of adbd, ``nc -l`` in a shell, or one a test
installs with :meth:`DeviceNet.listen`. Nothing here opens a host port.

A connection is a pair of :class:`DevSocket` ends over two bounded pipes. Like adb streams, it
has no half-close: once either end closes, the other reads what was already sent, then end of
file, and its writes fail.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from device_bridge.sim.shell_io import Pipe

__all__ = ["Accept", "DevSocket", "DeviceNet", "normalize", "socket_pair"]

Accept = Callable[["DevSocket"], Awaitable[None]]
MAX_LISTENERS = 64
MAX_CONNECTIONS = 256
_NAMED = ("localabstract:", "localreserved:", "localfilesystem:")


class DevSocket:
    """One end of an in-device connection."""

    def __init__(self, rx: Pipe, tx: Pipe, on_close: Callable[[], None]) -> None:
        self._rx = rx
        self._tx = tx
        self._on_close = on_close
        self.closed = False

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the peer (or we) closed."""
        if self.closed:
            return b""
        return await self._rx.read(n)

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("socket closed")
        await self._tx.write(data)  # BrokenPipeError once the peer closed

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self._tx.close_write()  # the peer reads what we sent, then end of file
        await self._rx.close_read()  # no half-close: the peer's writes fail from now on
        await self._rx.close_write()  # and our own pending reads end
        self._on_close()


def socket_pair(on_close: Callable[[], None] = lambda: None) -> tuple[DevSocket, DevSocket]:
    a_to_b, b_to_a = Pipe(), Pipe()
    a = DevSocket(b_to_a, a_to_b, on_close)
    b = DevSocket(a_to_b, b_to_a, lambda: None)
    return a, b


def normalize(spec: str) -> str | None:
    """The canonical device socket name of ``spec``, or None if it is not one.

    ``tcp:N`` (also ``tcp:localhost:N`` / ``tcp:127.0.0.1:N``: the phone's own loopback) and the
    three Unix-socket namespaces are understood; any other host is unreachable.
    """
    if spec.startswith("tcp:"):
        rest = spec[4:]
        host, sep, port = rest.rpartition(":")
        if sep and host not in ("localhost", "127.0.0.1", "::1", "[::1]"):
            return None
        if not re.fullmatch(r"\d{1,5}", port) or int(port) > 65535:
            return None
        return f"tcp:{int(port)}"
    for prefix in _NAMED:
        if spec.startswith(prefix):
            name = spec[len(prefix):]
            if not name or len(name) > 256 or "\0" in name:
                return None
            return prefix + name
    return None


@dataclass
class _Listener:
    accept: Accept
    owner: object | None


class DeviceNet:
    """Listeners on the phone's loopback, and connections to them.

    ``spawn(coro)`` runs each accepted connection's handler (the device keeps the task).
    """

    def __init__(self, spawn: Callable[[Awaitable[None]], object]) -> None:
        self._spawn = spawn
        self._listeners: dict[str, _Listener] = {}
        self._ports = itertools.count(38000)  # what `tcp:0` binds to
        self.connections = 0

    def listen(self, spec: str, accept: Accept, *, owner: object | None = None,
               rebind: bool = True) -> str:
        """Listen on ``spec``; returns the bound name (``tcp:0`` picks a port).

        Raises ``OSError`` with adbd's wording when the name is taken and ``rebind`` is off, or
        when the device has too many listeners.
        """
        name = normalize(spec)
        if name is None:
            raise OSError(f"cannot bind listener: malformed '{spec}'")
        if name == "tcp:0":
            name = next(f"tcp:{p}" for p in self._ports if f"tcp:{p}" not in self._listeners)
        if name in self._listeners and not rebind:
            raise OSError("cannot rebind existing socket")
        if name not in self._listeners and len(self._listeners) >= MAX_LISTENERS:
            raise OSError("cannot bind listener: too many listeners")
        self._listeners[name] = _Listener(accept, owner)
        return name

    def unlisten(self, spec: str, *, owner: object | None = None) -> bool:
        name = normalize(spec)
        lst = self._listeners.get(name or "")
        if lst is None or (owner is not None and lst.owner is not owner):
            return False
        del self._listeners[name or ""]
        return True

    def unlisten_all(self, owner: object) -> None:
        for name, lst in list(self._listeners.items()):
            if lst.owner is owner:
                del self._listeners[name]

    def listeners(self, owner: object | None = None) -> list[str]:
        return [n for n, lst in self._listeners.items() if owner is None or lst.owner is owner]

    def is_listening(self, spec: str) -> bool:
        name = normalize(spec)
        return name is not None and name in self._listeners

    def connect(self, spec: str) -> DevSocket | None:
        """Connect to the listener on ``spec``: our end, or None (connection refused)."""
        name = normalize(spec)
        lst = self._listeners.get(name or "")
        if lst is None or self.connections >= MAX_CONNECTIONS:
            return None
        self.connections += 1

        def closed() -> None:
            self.connections -= 1

        ours, theirs = socket_pair(closed)

        async def serve() -> None:
            try:
                await lst.accept(theirs)
            finally:
                await theirs.close()

        self._spawn(serve())
        return ours


async def splice(read: Callable[[], Awaitable[bytes]], write: Callable[[bytes], Awaitable[None]]
                 ) -> None:
    """Copy until ``read`` returns ``b""`` or ``write`` fails."""
    while data := await read():
        try:
            await write(data)
        except (ConnectionError, BrokenPipeError):
            return


async def pump_both(a_read: Callable[[], Awaitable[bytes]], a_write: Callable[[bytes], Awaitable[None]],
                    b_read: Callable[[], Awaitable[bytes]], b_write: Callable[[bytes], Awaitable[None]]
                    ) -> None:
    """Copy a→b and b→a until either direction ends (no half-close), then stop the other."""
    tasks = [asyncio.ensure_future(splice(a_read, b_write)),
             asyncio.ensure_future(splice(b_read, a_write))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
