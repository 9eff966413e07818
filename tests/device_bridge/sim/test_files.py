"""The device's file system and the sync service on it (no sockets)."""

from __future__ import annotations

import struct

import pytest

from device_bridge.sim.files import SimFiles
from device_bridge.sim.sync import serve_sync
from tests.device_bridge.sim.helpers import Feed


def send(path: str, body: bytes, mode: int = 0o100644) -> bytes:
    spec = f"{path},{mode}".encode()
    return (b"SEND" + struct.pack("<I", len(spec)) + spec + b"DATA" + struct.pack("<I", len(body))
            + body + b"DONE" + struct.pack("<I", 99))


def test_permissions_like_the_shell_user():
    files = SimFiles()
    files.write("/data/local/tmp/a/b/c.txt", b"x", mode=0o104777)
    assert files.is_dir("/data/local/tmp/a/b")
    assert oct(files.stat("/data/local/tmp/a/b/c.txt").mode) == "0o100777"  # no setuid
    with pytest.raises(PermissionError):
        files.write("/system/bin/sh", b"evil")
    with pytest.raises(PermissionError):
        files.write("/data/local/tmp", b"not a file")
    with pytest.raises(PermissionError):
        files.listdir("/data")
    with pytest.raises(PermissionError):
        files.read("/data/system/packages.xml")
    with pytest.raises(PermissionError):
        files.remove("/data/local/tmp")
    with pytest.raises(OSError):
        files.write("/data/local/tmp/\0x", b"")
    with pytest.raises(IsADirectoryError):
        files.remove("/data/local/tmp/a")
    files.remove("/data/local/tmp/a", recursive=True)
    assert files.listdir("/data/local/tmp") == []


def test_quota_bounds_memory():
    files = SimFiles(quota=1000)
    files.write("/data/local/tmp/a", b"x" * 600)
    with pytest.raises(OSError, match="No space left"):
        files.write("/data/local/tmp/b", b"x" * 600)
    files.write("/data/local/tmp/a", b"x" * 900)  # replacing frees the old bytes


async def test_sync_send_over_quota_fails_and_keeps_nothing():
    files = SimFiles(quota=1000)
    feed = Feed(send("/data/local/tmp/big", b"y" * 2000))
    await serve_sync(feed, files)
    assert feed.out.startswith(b"FAIL")
    assert files.stat("/data/local/tmp/big") is None


async def test_sync_send_outside_the_writable_places_fails():
    files = SimFiles()
    feed = Feed(send("/system/xbin/su", b"#!"))
    await serve_sync(feed, files)
    assert feed.out.startswith(b"FAIL") and b"Permission denied" in feed.out


async def test_sync_stat_list_and_recv():
    files = SimFiles()
    files.write("/data/local/tmp/f", b"hello", mtime=7)
    path = b"/data/local/tmp/"
    feed = Feed(b"STAT" + struct.pack("<I", len(path)) + path
                + b"LIST" + struct.pack("<I", len(path)) + path
                + b"STA2" + struct.pack("<I", 7) + b"/nope/x"
                + b"RECV" + struct.pack("<I", 17) + b"/data/local/tmp/f"
                + b"QUIT" + bytes(4) + b"ignored after QUIT")
    await serve_sync(feed, files)
    out = bytes(feed.out)
    mode, _size, _mtime = struct.unpack_from("<III", out, 4)
    assert out[:4] == b"STAT" and mode == 0o40771
    listing = out[16:]
    assert listing.count(b"DENT") == 3  # ".", "..", "f"
    done = listing.index(b"DONE")
    assert listing[done:done + 20] == b"DONE" + bytes(16)
    sta2 = listing[done + 20:done + 20 + 72]
    assert sta2[:4] == b"STA2" and struct.unpack_from("<I", sta2, 4)[0] == 2  # ENOENT
    rest = listing[done + 92:]
    assert rest == b"DATA" + struct.pack("<I", 5) + b"hello" + b"DONE" + bytes(4)
