"""The adb server's client protocol, spoken by the bridge itself: a connection to the server,
the few ``host:`` requests the bridge makes, the sync protocol's SEND and RECV, and where the
``adb`` binary is.

The server is the real ``adb`` (the binary adbutils ships, or one on ``PATH``); only the client
side is ours. adbutils' client is the same thin layer over a socket, but importing any part of
it runs ``adbutils/__init__``, which loads Pillow, requests and urllib3 for screenshots and
downloads a bridge never makes: about 8 MiB of an idle bridge's memory (docs/benchmarks.md,
"The bridge-only install"). The wire formats are AOSP's (``adb/SERVICES.TXT``,
``adb/SYNC.TXT``): a request is its length in four hex digits then its text; the server
answers ``OKAY``, or ``FAIL`` and a length-prefixed message.

The exception classes keep adbutils' names and texts, which :func:`.errors.translate` maps to
the protocol's errors: :class:`AdbTimeout` on a socket timeout, :class:`AdbConnectionError`
when the server cannot be reached, :class:`AdbError` with the server's ``FAIL`` text.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Self

__all__ = [
    "AdbConnection",
    "AdbConnectionError",
    "AdbError",
    "AdbTimeout",
    "adb_path",
    "sync_pull",
    "sync_push",
]

_OKAY = b"OKAY"
_FAIL = b"FAIL"
CONNECT_TIMEOUT_S = 3.0
SYNC_CHUNK = 64 * 1024  # the sync protocol's largest DATA block (SYNC_DATA_MAX)
# A DATA block or FAIL message claiming more than this is not adb talking: refused, not read.
SYNC_BLOCK_LIMIT = 1024 * 1024


class AdbError(Exception):
    """The adb server (or the device's service) refused or broke off a request."""


class AdbTimeout(AdbError):
    """A socket to the adb server timed out."""


class AdbConnectionError(AdbError):
    """No adb server answers on the address."""


class AdbConnection:
    """One connection to the adb server. It never starts a server: a bridge starts its own,
    on purpose, on the port it was given (:meth:`.host.HostCalls.start_server`)."""

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        self._sock: socket.socket | None = self._safe_connect()

    def _safe_connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._address, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError as exc:
            raise AdbTimeout("connect to adb server timeout") from exc
        except OSError as exc:
            raise AdbConnectionError(f"connect to adb server failed: {exc}") from exc
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    @property
    def conn(self) -> socket.socket:
        if self._sock is None:
            raise AdbError("Connection is closed")
        return self._sock

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)

    def recv(self, n: int) -> bytes:
        """At most ``n`` bytes, whatever has arrived; empty at the end of the stream."""
        try:
            return self.conn.recv(n)
        except TimeoutError as exc:
            raise AdbTimeout("adb recv timeout") from exc

    def read(self, n: int) -> bytes:
        """``n`` bytes, or fewer if the stream ends first."""
        buffer = bytearray()
        try:
            while len(buffer) < n:
                chunk = self.conn.recv(n - len(buffer))
                if not chunk:
                    break
                buffer += chunk
        except TimeoutError as exc:
            raise AdbTimeout("adb read timeout") from exc
        return bytes(buffer)

    def read_exact(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) < n:
            raise EOFError(f"Expected {n} bytes, got {len(data)}")
        return data

    def read_string(self, n: int) -> str:
        return self.read(n).decode("utf-8", errors="replace")

    def send_command(self, cmd: str) -> None:
        data = cmd.encode("utf-8")
        self.send(f"{len(data):04x}".encode() + data)

    def read_string_block(self) -> str:
        """A length-prefixed (four hex digits) text; ``ValueError`` if the prefix is not hex."""
        length = self.read_string(4)
        if not length:
            raise AdbError("connection closed")
        return self.read_string(int(length, 16))

    def check_okay(self) -> None:
        data = self.read(4)
        if data == _FAIL:
            raise AdbError(self.read_string_block())
        if data != _OKAY:
            raise AdbError(f"Unknown data: {data!r}")


