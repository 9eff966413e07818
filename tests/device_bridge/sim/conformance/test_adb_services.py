"""adbd's services through the real adb server: the adb CLI and adbutils, as a user-build phone.

reverse and forward both ways, tcp: targets on the phone, jdwp, the services a user build
refuses, reboot, and a secure phone's "unauthorized" → "Allow" → "device".
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import adbutils
import pytest

from device_bridge.sim.threaded import ThreadedSimDevice
from tests.adb_support import CONNECT_TIMEOUT, free_port, wait_for_state

pytestmark = [pytest.mark.adb, pytest.mark.timeout(60)]

CLI_TIMEOUT = 20.0

# adbutils 2.12 leaves its socket open when the server answers FAIL (create_connection to a
# closed port, a call on an unauthorized device): openatx/adbutils#178.
ADBUTILS_LEAKS_ON_FAIL = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")


@contextlib.contextmanager
def upper_server() -> Iterator[int]:
    """A host TCP server: reads one line, answers it upper-cased, closes. Yields its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(CLI_TIMEOUT)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(CLI_TIMEOUT)
                data = b""
                with contextlib.suppress(OSError):
                    while not data.endswith(b"\n"):
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(data.upper())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() alone does not)
        srv.close()
        t.join(CLI_TIMEOUT)


def test_reverse_then_forward_through_the_phone(sim_device, adb_server):
    """host:F → (forward) → phone tcp:7100 → (reverse) → host upper_server."""
    s = ("-s", sim_device.address)
    with upper_server() as port:
        r = adb_server.cli(*s, "reverse", "tcp:7100", f"tcp:{port}", timeout=CLI_TIMEOUT)
        assert r.returncode == 0, r.stderr
        listing = adb_server.cli(*s, "reverse", "--list", timeout=CLI_TIMEOUT).stdout
        assert f"tcp:7100 tcp:{port}" in listing
        # Something on the phone connects to its port 7100 and reaches the host.
        out = adb_server.cli(*s, "shell", "echo ping | nc 127.0.0.1 7100", timeout=CLI_TIMEOUT)
        assert (out.returncode, out.stdout) == (0, "PING\n"), out.stderr
        # And the host reaches the phone's port 7100 with forward.
        local = free_port()
        f = adb_server.cli(*s, "forward", f"tcp:{local}", "tcp:7100", timeout=CLI_TIMEOUT)
        assert f.returncode == 0, f.stderr
        with socket.create_connection(("127.0.0.1", local), timeout=CLI_TIMEOUT) as c:
            c.sendall(b"through\n")
            assert c.makefile("rb").readline() == b"THROUGH\n"
        adb_server.cli(*s, "forward", "--remove", f"tcp:{local}", timeout=CLI_TIMEOUT)
        rm = adb_server.cli(*s, "reverse", "--remove", "tcp:7100", timeout=CLI_TIMEOUT)
        assert rm.returncode == 0, rm.stderr
        gone = adb_server.cli(*s, "reverse", "--remove", "tcp:7100", timeout=CLI_TIMEOUT)
        assert gone.returncode != 0 and "not found" in gone.stderr
    refused = adb_server.cli(*s, "shell", "nc 127.0.0.1 7100", timeout=CLI_TIMEOUT)
    assert refused.returncode == 1 and "Connection refused" in refused.stderr


def test_reverse_tcp_0_and_norebind(sim_device, adb_server):
    s = ("-s", sim_device.address)
    with upper_server() as port:
        r = adb_server.cli(*s, "reverse", "tcp:0", f"tcp:{port}", timeout=CLI_TIMEOUT)
        assert r.returncode == 0, r.stderr
        bound = int(r.stdout.strip())
        assert 0 < bound <= 65535
        again = adb_server.cli(*s, "reverse", "--no-rebind", f"tcp:{bound}", f"tcp:{port}",
                               timeout=CLI_TIMEOUT)
        assert again.returncode != 0 and "cannot rebind" in again.stderr
        assert adb_server.cli(*s, "reverse", "--remove-all").returncode == 0
        assert adb_server.cli(*s, "reverse", "--list").stdout.strip() == ""


