"""End to end: the real adb server (and adb's own CLI) driving the simulated device."""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import subprocess
import sys

import adbutils
import pytest
from PIL import Image

from device_bridge.sim.apk import SimPackage, build_apk
from tests.adb_support import AdbServer, connected_sim, start_adb_server
from tests.conftest import TIME_SCALE, require_or_skip

pytestmark = pytest.mark.adb

THREADTIME = re.compile(
    r"^(\d\d-\d\d) (\d\d:\d\d:\d\d\.\d{3})\s+(\d+)\s+(\d+) ([VDIWEF]) (.*?)\s*: (.*)$")


def test_connect_lists_the_device_with_its_profile(sim_device, adb_server):
    listed = {d.serial: d.state for d in adb_server.client().list()}
    assert listed[sim_device.address] == "device"
    assert sim_device.adb.prop.model == "Pixel 7"
    assert sim_device.adb.getprop("ro.build.version.sdk") == "34"
    assert "model:Pixel_7" in adb_server.cli("devices", "-l").stdout
    features = sim_device.adb.get_features().split(",")
    assert set(features) == {"shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir"}


def test_shell_v1_and_v2_with_exit_codes(sim_device):
    d = sim_device.adb
    assert d.shell("echo hi") == "hi"
    assert d.shell(["echo", "a b", "&"]) == "a b &"
    v1 = d.shell2("echo out; false")
    assert (v1.returncode, v1.output) == (1, "out\n")
    v2 = d.shell2("echo out; echo err >&2; exit 7", v2=True)
    assert (v2.returncode, v2.stdout, v2.stderr) == (7, "out\n", "err\n")
    unknown = d.shell2("no-such-tool --x", v2=True)
    assert unknown.returncode == 127
    assert unknown.stderr == "/system/bin/sh: no-such-tool: inaccessible or not found\n"
    executed = sim_device.call(lambda: [
        e.message for e in sim_device.device.logbuf.entries() if e.tag == "SimShell"])
    assert executed == ["echo hi", "echo 'a b' '&'", "echo out; false; echo X4EXIT:$?",
                        "echo out; echo err >&2; exit 7", "no-such-tool --x"]


def test_logcat_follow_streams_10000_lines_none_lost_in_order(sim_device):
    conn = sim_device.adb.shell("logcat -v threadtime", stream=True)
    sock = conn.conn
    sock.settimeout(30 * TIME_SCALE)
    burst = None
    got: list[str] = []
    pending = b""
    try:
        while len(got) < 10_000:
            chunk = sock.recv(65536)
            assert chunk, "logcat stream ended early"
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                line = raw.decode()
                if burst is None and line.endswith("SimShell: logcat -v threadtime"):
                    # logcat is attached (its dump is on the wire): now the app logs a flood.
                    burst = sim_device.submit(
                        lambda: sim_device.device.log_burst(10_000, tag="Flood", pid=31337))
                m = THREADTIME.match(line)
                if m and m.group(6) == "Flood":
                    assert m.group(3) == "31337"
                    got.append(m.group(7))
    finally:
        conn.close()
    assert burst is not None
    burst.result(10 * TIME_SCALE)
    assert got == [f"line {i}" for i in range(10_000)]


def test_push_and_pull_5_mb_with_matching_hash(sim_device):
    d = sim_device.adb
    data = os.urandom(5 * 1024 * 1024)
    d.sync.push(io.BytesIO(data), "/data/local/tmp/droidwire/big.bin")
    assert d.sync.stat("/data/local/tmp/droidwire/big.bin").size == len(data)
    back = d.sync.read_bytes("/data/local/tmp/droidwire/big.bin")
    assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()
    assert [f.path for f in d.sync.list("/data/local/tmp/droidwire")] == [".", "..", "big.bin"]
    assert d.shell2("rm /data/local/tmp/droidwire/big.bin").returncode == 0
    assert not d.sync.exists("/data/local/tmp/droidwire/big.bin")
    with pytest.raises(adbutils.AdbError):
        d.sync.read_bytes("/data/local/tmp/nothing-here")


def test_install_then_pm_list_packages(sim_device, tmp_path):
    apk = tmp_path / "demo.apk"
    apk.write_bytes(build_apk(SimPackage(package="com.example.demo", kind="app")))
    d = sim_device.adb
    d.install(str(apk), nolaunch=True, silent=True)
    assert "com.example.demo" in d.list_packages()
    assert not d.sync.exists("/data/local/tmp/unknown.apk")  # adbutils removed what it pushed
    bogus = tmp_path / "bogus.apk"
    bogus.write_bytes(b"not a zip at all")
    with pytest.raises(adbutils.AdbInstallError, match="INSTALL_PARSE_FAILED_NOT_APK"):
        d.install(str(bogus), nolaunch=True, silent=True)
    assert "com.example.demo" in d.list_packages()


@pytest.mark.parametrize(("profile", "size"), [("pixel-7", (1080, 2400)),
                                               ("old-nexus", (1080, 1920))])