# -- the sync protocol (a connection already switched to a device and ``sync:`` opened) -----


def _sync_request(conn: AdbConnection, cmd: bytes, path: str) -> None:
    raw = path.encode("utf-8")
    conn.send(cmd + struct.pack("<I", len(raw)) + raw)


def _sync_length(conn: AdbConnection, what: str) -> int:
    (size,) = struct.unpack("<I", conn.read_exact(4))
    if size > SYNC_BLOCK_LIMIT:
        raise AdbError(f"sync {what} of {size} bytes: more than adb sends")
    return int(size)


def _sync_fail(conn: AdbConnection) -> AdbError:
    return AdbError(conn.read_string(_sync_length(conn, "FAIL message")))


def _is_directory(conn: AdbConnection, path: str) -> bool:
    _sync_request(conn, b"STAT", path)
    if conn.read_exact(4) != b"STAT":
        raise AdbError("Invalid sync reply to STAT")
    mode, _size, _mtime = struct.unpack("<III", conn.read_exact(12))
    return bool(mode & stat.S_IFDIR)


def sync_push(conn: AdbConnection, src: bytes | BinaryIO, path: str, mode: int) -> int:
    """SEND ``src`` to ``path`` with permission bits ``mode``; the bytes sent. A directory at
    ``path`` is an error (a file is never written inside it under some other name)."""
    if _is_directory(conn, path):
        raise AdbError(f"{path} is a directory")
    _sync_request(conn, b"SEND", f"{path},{stat.S_IFREG | (mode & 0o777)}")
    reader = io.BytesIO(src) if isinstance(src, bytes) else src
    total = 0
    while True:
        chunk = reader.read(SYNC_CHUNK)
        if not chunk:
            break
        conn.send(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
        total += len(chunk)
    conn.send(b"DONE" + struct.pack("<I", int(time.time())))
    reply = conn.read_exact(4)
    if reply == _FAIL:
        raise _sync_fail(conn)
    if reply != _OKAY:
        raise AdbError(f"Invalid sync reply: {reply!r}")
    return total


def sync_pull(conn: AdbConnection, path: str) -> Iterator[bytes]:
    """RECV ``path``: its content, block by block."""
    _sync_request(conn, b"RECV", path)
    while True:
        reply = conn.read_exact(4)
        if reply == b"DATA":
            yield conn.read_exact(_sync_length(conn, "DATA block"))
        elif reply == b"DONE":
            return  # its four bytes of zeros are left to the connection's close
        elif reply == _FAIL:
            raise _sync_fail(conn)
        else:
            raise AdbError(f"Invalid sync reply: {reply!r}")


# -- the adb binary ---------------------------------------------------------------------------


def _runs(exe: str) -> bool:
    try:
        subprocess.run([exe, "version"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=30)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return True


def bundled_adb() -> str | None:
    """The ``adb`` adbutils ships, found without importing adbutils (its ``__init__`` loads
    Pillow and requests); None if adbutils is not installed or has no binary here."""
    spec = importlib.util.find_spec("adbutils")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        exe = Path(root) / "binaries" / ("adb.exe" if os.name == "nt" else "adb")
        if exe.is_file():
            return str(exe)
    return None


def adb_path() -> str:
    """The ``adb`` to run, in adbutils' order: ``$ADBUTILS_ADB_PATH``, an ``adb`` on ``PATH``
    that runs, the one adbutils ships."""
    chosen = os.environ.get("ADBUTILS_ADB_PATH")
    if chosen:
        return chosen
    on_path = shutil.which("adb")
    if on_path and _runs(on_path):
        return on_path
    bundled = bundled_adb()
    if bundled is not None and _runs(bundled):
        return bundled
    raise AdbError("No adb exe could be found. Install adb on your system")
