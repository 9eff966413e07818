"""adb-shell (PyPI ``adb-shell``) against the simulated device, directly over TCP: no adb server.

adb-shell speaks the device protocol itself, so it checks what the adb server papers over: it
waits for the device's answering CLSE after each sync request, for an OKAY to every OPEN, and
for the AUTH handshake of a secure phone.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading

import pytest

from device_bridge.sim.threaded import ThreadedSimDevice
from tests.device_bridge.sim.conformance.conftest import (
    CLIENT_TIMEOUT_S,
    HostKey,
    adb_shell_device,
    install_multiple_through_shell,
)

pytestmark = pytest.mark.timeout(60)

MB3 = os.urandom(3 * 1024 * 1024)


def test_shell_and_exec_out(direct_sim):
    with adb_shell_device(direct_sim) as dev:
        assert dev.shell("echo hi; echo err >&2") == "hi\nerr\n"
        assert dev.exec_out("printf '%s-%d' a 5") == "a-5"
        assert dev.shell("getprop ro.adb.secure").strip() == "0"


def test_sync_push_pull_stat_list_round_trip(direct_sim, tmp_path):
    local = tmp_path / "big.bin"
    local.write_bytes(MB3)
    with adb_shell_device(direct_sim) as dev:
        dev.push(str(local), "/data/local/tmp/big.bin", mtime=1_700_000_000)
        mode, size, mtime = dev.stat("/data/local/tmp/big.bin")
        assert (mode & 0o170000, size, mtime) == (0o100000, len(MB3), 1_700_000_000)
        back = tmp_path / "back.bin"
        dev.pull("/data/local/tmp/big.bin", str(back))
        assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(MB3).digest()
        names = {f.filename.decode(): f.size for f in dev.list("/data/local/tmp")}
        assert names["big.bin"] == len(MB3)
        assert {".", ".."} <= set(names)
        # The device's own view agrees with what went over the wire.
        assert dev.shell("md5sum /data/local/tmp/big.bin").split()[0] == \
            hashlib.md5(MB3).hexdigest()


def test_sync_directories_and_missing_files(direct_sim, tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    with adb_shell_device(direct_sim) as dev:
        dev.shell("mkdir -p /data/local/tmp/tree/sub")
        dev.push(str(tmp_path / "a.txt"), "/data/local/tmp/tree/a.txt")
        dev.push(str(tmp_path / "b.txt"), "/data/local/tmp/tree/sub/b.txt")
        assert dev.shell("cat /data/local/tmp/tree/a.txt /data/local/tmp/tree/sub/b.txt") \
            == "alphabeta"
        mode, _, _ = dev.stat("/data/local/tmp/tree/sub")
        assert mode & 0o170000 == 0o040000
        assert dev.stat("/data/local/tmp/nothing-here") == (0, 0, 0)
        listing = {f.filename.decode() for f in dev.list("/data/local/tmp/tree")}
        assert listing == {".", "..", "a.txt", "sub"}
        from adb_shell.exceptions import AdbCommandFailureException

        with pytest.raises(AdbCommandFailureException, match="No such file"):
            dev.pull("/data/local/tmp/nothing-here", str(tmp_path / "x"))
        with pytest.raises(AdbCommandFailureException, match="Is a directory"):
            dev.pull("/data/local/tmp/tree", str(tmp_path / "y"))
        # The connection is still good after a failed request.
        assert dev.shell("echo still") == "still\n"


@pytest.mark.xfail(strict=True, raises=FileNotFoundError, reason=(
    "adb-shell 0.4.4's push() of a directory opens os.listdir() names relative to the current "
    "directory, not to the source directory (adb_shell/hidden_helpers.py get_files_to_push); "
    "no upstream issue filed yet. Pulling directories is unsupported upstream: "
    "JeffLIrion/adb_shell#211"))
def test_push_of_a_directory(direct_sim, tmp_path):
    src = tmp_path / "tree"
    src.mkdir()
    (src / "a.txt").write_text("alpha")
    with adb_shell_device(direct_sim) as dev:
        dev.push(str(src), "/data/local/tmp/tree")
        assert dev.shell("cat /data/local/tmp/tree/a.txt") == "alpha"


def test_install_uninstall_and_logcat(direct_sim):
    from device_bridge.sim.apk import SimPackage, build_apk

    apk = build_apk(SimPackage(package="com.example.direct", kind="app"))
    with adb_shell_device(direct_sim) as dev:
        dev.push(io.BytesIO(apk), "/data/local/tmp/direct.apk")
        assert dev.shell("pm install -r /data/local/tmp/direct.apk") == "Success\n"
        assert "package:com.example.direct" in dev.shell("pm list packages -3")
        assert dev.shell("pm uninstall com.example.direct") == "Success\n"
        assert install_multiple_through_shell(
            lambda data, dest: dev.push(io.BytesIO(data), dest), dev.shell) == "Success"
        direct_sim.call(lambda: direct_sim.device.log("E", "Direct", "boom", pid=77, tid=77))
        assert "E Direct  : boom" in dev.shell("logcat -d")
        binary = dev.exec_out("logcat -d -B", decode=False)
        assert b"Direct\0boom\0" in binary and binary[2:4] == b"\x1c\x00"  # hdr_size 28
        dev.shell("logcat -c")
        assert "boom" not in dev.shell("logcat -d")
        lines = dev.streaming_shell("logcat -s Live")
        direct_sim.call(lambda: direct_sim.device.log("I", "Live", "now", pid=1, tid=1))
        got = ""
        while "I Live    : now" not in got:
            got += next(lines)


def test_pull_to_memory(direct_sim):
    with adb_shell_device(direct_sim) as dev:
        dev.push(io.BytesIO(b"in memory"), "/data/local/tmp/m.txt")
        out = io.BytesIO()
        dev.pull("/data/local/tmp/m.txt", out)
        assert out.getvalue() == b"in memory"


def test_root_and_reboot_answer_like_a_user_build(direct_sim):
    with adb_shell_device(direct_sim) as dev:
        # root() returns once the device closes the stream; reading its answer is ours.
        dev.root()
        assert dev.shell("id -u").strip() == "2000"
        text = b"".join(dev._streaming_command(b"root", b"", None, CLIENT_TIMEOUT_S, None))
        assert text == b"adbd cannot run as root in production builds\n"
        text = b"".join(dev._streaming_command(b"remount", b"", None, CLIENT_TIMEOUT_S, None))
        assert text == b'Not running as root. Try "adb root" first.\n'
        boots = direct_sim.call(lambda: direct_sim.device.boots)
        dev.reboot()  # the device answers the OPEN, then goes away to boot
    assert direct_sim.call(lambda: direct_sim.device.boots) == boots + 1
    with adb_shell_device(direct_sim) as dev:  # and takes connections again
        assert dev.shell("echo back") == "back\n"


def _concurrently(n: int, job) -> dict[int, object]:
    results: dict[int, object] = {}

    def worker(i: int) -> None:
        try:
            results[i] = job(i)
        except BaseException as exc:  # reported by the caller
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CLIENT_TIMEOUT_S * 3)
    return results


def test_concurrent_connections_and_streams(direct_sim):
    """Several hosts at once, each with a sync transfer and shells in flight."""

    def job(i: int) -> object:
        with adb_shell_device(direct_sim) as dev:
            dev.push(io.BytesIO(bytes([i]) * 200_000), f"/data/local/tmp/c{i}")
            out = io.BytesIO()
            dev.pull(f"/data/local/tmp/c{i}", out)
            return dev.shell(f"echo {i}"), out.getvalue() == bytes([i]) * 200_000

    assert _concurrently(6, job) == {i: (f"{i}\n", True) for i in range(6)}


def test_streams_interleaved_on_one_connection(direct_sim, monkeypatch):
    """Eight streams open at once on one connection, read in turn from one thread. The device
    must send each stream its output and its ``CLSE``; every packet that reaches the client is
    recorded. adb-shell 0.4.4 keeps packets for streams other than the one being read in a
    packet store that drops a ``CLSE`` arriving for a stream with nothing queued
    (JeffLIrion/adb_shell#143, #172), so reading such a stream times out: that stream must be
    one whose ``CLSE`` the store dropped, every other stream must read whole. (From threads,
    the same drop happens at random, which no test can pin down.)"""
    from adb_shell import constants
    from adb_shell.adb_device import _AdbIOManager
    from adb_shell.exceptions import TcpTimeoutException
    from adb_shell.hidden_helpers import _AdbPacketStore

    closes: list[int] = []          # the client's local id of every CLSE the device sent
    dropped: set[int] = set()       # … of those the client's packet store dropped
    read_packet = _AdbIOManager._read_packet_from_device
    put = _AdbPacketStore.put

    def spy_read(self, adb_info):
        packet = read_packet(self, adb_info)
        if packet[0] == constants.CLSE:
            closes.append(packet[2])
        return packet

    def spy_put(self, arg0, arg1, cmd, data):
        put(self, arg0, arg1, cmd, data)
        if cmd == constants.CLSE and arg0 not in self._dict.get(arg1, {}):
            dropped.add(arg1)

    monkeypatch.setattr(_AdbIOManager, "_read_packet_from_device", spy_read)
    monkeypatch.setattr(_AdbPacketStore, "put", spy_put)
    outputs: dict[int, str] = {}
    lost: list[int] = []
    with adb_shell_device(direct_sim, timeout_s=0.3) as dev:
        streams = [dev.streaming_shell(f"echo {i}; echo {i}{i}", read_timeout_s=0.3)
                   for i in range(8)]
        firsts = [next(stream) for stream in streams]  # all eight open now
        for i, stream in enumerate(streams):
            try:
                outputs[i] = firsts[i] + "".join(stream)
            except TcpTimeoutException:
                lost.append(i)
        assert dev.shell("echo after") == "after\n"  # the connection is still good
    # adb-shell numbers a connection's streams 1, 2, …: stream i is local id i + 1, and
    # ``echo after`` is 9. The device's side: one CLSE per stream, and each stream's whole
    # output wherever the client could read it.
    assert sorted(closes) == list(range(1, 10))
    assert outputs == {i: f"{i}\n{i}{i}\n" for i in range(8) if i not in lost}
    # The client's side: every stream that timed out is one whose CLSE its store dropped.
    assert {i + 1 for i in lost} <= dropped


# -- a secure phone: the AUTH handshake ------------------------------------------------------


@pytest.fixture
def secure_sim(host_key: HostKey):
    with ThreadedSimDevice(port=0, noise_interval=None, seed=7, auth=True) as sim:
        yield sim


def test_secure_phone_without_keys_is_refused(secure_sim):
    from adb_shell.exceptions import DeviceAuthError

    with pytest.raises(DeviceAuthError), adb_shell_device(secure_sim):
        pass


def test_secure_phone_accepts_a_trusted_key(host_key: HostKey):
    with ThreadedSimDevice(port=0, noise_interval=None, auth=True,
                           adb_keys=[host_key.public]) as sim, \
            adb_shell_device(sim, keys=[host_key.signer]) as dev:
        assert dev.shell("getprop ro.adb.secure").strip() == "1"
        assert sim.call(lambda: sim.device.pending_keys) == []


def test_secure_phone_asks_the_user_for_an_unknown_key(secure_sim, host_key, other_host_key):
    prompted = threading.Event()
    shown: list[str] = []

    def on_prompt(p):
        shown.append(p.comment)
        prompted.set()

    secure_sim.call(lambda: setattr(secure_sim.device.auth, "on_prompt", on_prompt))
    result: dict[str, object] = {}

    def connect() -> None:
        try:
            with adb_shell_device(secure_sim, keys=[host_key.signer, other_host_key.signer]) \
                    as dev:
                result["out"] = dev.shell("echo allowed")
        except BaseException as exc:
            result["error"] = exc

    t = threading.Thread(target=connect)
    t.start()
    assert prompted.wait(CLIENT_TIMEOUT_S), "the phone never showed the prompt"
    assert secure_sim.call(lambda: secure_sim.device.allow()) == 1  # the user taps Allow
    t.join(CLIENT_TIMEOUT_S * 2)
    assert result == {"out": "allowed\n"}
    assert shown and "@" in shown[0]
    # "Always allow": the next connection signs in with the key, without a prompt.
    prompted.clear()
    with adb_shell_device(secure_sim, keys=[host_key.signer]) as dev:
        assert dev.shell("echo again") == "again\n"
    assert not prompted.is_set()


def test_secure_phone_that_was_denied_never_answers(secure_sim, host_key):
    from adb_shell.exceptions import AdbTimeoutError, TcpTimeoutException

    secure_sim.call(lambda: setattr(secure_sim.device.auth, "on_prompt",
                                    lambda p: secure_sim.device.deny()))
    with pytest.raises((AdbTimeoutError, TcpTimeoutException, OSError)), \
            adb_shell_device(secure_sim, keys=[host_key.signer], auth_timeout_s=0.5):
        pass
    assert secure_sim.call(lambda: secure_sim.device.pending_keys) == []


def test_a_wrong_signature_is_not_accepted(host_key, other_host_key):
    """A host holding some other key (trusted: the host_key) cannot sign in with it: its
    signature is refused and the phone asks the user about its public key instead. Waited on
    the prompt itself, not on the client's timeout (a short one lost the race under load)."""
    prompted = threading.Event()
    outcome: list[object] = []

    with ThreadedSimDevice(port=0, noise_interval=None, auth=True,
                           adb_keys=[host_key.public]) as sim:
        sim.call(lambda: setattr(sim.device.auth, "on_prompt", lambda p: prompted.set()))

        def connect() -> None:
            try:
                with adb_shell_device(sim, keys=[other_host_key.signer]):
                    outcome.append("signed in")
            except BaseException as exc:  # the phone goes away while the client waits
                outcome.append(exc)

        client = threading.Thread(target=connect, daemon=True)
        client.start()
        assert prompted.wait(CLIENT_TIMEOUT_S), "the phone never asked about the other key"
        assert [p.comment for p in sim.call(lambda: sim.device.pending_keys)] != []
    client.join(CLIENT_TIMEOUT_S * 2)
    assert outcome and outcome[0] != "signed in", outcome


def test_pushing_outside_the_writable_places_fails_cleanly(direct_sim, tmp_path):
    from adb_shell.exceptions import PushFailedError

    local = tmp_path / "x"
    local.write_bytes(b"x")
    with adb_shell_device(direct_sim) as dev:
        with pytest.raises(PushFailedError, match="Permission denied"):
            dev.push(str(local), "/system/x")
        assert dev.shell("echo ok") == "ok\n"


def test_keygen_public_key_is_what_the_phone_parses(host_key):
    from device_bridge.sim.auth import encode_public_key, parse_public_key

    key, comment = parse_public_key(host_key.public)
    assert encode_public_key(key, comment) == host_key.public