def test_screenshot_is_a_png_of_the_profile_size(adb_server, profile, size):
    with connected_sim(adb_server, profile=profile) as sim:
        img = sim.adb.screenshot()
        assert img.size == size
        raw = adb_server.cli("-s", sim.address, "exec-out", "screencap", "-p", text=False)
        assert raw.returncode == 0
        decoded = Image.open(io.BytesIO(raw.stdout))
        assert (decoded.format, decoded.size) == ("PNG", size)


def test_device_goes_offline_when_the_simulator_stops_and_comes_back(sim_device, adb_server):
    assert sim_device.adb.shell("echo before") == "before"
    sim_device.sim.stop_device()
    sim_device.wait_state("offline")
    # (adb's CLI, not adbutils: adbutils leaks its socket when a transport is refused)
    during = adb_server.cli("-s", sim_device.address, "shell", "echo", "during")
    assert during.returncode != 0 and "offline" in during.stderr
    sim_device.sim.start()
    sim_device.wait_state("device", timeout=40)
    assert sim_device.adb.shell("echo after") == "after"


def test_adb_cli_shell_sync_logcat_and_install(sim_device, adb_server, tmp_path):
    s = ("-s", sim_device.address)
    hi = adb_server.cli(*s, "shell", "echo", "hi")
    assert (hi.returncode, hi.stdout) == (0, "hi\n")
    unknown = adb_server.cli(*s, "shell", "nosuch")
    assert unknown.returncode == 127
    assert unknown.stderr == "/system/bin/sh: nosuch: inaccessible or not found\n"
    assert adb_server.cli(*s, "shell", "exit 4").returncode == 4
    local = tmp_path / "payload.bin"
    local.write_bytes(os.urandom(300_000))
    assert adb_server.cli(*s, "push", str(local), "/data/local/tmp/p.bin").returncode == 0
    assert "p.bin" in adb_server.cli(*s, "shell", "ls", "/data/local/tmp").stdout
    pulled = tmp_path / "pulled.bin"
    pull = adb_server.cli(*s, "pull", "/data/local/tmp/p.bin", str(pulled))
    assert pull.returncode == 0, pull.stderr
    assert pulled.read_bytes() == local.read_bytes()
    missing = adb_server.cli(*s, "pull", "/data/local/tmp/none", str(tmp_path / "x"))
    assert missing.returncode != 0 and "No such file or directory" in missing.stderr
    logcat = adb_server.cli(*s, "logcat", "-d")
    assert logcat.returncode == 0 and "SimShell: ls /data/local/tmp" in logcat.stdout
    apk = tmp_path / "cli.apk"
    apk.write_bytes(build_apk(SimPackage(package="com.example.cli", kind="app")))
    install = adb_server.cli(*s, "install", "-r", "-t", str(apk))
    assert install.returncode == 0 and "Success" in install.stdout
    assert "package:com.example.cli" in adb_server.cli(*s, "shell", "pm list packages").stdout
    uninstall = adb_server.cli(*s, "uninstall", "com.example.cli")
    assert (uninstall.returncode, uninstall.stdout) == (0, "Success\n")


def test_adb_cli_pushes_and_pulls_directory_trees(sim_device, adb_server, tmp_path):
    s = ("-s", sim_device.address)
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    files = {"a.txt": b"alpha", "sub/b.bin": os.urandom(70_000), "sub/deeper/c": b""}
    for rel, data in files.items():
        (tree / rel).write_bytes(data)
    push = adb_server.cli(*s, "push", str(tree), "/data/local/tmp/")
    assert push.returncode == 0, push.stderr
    listing = adb_server.cli(*s, "ls", "/data/local/tmp/tree/sub")
    assert sorted(line.split()[-1] for line in listing.stdout.splitlines()) == [
        ".", "..", "b.bin", "deeper"]
    back = tmp_path / "back"
    back.mkdir()
    pull = adb_server.cli(*s, "pull", "/data/local/tmp/tree", str(back))
    assert pull.returncode == 0, pull.stderr
    for rel, data in files.items():
        assert (back / "tree" / rel).read_bytes() == data


@pytest.mark.parametrize("service", ["framebuffer:", "jdwp:1234", "sideload-host:10:10",
                                     "no-such-service:"])
def test_unknown_services_are_refused(sim_device, service):
    c = sim_device.adb.open_transport()
    try:
        c.send_command(service)
        with pytest.raises(adbutils.AdbError):
            c.check_okay()
    finally:
        c.close()


def test_several_devices_in_one_process(adb_server):
    with connected_sim(adb_server, profile="galaxy-a52") as a, \
            connected_sim(adb_server, profile="old-nexus") as b:
        assert a.adb.getprop("ro.product.model") == "SM-A525F"
        assert b.adb.getprop("ro.build.version.sdk") == "28"
        listed = {d.serial for d in adb_server.client().device_list()}
        assert {a.address, b.address} <= listed


