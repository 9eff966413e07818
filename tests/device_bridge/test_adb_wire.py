"""The bridge's own adb client (device_bridge/adb/wire.py): it runs the binary adbutils ships,
found without importing adbutils, whose ``__init__`` loads Pillow and requests."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from device_bridge.adb import wire

FIND = """
import json, sys
from device_bridge.adb import wire
print(json.dumps([wire.bundled_adb(), sorted(m for m in ("adbutils", "PIL", "requests")
                                             if m in sys.modules)]))
"""


def test_the_bundled_adb_is_found_without_importing_adbutils() -> None:
    out = subprocess.run([sys.executable, "-c", FIND], capture_output=True, text=True,
                         check=True, timeout=60, env=os.environ)
    path, imported = json.loads(out.stdout)
    import adbutils  # here only, to compare

    assert path == str(Path(adbutils.__file__).parent / "binaries" / "adb")
    assert Path(path).is_file()
    assert imported == []


def test_adb_path_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ADBUTILS_ADB_PATH", "/opt/my/adb")
    assert wire.adb_path() == "/opt/my/adb"
    monkeypatch.delenv("ADBUTILS_ADB_PATH")
    broken = tmp_path / "adb"  # an adb on PATH that does not run is passed over
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert wire.adb_path() == wire.bundled_adb()


@pytest.mark.parametrize("reply", [b"DATA", b"FAIL"])
def test_a_sync_block_larger_than_adb_sends_is_refused_unread(reply: bytes) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        peer, _ = server.accept()
        with peer:
            peer.recv(4096)  # RECV + path
            peer.sendall(reply + struct.pack("<I", 1 << 30))  # then nothing: a read would wait
            peer.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with wire.AdbConnection("127.0.0.1", port) as conn:
            conn.conn.settimeout(10)
            with pytest.raises(wire.AdbError, match="more than adb sends") as info:
                list(wire.sync_pull(conn, "/x"))
            assert not isinstance(info.value, wire.AdbTimeout)
    finally:
        server.close()
        thread.join(10)
