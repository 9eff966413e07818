"""The tunnel's sans-I/O parts (docs/tunnel.md): the policy per adb service, the sync gate,
the client frames and what a refused OPEN looks like to the adb client."""

from __future__ import annotations

import struct

import msgpack
import pytest

from device_bridge.policy import Policy, PolicyConfig, Profile
from device_bridge.tunnel import SyncGate
from protocol.errors import ErrorCode, RpcError
from protocol.tunnel_methods import (
    MAX_WRITE,
    TunnelChunk,
    data_frame_head,
    decode_frame,
    encode_frame,
    parse_data_frame,
    parse_tunnel_chunk,
    refusal_reply,
)

DIR = "/data/local/tmp/droidwire"


def _policy(profile: Profile, *, owner: bool) -> Policy:
    return Policy(PolicyConfig(profile=profile)).for_caller(as_owner=owner)


def _rule(policy: Policy, service: str) -> str | None:
    try:
        policy.check_tunnel("s1", service)
    except RpcError as exc:
        assert exc.code is ErrorCode.FORBIDDEN
        return str((exc.data or {})["rule"])
    return None


@pytest.mark.parametrize(("service", "rule"), [
    ("shell,v2,TERM=xterm,raw:getprop ro.product.model", None),
    ("shell:getprop", None),
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec logcat '-d'", None),
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec logcat", None),  # follows
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec logcat '-T' '1'", None),
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec logcat -b radio", "argument"),
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec logcat -f /sdcard/x", "argument"),
    ("shell,v2,TERM=xterm:export ANDROID_LOG_TAGS='x'; exec logcat -d", "metacharacter"),
    ("exec:cmd package 'install' '-r' -S 377", None),
    ("exec:cmd package install-create -r -S 900", None),
    ("exec:cmd package install-write -S 377 1234 base.apk -", None),
    ("exec:cmd package install-commit 1234", None),
    ("exec:cmd package install -r", "argument"),
    ("exec:cmd package install --user 10 -S 5", "argument"),
    ("exec:cmd power reboot", "command_wrapper"),
    ("shell,v2,raw:reboot", "reboot"),
    ("shell,v2,TERM=xterm-256color,pty:", "interactive_shell"),
    ("shell,v2,bogus:echo", "service_not_allowed"),
    ("root:", "adbd_control"),
    ("reboot:bootloader", "adbd_control"),
    ("remount:", "adbd_control"),
    ("tcpip:5555", "adbd_control"),
    ("reverse:forward:tcp:1;tcp:2", "reverse_not_carried"),
    ("sync:", None),
    ("tcp:8080", None),
    ("tcp:localhost:8080", None),
    ("localabstract:chrome_devtools_remote", None),
    ("localfilesystem:/dev/socket/x", "service_not_allowed"),
    ("jdwp:1234", None),
    ("framebuffer:", None),
    ("abb_exec:package\0install", "service_not_allowed"),
    ("dev:/dev/block/sda", "service_not_allowed"),
])
def test_standard_borrower(service: str, rule: str | None) -> None:
    assert _rule(_policy(Profile.STANDARD, owner=False), service) == rule


def test_full_is_the_owners_alone() -> None:
    owner = _policy(Profile.FULL, owner=True)
    borrower = _policy(Profile.FULL, owner=False)
    for service in ("root:", "reboot:", "shell,v2,TERM=xterm,pty:"):
        assert _rule(owner, service) is None
        assert _rule(borrower, service) in ("adbd_control", "interactive_shell")
    # The deny list holds for the owner too; adb reverse is never carried.
    assert _rule(owner, "shell,v2,raw:reboot") == "reboot"
    assert _rule(owner, "reverse:list-forward") == "reverse_not_carried"


def test_profiles_without_a_shell_or_files() -> None:
    no_shell = _policy(Profile.NO_SHELL, owner=False)
    assert _rule(no_shell, "shell,v2,raw:getprop") == "shell_not_allowed"
    assert _rule(no_shell, "exec:cmd package install -S 10") is None  # installs are allowed
    assert _rule(no_shell, "sync:") is None
    assert _rule(no_shell, "shell,v2:logcat -v threadtime") is None  # a log read, not a shell
    only = _policy(Profile.INSTRUMENT_ONLY, owner=False)
    assert _rule(only, "sync:") == "push_not_allowed"
    assert _rule(only, "tcp:80") == "forward_not_allowed"
    assert _rule(only, "framebuffer:") == "screenshot_not_allowed"
    assert _rule(only, "shell,v2:logcat") == "logcat_scope"