@ADBUTILS_LEAKS_ON_FAIL
def test_adbutils_reverse_and_create_connection(sim_device):
    d = sim_device.adb
    with upper_server() as port:
        d.reverse("tcp:7200", f"tcp:{port}")
        assert [(r.remote, r.local) for r in d.reverse_list()] == [("tcp:7200", f"tcp:{port}")]
        conn = d.create_connection(adbutils.Network.TCP, 7200)
        with conn:
            conn.settimeout(CLI_TIMEOUT)
            conn.sendall(b"adbutils\n")
            assert conn.makefile("rb").readline() == b"ADBUTILS\n"
        d.reverse_remove_all()
        assert d.reverse_list() == []
    with pytest.raises(adbutils.AdbError):
        d.create_connection(adbutils.Network.TCP, 7200)  # nothing listens: refused


def test_jdwp_lists_no_debuggable_process(sim_device, adb_server):
    r = adb_server.cli("-s", sim_device.address, "jdwp", timeout=CLI_TIMEOUT)
    assert (r.returncode, r.stdout) == (0, "")


@pytest.mark.parametrize(("args", "expected"), [
    (("root",), "adbd cannot run as root in production builds\n"),
    (("unroot",), "adbd not running as root\n"),
    (("remount",), 'Not running as root. Try "adb root" first.\n'),
    (("tcpip", "5555"), "restarting in TCP mode port: 5555\n"),
    (("usb",), "restarting in USB mode\n"),
])
def test_user_build_answers(sim_device, adb_server, args, expected):
    r = adb_server.cli("-s", sim_device.address, *args, timeout=CLI_TIMEOUT)
    assert r.stdout + r.stderr == expected or expected in r.stdout + r.stderr
    # The device stays usable after each.
    assert sim_device.adb.shell("echo ok") == "ok"


def test_adbutils_root_and_tcpip(sim_device):
    d = sim_device.adb
    assert d.root().strip() == "adbd cannot run as root in production builds"
    assert d.tcpip(5555).strip() == "restarting in TCP mode port: 5555"


def test_sideload_is_refused_quickly(sim_device, adb_server, tmp_path):
    pkg = tmp_path / "ota.zip"
    pkg.write_bytes(b"PK\x05\x06" + bytes(18))
    r = adb_server.cli("-s", sim_device.address, "sideload", str(pkg), timeout=CLI_TIMEOUT)
    assert r.returncode != 0


def test_reboot_drops_the_connection_and_the_phone_boots_again(adb_server):
    with ThreadedSimDevice(port=0, noise_interval=None) as sim:
        client = adb_server.client()
        try:
            assert "connected" in client.connect(sim.address, timeout=CONNECT_TIMEOUT)
            wait_for_state(client, sim.address, "device")
            sim.call(lambda: sim.device.start_process("com.android.chrome"))
            r = adb_server.cli("-s", sim.address, "reboot", timeout=CLI_TIMEOUT)
            assert r.returncode == 0, r.stderr
            assert sim.call(lambda: (sim.device.boots, sim.device.processes)) == (2, {})
            wait_for_state(client, sim.address, "offline")
        finally:
            with contextlib.suppress(adbutils.AdbError, OSError):
                client.disconnect(sim.address)
        # A new connection finds the booted phone.
        client.connect(sim.address, timeout=CONNECT_TIMEOUT)
        try:
            wait_for_state(client, sim.address, "device")
            assert client.device(sim.address).shell("echo up") == "up"
        finally:
            with contextlib.suppress(adbutils.AdbError, OSError):
                client.disconnect(sim.address)


@ADBUTILS_LEAKS_ON_FAIL
def test_secure_phone_unauthorized_until_the_user_allows(adb_server):
    with ThreadedSimDevice(port=0, noise_interval=None, auth=True) as sim:
        client = adb_server.client()
        try:
            client.connect(sim.address, timeout=CONNECT_TIMEOUT)
            wait_for_state(client, sim.address, "unauthorized")
            with pytest.raises(adbutils.AdbError, match="unauthorized"):
                client.device(sim.address).shell("echo no")
            prompts = sim.call(lambda: [p.comment for p in sim.device.pending_keys])
            assert len(prompts) == 1
            assert sim.call(lambda: sim.device.allow()) == 1
            wait_for_state(client, sim.address, "device")
            d = client.device(sim.address)
            assert d.shell("getprop ro.adb.secure") == "1"
        finally:
            with contextlib.suppress(adbutils.AdbError, OSError):
                client.disconnect(sim.address)
        # The key was kept ("always allow"): the next connection needs no prompt.
        client.connect(sim.address, timeout=CONNECT_TIMEOUT)
        try:
            wait_for_state(client, sim.address, "device")
            assert sim.call(lambda: sim.device.pending_keys) == []
        finally:
            with contextlib.suppress(adbutils.AdbError, OSError):
                client.disconnect(sim.address)
