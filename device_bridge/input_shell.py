"""The persistent input shell of remote control: one ``shell,v2,raw:`` session per device
(docs/screen.md), so each ``device.input`` event is a line written to an open shell, not a new
adb connection. :class:`device_bridge.screen.ScreenService` opens one per device and checks
every command before it gets here.
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import threading
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from device_bridge.adb import ShellSocket

__all__ = ["INPUT_TIMEOUT_S", "InputShell"]

INPUT_TIMEOUT_S = 15.0
_MARK = "@dw-input"


class InputShell:
    """One ``shell,v2,raw:`` session on a device, kept open for its input commands.

    Each command is written as one line ending in ``; echo @dw-input N $?``; a reader thread
    finds that line in the output and completes the caller's future with the exit code. One
    command runs at a time (the lock), so events arrive in order.
    """

    def __init__(self, sock: ShellSocket, *, serial: str) -> None:
        self.serial = serial
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        self._count = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self.closed = False
        self._thread = threading.Thread(target=self._read, name=f"input {serial}", daemon=True)
        self._thread.start()

    async def run(self, argv: list[str], *, timeout_s: float = INPUT_TIMEOUT_S) -> int:
        async with self._lock:
            if self.closed:
                raise RpcError(ErrorCode.DEVICE_OFFLINE, f"the input shell of {self.serial} ended")
            n = next(self._count)
            future: asyncio.Future[int] = self._loop.create_future()
            self._waiting[n] = future
            line = f"{shlex.join(argv)}; echo {_MARK} {n} $?\n".encode()
            packet = bytes([0]) + len(line).to_bytes(4, "little") + line  # v2 stdin
            try:
                await asyncio.to_thread(self._sock.sock.sendall, packet)
                async with asyncio.timeout(timeout_s):
                    return await future
            except TimeoutError as exc:
                self.close()
                raise RpcError(ErrorCode.TIMEOUT, f"input on {self.serial} got no answer") from exc
            except OSError as exc:
                self.close()
                raise RpcError(ErrorCode.DEVICE_OFFLINE, f"input shell lost: {exc}") from exc
            finally:
                self._waiting.pop(n, None)

    def _read(self) -> None:
        buf = bytearray()
        text = bytearray()
        try:
            while True:
                data = self._sock.sock.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 5:
                    length = int.from_bytes(buf[1:5], "little")
                    if len(buf) < 5 + length:
                        break
                    kind, payload = buf[0], bytes(buf[5:5 + length])
                    del buf[:5 + length]
                    if kind == 3:
                        return
                    if kind == 1:
                        text += payload
                        self._lines(text)
                if len(text) > 65536:  # output nobody asked for: keep memory bounded
                    del text[:-1024]
        except OSError:
            pass
        finally:
            self._loop.call_soon_threadsafe(self._ended)

    def _lines(self, text: bytearray) -> None:
        while (nl := text.find(b"\n")) >= 0:
            line = text[:nl].decode(errors="replace").strip()
            del text[:nl + 1]
            parts = line.split()
            if len(parts) == 3 and parts[0] == _MARK and parts[1].isdigit():
                code = int(parts[2]) if parts[2].isdigit() else 255
                self._loop.call_soon_threadsafe(self._done, int(parts[1]), code)

    def _done(self, n: int, code: int) -> None:
        future = self._waiting.get(n)
        if future is not None and not future.done():
            future.set_result(code)

    def _ended(self) -> None:
        self.closed = True
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(
                    RpcError(ErrorCode.DEVICE_OFFLINE, f"the input shell of {self.serial} ended"))

    def close(self) -> None:
        self.closed = True
        self._sock.close()