def test_what_reaches_the_device_is_the_checked_command() -> None:
    policy = _policy(Profile.STANDARD, owner=False)
    opened = policy.check_tunnel("s1", "shell,v2,TERM=xterm:export ANDROID_LOG_TAGS=''; exec "
                                       "logcat '-d' '-v' 'threadtime'")
    assert opened.service == "shell,v2,TERM=xterm:logcat -d -v threadtime"
    # Anyone but the owner installs with -R: pm would replace an app already there.
    assert policy.check_tunnel("s1", "exec:cmd package 'install' -S 3").service == \
        "exec:cmd package install -R -S 3"
    assert policy.check_tunnel("s1", "exec:cmd package install-create -r -S 3").service == \
        "exec:cmd package install-create -R -r -S 3"
    assert policy.check_tunnel("s1", "exec:cmd package install-commit 12").service == \
        "exec:cmd package install-commit 12"
    owner = _policy(Profile.STANDARD, owner=True)
    assert owner.check_tunnel("s1", "exec:cmd package 'install' -r -S 3").service == \
        "exec:cmd package install -r -S 3"
    assert policy.check_tunnel("s1", "sync:").kind == "sync"


def test_paused_sharing_refuses_every_service() -> None:
    policy = Policy(PolicyConfig())
    policy.pause()
    assert _rule(policy, "tcp:80") == "paused"


# -- the sync gate ----------------------------------------------------------------------------


def _req(ident: bytes, path: str) -> bytes:
    body = path.encode()
    return ident + struct.pack("<I", len(body)) + body


def _send(path: str, data: bytes) -> bytes:
    out = _req(b"SEND", f"{path},33188")
    for off in range(0, len(data), 65536):
        chunk = data[off:off + 65536]
        out += b"DATA" + struct.pack("<I", len(chunk)) + chunk
    return out + b"DONE" + struct.pack("<I", 1700000000)


def _gate() -> SyncGate:
    policy = _policy(Profile.STANDARD, owner=False)
    return SyncGate(lambda request, path: policy.check_sync("s1", request, path))


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_gate_passes_allowed_requests_whatever_the_split(step: int) -> None:
    stream = (_req(b"STA2", f"{DIR}/a.bin") + _send(f"{DIR}/a.bin", bytes(range(256)) * 600)
              + _req(b"RECV", f"{DIR}/a.bin") + b"QUIT" + bytes(4))
    gate = _gate()
    out = bytearray()
    for off in range(0, len(stream), step):
        forwarded, answers = gate.feed(stream[off:off + step])
        out += forwarded
        assert answers == []
    assert bytes(out) == stream and gate.broken is None


@pytest.mark.parametrize("step", [5, 4099, 70_000])
def test_gate_pieces_stay_valid_and_a_push_passes_uncopied(step: int) -> None:
    stream = _req(b"STA2", f"{DIR}/a.bin") + _send(f"{DIR}/a.bin", bytes(range(256)) * 1200)
    gate = _gate()
    kept: list[bytes | memoryview] = []
    for off in range(0, len(stream), step):
        parts, answers = gate.feed_parts(stream[off:off + step])
        kept += parts  # held past later feeds, whose carried bytes live elsewhere
        assert answers == []
    assert b"".join(kept) == stream
    # A write that is all DATA (and its headers) goes on as the very object that came.
    chunk = b"DATA" + struct.pack("<I", 10) + b"0123456789"
    gate = _gate()
    gate.feed(_req(b"SEND", f"{DIR}/b.bin,33188"))
    parts, _ = gate.feed_parts(chunk)
    assert len(parts) == 1 and parts[0] is chunk