def test_sim_device_command_line(adb_server):
    cmd = [sys.executable, "-c", "from droidwire import main; main()",
           "sim-device", "--port", "0", "--profile", "old-nexus", "--serial", "CLI123",
           "--noise", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        match = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        assert match, first + (proc.stderr.read() if proc.poll() is not None else "")
        address = match.group(1)
        client = adb_server.client()
        assert "connected to" in client.connect(address, timeout=15)
        try:
            from tests.adb_support import wait_for_state
            wait_for_state(client, address, "device")
            d = client.device(address)
            assert d.getprop("ro.serialno") == "CLI123"
            assert d.getprop("ro.product.model") == "Nexus 5X"
        finally:
            client.disconnect(address)
        proc.terminate()  # SIGTERM: a clean stop
        out, _err = proc.communicate(timeout=10 * TIME_SCALE)
        assert proc.returncode == 0 and out.endswith("stopped\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_simulator_tolerates_garbage_and_half_open_connections(sim_device):
    port = int(sim_device.address.rsplit(":", 1)[1])
    for payload in (b"", b"GET / HTTP/1.0\r\n\r\n" + b"x" * 100):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(payload)
    assert sim_device.adb.shell("echo still-here") == "still-here"


def test_debian_adb_accepts_the_device_too(tmp_path):
    require_or_skip(os.path.exists("/usr/bin/adb"), "Debian's adb (/usr/bin/adb) not installed")
    server: AdbServer = start_adb_server("/usr/bin/adb")
    try:
        with connected_sim(server) as sim:
            s = ("-s", sim.address)
            hi = server.cli(*s, "shell", "echo", "hi")
            assert (hi.returncode, hi.stdout) == (0, "hi\n")
            assert server.cli(*s, "shell", "nosuch").returncode == 127
            local = tmp_path / "f.bin"
            local.write_bytes(os.urandom(200_000))
            assert server.cli(*s, "push", str(local), "/data/local/tmp/f.bin").returncode == 0
            assert server.cli(*s, "pull", "/data/local/tmp/f.bin",
                              str(tmp_path / "g.bin")).returncode == 0
            assert (tmp_path / "g.bin").read_bytes() == local.read_bytes()
            apk = tmp_path / "deb.apk"
            apk.write_bytes(build_apk(SimPackage(package="com.example.deb", kind="app")))
            assert "Success" in server.cli(*s, "install", str(apk)).stdout
            assert "package:com.example.deb" in server.cli(*s, "shell", "pm list packages").stdout
            assert "SimShell: echo hi" in server.cli(*s, "logcat", "-d").stdout
            listing = server.cli(*s, "ls", "/data/local/tmp").stdout
            assert "f.bin" in listing
            d = sim.adb
            assert d.shell2("exit 5", v2=True).returncode == 5
            assert "com.example.deb" in d.list_packages()
            assert d.screenshot().size == (1080, 2400)
    finally:
        server.kill()


def test_adb_shell_without_a_command_reads_a_script_from_stdin(sim_device, adb_server):
    script = "echo one\nexport X=5\necho $X\nexit 3\necho never\n"
    proc = subprocess.run(
        [adb_server.adb, "-P", str(adb_server.port), "-s", sim_device.address, "shell"],
        input=script, capture_output=True, text=True, timeout=30 * TIME_SCALE, env=adb_server.env,
        check=False)
    assert (proc.returncode, proc.stdout) == (3, "one\n5\n")


def test_interactive_pty_shell_has_a_prompt_and_line_editing(sim_device):
    c = sim_device.adb.open_transport()
    try:
        c.send_command("shell:")
        c.check_okay()
        c.conn.settimeout(10 * TIME_SCALE)
        prompt = b"panther:/ $ "
        seen = b""
        while not seen.endswith(prompt):
            seen += c.conn.recv(4096)
        c.conn.sendall(b"echo hx\x7fi\r")
        seen = b""
        while not seen.endswith(prompt):
            seen += c.conn.recv(4096)
        assert seen == b"echo hx\b \bi\r\nhi\r\n" + prompt
        c.conn.sendall(b"cd /data/local/tmp\r")
        seen = b""
        while not seen.endswith(b"panther:/data/local/tmp $ "):
            seen += c.conn.recv(4096)
        c.conn.sendall(b"exit\r")
        rest = b""
        while chunk := c.conn.recv(4096):
            rest += chunk
        assert rest == b"exit\r\n"
    finally:
        c.close()


def test_reconnecting_and_disconnecting(sim_device, adb_server):
    client = adb_server.client()
    # The server opens (and drops) a throw-away connection before saying so (§3.3).
    assert client.connect(sim_device.address, timeout=15).startswith("already connected to")
    assert sim_device.adb.shell("echo ok") == "ok"
    assert client.disconnect(sim_device.address).startswith("disconnected")
    sim_device.wait_state(None)
    sim_device.connect()
    assert sim_device.adb.shell("echo again") == "again"
