"""The ``sync:`` service: STAT/STA2/LST2, LIST/LIS2, SEND, RECV, QUIT (AOSP adb ``SYNC.TXT``).

Requests are parsed from the stream as bytes, never per WRTE: ``id(4) + u32 length + path``,
and for SEND a run of ``DATA u32 n + n bytes`` chunks closed by ``DONE u32 mtime``. adbutils
sends one request per ``sync:`` stream and just closes it; the adb CLI sends several and ends
with QUIT.
"""

from __future__ import annotations

import errno
import struct
from typing import Protocol

from device_bridge.sim.files import FileStat, SimFiles

__all__ = ["SyncStream", "serve_sync"]

MAX_PATH = 1024
MAX_DATA = 64 * 1024  # SYNC_DATA_MAX
_U32 = struct.Struct("<I")
_STAT2 = struct.Struct("<IQQIIIIQqqq")  # error dev ino mode nlink uid gid size atime mtime ctime


class SyncStream(Protocol):
    async def read_exactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; raise ``EOFError`` if the stream ends first."""
        ...

    async def write(self, data: bytes) -> None: ...


def _stat_v1(st: FileStat | None) -> bytes:
    if st is None:
        return b"STAT" + bytes(12)
    return b"STAT" + struct.pack("<III", st.mode, st.size & 0xFFFFFFFF, st.mtime)


def _stat_v2_body(st: FileStat | None, err: int = errno.ENOENT) -> bytes:
    if st is None:
        return _STAT2.pack(err, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return _STAT2.pack(0, 0xFD00, 1, st.mode, 1, 2000, 2000,
                       st.size, st.mtime, st.mtime, st.mtime)


def _fail(message: str) -> bytes:
    body = message.encode()
    return b"FAIL" + _U32.pack(len(body)) + body


async def serve_sync(stream: SyncStream, files: SimFiles) -> None:
    """Serve requests until QUIT or the end of the stream (even mid-request: adbutils just
    closes its socket after one request)."""
    try:
        await _serve(stream, files)
    except EOFError:
        return


async def _serve(stream: SyncStream, files: SimFiles) -> None:
    while True:
        header = await stream.read_exactly(8)
        rid, length = header[:4], _U32.unpack_from(header, 4)[0]
        if rid == b"QUIT":
            return
        if length > MAX_PATH:
            await stream.write(_fail(f"path too long: {length} bytes"))
            return
        raw = await stream.read_exactly(length)
        path = raw.decode("utf-8", errors="replace")
        if rid == b"STAT":
            await stream.write(_stat_v1(_safe_stat(files, path)))
        elif rid in (b"STA2", b"LST2"):
            st = _safe_stat(files, path)
            await stream.write(rid + _stat_v2_body(st))
        elif rid in (b"LIST", b"LIS2"):
            await stream.write(_listing(files, path, v2=rid == b"LIS2"))
        elif rid == b"SEND":
            if not await _receive_file(stream, files, path):
                return
        elif rid == b"RECV":
            await _send_file(stream, files, path)
        else:
            await stream.write(_fail(f"unknown command {rid.hex()}"))
            return


def _safe_stat(files: SimFiles, path: str) -> FileStat | None:
    try:
        return files.stat(path)
    except OSError:
        return None


def _listing(files: SimFiles, path: str, *, v2: bool) -> bytes:
    try:
        entries = files.listdir(path)
        own = files.stat(path)
    except OSError:
        entries, own = [], None
    if own is not None:
        entries = [(".", own), ("..", FileStat(0o40755, 4096, own.mtime)), *entries]
    out = bytearray()
    for name, st in entries:
        bname = name.encode()
        if v2:
            out += b"DNT2" + _stat_v2_body(st) + _U32.pack(len(bname)) + bname
        else:
            out += b"DENT" + struct.pack("<IIII", st.mode, st.size & 0xFFFFFFFF, st.mtime, len(bname))
            out += bname
    # The terminator is a full-size zeroed entry.
    out += b"DONE" + bytes(72 if v2 else 16)
    return bytes(out)


async def _receive_file(stream: SyncStream, files: SimFiles, spec: str) -> bool:
    """SEND: read DATA chunks until DONE; reply OKAY or FAIL. False if the stream is unusable."""
    path, comma, mode_text = spec.rpartition(",")
    if not comma:
        path, mode_text = spec, "0o100644"
    try:
        mode = int(mode_text, 8) if mode_text.startswith("0") and mode_text != "0" else int(mode_text)
    except ValueError:
        mode = 0o100644
    data = bytearray()
    error: str | None = None
    if _safe_stat(files, path) is not None and files.is_dir(path):
        error = f"couldn't create file: {path}: Is a directory"
    while True:
        head = await stream.read_exactly(8)
        kind, n = head[:4], _U32.unpack_from(head, 4)[0]
        if kind == b"DATA":
            if n > MAX_DATA:
                await stream.write(_fail(f"data chunk of {n} bytes exceeds {MAX_DATA}"))
                return False
            chunk = await stream.read_exactly(n)
            if error is None:
                data += chunk
                if len(data) > files.quota:
                    error = f"couldn't write {path}: No space left on device"
                    data.clear()
        elif kind == b"DONE":
            if error is None:
                try:
                    files.write(path, bytes(data), mode=mode, mtime=n)
                except OSError as exc:
                    error = f"couldn't create file: {exc}"
            await stream.write(_fail(error) if error else b"OKAY" + bytes(4))
            return True
        else:
            await stream.write(_fail(f"unexpected {kind!r} during SEND"))
            return False


async def _send_file(stream: SyncStream, files: SimFiles, path: str) -> None:
    try:
        data = files.read(path)
    except IsADirectoryError:
        await stream.write(_fail("open failed: Is a directory"))
        return
    except PermissionError:
        await stream.write(_fail("open failed: Permission denied"))
        return
    except OSError:
        await stream.write(_fail("open failed: No such file or directory"))
        return
    view = memoryview(data)
    for off in range(0, len(view), MAX_DATA):
        chunk = view[off : off + MAX_DATA]
        await stream.write(b"DATA" + _U32.pack(len(chunk)) + chunk)
    await stream.write(b"DONE" + bytes(4))