def test_gate_answers_refused_requests_in_their_own_format() -> None:
    gate = _gate()
    forwarded, answers = gate.feed(_req(b"STAT", "/sdcard/x") + _req(b"LIS2", "/")
                                   + _req(b"STA2", "/system/build.prop"))
    assert forwarded == b""
    assert answers[0] == b"STAT" + bytes(12)
    assert answers[1] == b"DONE" + bytes(72)
    assert answers[2][:8] == b"STA2" + struct.pack("<I", 2) and len(answers[2]) == 72
    forwarded, answers = gate.feed(_req(b"RECV", "/system/build.prop"))
    assert forwarded == b"" and answers[0].startswith(b"FAIL")
    assert b"outside /data/local/tmp/droidwire/" in answers[0]
    # A refused SEND: its data swallowed up to DONE, then FAIL; the stream goes on.
    push = _send("/sdcard/evil", b"x" * 200_000)
    forwarded, answers = gate.feed(push[:1000])
    assert forwarded == b"" and answers == []
    forwarded, answers = gate.feed(push[1000:] + _req(b"STA2", f"{DIR}/ok"))
    assert answers and answers[0].startswith(b"FAIL")
    assert forwarded == _req(b"STA2", f"{DIR}/ok")
    assert len(gate.refusals) == 5


def test_gate_keeps_each_refusal_to_report_never_the_data() -> None:
    gate = _gate()
    gate.feed(_send("/sdcard/evil", b"secret" * 10) + _req(b"RECV", "/system/\x1b[2Jbuild.prop"))
    taken = gate.take_refusals()
    assert [(r.request, r.rule, r.path) for r in taken] == [
        ("SEND", "path_outside_workspace", "/sdcard/evil"),  # the mode is not the path
        ("RECV", "control_character", "/system/?[2Jbuild.prop"),  # printable only
    ]
    assert gate.take_refusals() == []  # taken once
    gate.feed(_req(b"STAT", "/" + "a" * 1000))
    [long] = gate.take_refusals()
    assert len(long.path) == 256


def test_refusal_chunks_round_trip_bounded() -> None:
    wire = TunnelChunk(refused={"request": "SEND", "rule": "r", "path": "/p"}).to_wire()
    assert wire == {"refused": {"request": "SEND", "rule": "r", "path": "/p"}}
    chunk = parse_tunnel_chunk({"refused": {"request": "SEND", "rule": "r" * 500,
                                            "path": "/" * 5000, "data": "x"}}, seq=4)
    assert chunk.refused is not None and chunk.seq == 4 and chunk.data == b""
    assert set(chunk.refused) == {"request", "rule", "path"}
    assert len(chunk.refused["rule"]) == 64 and len(chunk.refused["path"]) == 256
    for bad in ({"refused": "no"}, {"refused": {"rule": "r", "path": "/p"}},
                {"refused": {"request": 1, "rule": "r", "path": "/p"}}):
        with pytest.raises(RpcError) as err:
            parse_tunnel_chunk(bad)
        assert err.value.code is ErrorCode.BAD_REQUEST


def test_gate_ends_a_broken_stream() -> None:
    gate = _gate()
    _, answers = gate.feed(b"SND2" + struct.pack("<I", 5) + b"/x,12")
    assert gate.broken is not None and answers == []
    assert gate.feed(_req(b"STAT", f"{DIR}/a")) == (b"", [])


# -- client frames and refusals ---------------------------------------------------------------


@pytest.mark.parametrize("data", [
    b"", b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"op": "nope"}),
    msgpack.packb({"op": "open", "s": 1}), msgpack.packb({"op": "open", "s": True, "service": "x"}),
    msgpack.packb({"op": "data", "s": 0, "data": b"x"}),
    msgpack.packb({"op": "data", "s": 1, "data": b""}),
    msgpack.packb({"op": "ack", "s": 1, "n": 0}),
    msgpack.packb({"op": "close", "s": 1, "reason": 5}),
    msgpack.packb({"op": "data", "s": 1, "data": b"x" * (MAX_WRITE + 1)}),
], ids=lambda d: d[:12].hex() or "empty")
def test_bad_client_frames_are_bad_requests(data: bytes) -> None:
    with pytest.raises(RpcError) as refused:
        decode_frame(data)
    assert refused.value.code is ErrorCode.BAD_REQUEST


def test_frames_round_trip() -> None:
    frame = decode_frame(encode_frame("data", s=3, data=b"\x00\x01"))
    assert frame == {"op": "data", "s": 3, "data": b"\x00\x01"}
    assert decode_frame(encode_frame("close", s=3))["op"] == "close"


@pytest.mark.parametrize("s", [1, 127, 128, 65_535, 65_536, (1 << 31) - 1])
@pytest.mark.parametrize("n", [1, 255, 256, 65_535, 65_536, MAX_WRITE])
def test_a_data_frame_as_the_cli_lays_it_out_is_read_in_place(s: int, n: int) -> None:
    payload = bytes(range(256)) * (n // 256) + bytes(n % 256)
    frame = data_frame_head(s, n) + payload
    assert frame == encode_frame("data", s=s, data=payload)
    parsed = parse_data_frame(frame)
    assert parsed is not None
    assert parsed[0] == s and parsed[1] == payload and parsed[1].obj is frame  # a view, no copy
    assert decode_frame(frame) == {"op": "data", "s": s, "data": payload}


@pytest.mark.parametrize("data", [
    b"", encode_frame("ack", s=1, n=3), encode_frame("open", s=1, service="sync:"),
    msgpack.packb({"op": "data", "data": b"x", "s": 1}),  # another key order: decode_frame's
    msgpack.packb({"op": "data", "s": 1, "data": b"x", "extra": 1}),
    msgpack.packb({"op": "data", "s": -1, "data": b"x"}),
    msgpack.packb({"op": "data", "s": 0, "data": b"x"}),
    msgpack.packb({"op": "data", "s": 1 << 31, "data": b"x"}),
    msgpack.packb({"op": "data", "s": 1, "data": b""}),
    msgpack.packb({"op": "data", "s": 1, "data": "x"}),
    msgpack.packb({"op": "data", "s": 1, "data": b"x" * (MAX_WRITE + 1)}),
    encode_frame("data", s=1, data=b"xy")[:-1], encode_frame("data", s=1, data=b"xy") + b"z",
    data_frame_head(1, 2)[:-1],
], ids=lambda d: d[:12].hex() or "empty")
def test_any_other_frame_is_left_to_decode_frame(data: bytes) -> None:
    assert parse_data_frame(data) is None


def test_refusals_as_adb_clients_print_them() -> None:
    v2 = refusal_reply("shell,v2,TERM=xterm,raw:reboot", "reboot is not allowed")
    assert v2 is not None
    text = b"droidwire: reboot is not allowed\n"
    assert v2 == struct.pack("<BI", 2, len(text)) + text + struct.pack("<BI", 3, 1) + b"\x01"
    assert refusal_reply("shell:reboot", "no") == b"droidwire: no\n"
    assert refusal_reply("root:", "no") == b"droidwire: no\n"
    assert refusal_reply("reverse:forward:tcp:1;tcp:2", "no") == b"FAIL000edroidwire: no\n"
    for bare in ("sync:", "tcp:80", "jdwp:12", "framebuffer:", "localfilesystem:/x"):
        assert refusal_reply(bare, "no") is None


def test_an_installed_chunk_names_packages_only() -> None:
    chunk = parse_tunnel_chunk(TunnelChunk(installed=["com.example.a", "org.b_c"]).to_wire())
    assert chunk.installed == ["com.example.a", "org.b_c"] and not chunk.eof
    for bad in ({"installed": "com.example.a"}, {"installed": ["../etc"]},
                {"installed": ["com.example.a; rm"]}, {"installed": [1]},
                {"installed": ["a.b"] * 65}):
        with pytest.raises(RpcError) as refused:
            parse_tunnel_chunk(bad)
        assert refused.value.code is ErrorCode.BAD_REQUEST


def test_a_relay_keeps_freed_memory_once_per_process() -> None:
    import platform

    from protocol import alloc

    first = alloc.keep_freed_memory()
    assert alloc.keep_freed_memory() is first  # once: later calls change nothing
    if platform.libc_ver()[0] == "glibc":
        assert first is True


class _FakeSocket:
    """What the local end's adb connection writes to (an asyncio transport's surface)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def _adb_messages(wire: bytes) -> list[tuple[int, int, int, bytes]]:
    from protocol.adbwire import MessageReader

    return [(int(m.command), m.arg0, m.arg1, m.data) for m in MessageReader().feed(wire)]


@pytest.mark.parametrize("step", [1, 7, 24, 4096, 65_549, 1 << 20])
async def test_local_end_reads_any_split_and_frames_wrtes_in_place(step: int) -> None:
    from droidwire.tunnel import TunnelClient, _Transport
    from protocol.adbwire import A_VERSION, Command, encode
    from protocol.tunnel_methods import decode_frame

    client = TunnelClient("http://controller.invalid", "token", "dev")
    conn = _Transport(client)
    sock = _FakeSocket()
    conn.connection_made(sock)  # type: ignore[arg-type]
    payloads = [bytes(range(256)) * 800, b"x", bytes(70_000)]
    wire = encode(Command.CNXN, A_VERSION, 1 << 20, b"host::") \
        + encode(Command.OPEN, 5, 0, b"sync:\0")
    head_only = encode(Command.WRTE, 5, 1, b"")  # a WRTE of no bytes: nothing to carry
    wire += head_only + b"".join(encode(Command.WRTE, 5, 1, p) for p in payloads)

    def feed(data: bytes) -> None:
        for off in range(0, len(data), step):
            piece = data[off:off + step]
            while piece:
                buf = conn.get_buffer(-1)
                n = min(len(buf), len(piece))
                buf[:n] = piece[:n]
                conn.buffer_updated(n)
                piece = piece[n:]

    feed(wire[: wire.index(head_only)])
    assert decode_frame(bytes(client._out.get_nowait())) == {"op": "open", "s": 1,
                                                             "service": "sync:"}
    client._streams[1].opened = True  # the controller's ``opened``
    feed(wire[wire.index(head_only):])
    frames = [decode_frame(bytes(client._out.get_nowait())) for _ in payloads]
    assert frames == [{"op": "data", "s": 1, "data": p} for p in payloads]
    sent = _adb_messages(bytes(sock.written))
    assert sent[0][0] == Command.CNXN
    assert sent[1:] == [(int(Command.OKAY), 1, 5, b"")] * len(payloads)
    # Junk: this connection ends, nothing else does.
    feed(b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
    assert sock.closed and client.reason is None


async def test_local_end_closes_right_behind_the_last_wrte() -> None:
    """A stream the device ended: one WRTE in flight at a time, and the CLSE right behind the
    last one, without waiting for its OKAY (as adbd; docs/simulated-device.md, "Transport")."""
    from droidwire.tunnel import TunnelClient, _Transport
    from protocol.adbwire import A_VERSION, Command, encode

    client = TunnelClient("http://controller.invalid", "token", "dev")
    conn = _Transport(client)
    sock = _FakeSocket()
    conn.connection_made(sock)  # type: ignore[arg-type]

    def feed(data: bytes) -> None:
        buf = conn.get_buffer(-1)
        buf[:len(data)] = data
        conn.buffer_updated(len(data))

    def sent() -> list[tuple[int, int, int, bytes]]:
        out = _adb_messages(bytes(sock.written))
        sock.written.clear()
        return [m for m in out if m[0] != Command.CNXN]

    feed(encode(Command.CNXN, A_VERSION, 1 << 20, b"host::")
         + encode(Command.OPEN, 5, 0, b"shell:echo hi\0") + encode(Command.OPEN, 6, 0, b"shell:x\0"))
    sent()
    for s in (1, 2):
        client._on_frame({"op": "opened", "s": s})
    assert sent() == [(Command.OKAY, 1, 5, b""), (Command.OKAY, 2, 6, b"")]
    # Stream 1: its output and its end come together.
    client._on_frame({"op": "data", "s": 1, "data": b"hi\n"})
    client._on_frame({"op": "close", "s": 1})
    assert sent() == [(Command.WRTE, 1, 5, b"hi\n"), (Command.CLSE, 1, 5, b"")]
    # Stream 2: two chunks; the second WRTE waits for the first one's OKAY, the CLSE does not
    # wait for the second's.
    client._on_frame({"op": "data", "s": 2, "data": b"a"})
    client._on_frame({"op": "data", "s": 2, "data": b"b"})
    client._on_frame({"op": "close", "s": 2})
    assert sent() == [(Command.WRTE, 2, 6, b"a")]
    feed(encode(Command.OKAY, 6, 2))
    assert sent() == [(Command.WRTE, 2, 6, b"b"), (Command.CLSE, 2, 6, b"")]
    feed(encode(Command.OKAY, 6, 2) + encode(Command.CLSE, 6, 2))  # late: ignored
    assert sent() == [] and not sock.closed and not client._streams
