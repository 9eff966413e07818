"""The device's transport on a real loopback socket, driven by a hand-written host (no adb)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest

from device_bridge.sim.transport import Command, Message, MessageReader, encode
from tests.conftest import TIME_SCALE
from tests.device_bridge.sim.helpers import new_device

TIMEOUT = 5 * TIME_SCALE


class Host:
    """The adb server's side of one transport, byte by byte."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = MessageReader()
        self.inbox: list[Message] = []

    @classmethod
    async def connect(cls, port: int) -> Host:
        host = cls(*await asyncio.open_connection("127.0.0.1", port))
        _OPEN.append(host)
        return host

    def send(self, command: Command, arg0: int, arg1: int, data: bytes = b"") -> None:
        self.writer.write(encode(command, arg0, arg1, data))

    async def recv(self) -> Message:
        while not self.inbox:
            chunk = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
            if not chunk:
                raise EOFError
            self.inbox += self.parser.feed(chunk)
        return self.inbox.pop(0)

    async def handshake(self, *, version: int = 0x01000001, maxdata: int = 1 << 20) -> Message:
        self.send(Command.CNXN, version, maxdata, b"host::features=shell_v2\0")
        return await self.recv()

    async def open(self, host_id: int, service: str) -> int:
        self.send(Command.OPEN, host_id, 0, service.encode() + b"\0")
        reply = await self.recv()
        assert (reply.command, reply.arg1) == (Command.OKAY, host_id)
        return reply.arg0

    async def collect(self, host_id: int, local_id: int, *, ack: bool = True) -> bytes:
        """Read WRTEs (acknowledging each) until the device's CLSE."""
        out = bytearray()
        while True:
            msg = await self.recv()
            if msg.command == Command.WRTE:
                out += msg.data
                if ack:
                    self.send(Command.OKAY, host_id, local_id)
            elif msg.command == Command.CLSE:
                return bytes(out)

    def close(self) -> None:
        self.writer.close()


_OPEN: list[Host] = []


@pytest.fixture
async def device():
    async with new_device() as dev:
        try:
            yield dev
        finally:
            while _OPEN:
                host = _OPEN.pop()
                host.writer.close()
                with contextlib.suppress(ConnectionError):
                    await host.writer.wait_closed()


async def test_handshake_banner_and_nothing_before_it(device):
    host = await Host.connect(device.port)
    host.send(Command.OPEN, 1, 0, b"shell:echo early\0")  # ignored: no CNXN yet
    reply = await host.handshake()
    assert (reply.command, reply.arg0, reply.arg1) == (Command.CNXN, 0x01000001, 256 * 1024)
    assert reply.data.startswith(b"device::ro.product.name=panther;ro.product.model=Pixel_7;")
    assert reply.data.endswith(b"features=shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir")
    assert not host.inbox
    host.close()


async def test_old_protocol_version_gets_checksums(device):
    host = await Host.connect(device.port)
    await host.handshake(version=0x01000000)
    local = await host.open(7, "shell:echo sum")
    raw_header = None
    # Inspect the next WRTE's header on the wire.
    while raw_header is None:
        msg = await host.recv()
        if msg.command == Command.WRTE:
            raw_header = encode(Command.WRTE, local, 7, msg.data, checksum=True)
            assert msg.data == b"sum\n"
    assert struct.unpack_from("<I", raw_header, 16)[0] == sum(b"sum\n")
    host.close()


async def test_writes_respect_maxdata_and_wait_for_okay(device):
    host = await Host.connect(device.port)
    await host.handshake(maxdata=4096)
    local = await host.open(3, "exec:screencap -p")
    first = await host.recv()
    assert first.command == Command.WRTE and len(first.data) == 4096
    # Without our OKAY the device must not send the next WRTE.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(host.reader.read(1), 0.2)
    host.send(Command.OKAY, 3, local)
    rest = await host.collect(3, local)
    png = first.data + rest
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png.endswith(b"IEND\xaeB`\x82")
    host.close()


async def test_refused_service_and_late_messages_for_unknown_streams(device):
    host = await Host.connect(device.port)
    await host.handshake()
    host.send(Command.OPEN, 9, 0, b"framebuffer:\0")
    assert await host.recv() == Message(Command.CLSE, 0, 9)
    host.send(Command.OKAY, 9, 12345)  # late ack for a stream that never was: ignored
    host.send(Command.CLSE, 9, 12345)
    local = await host.open(10, "shell,v2:echo ok; exit 2")
    data = await host.collect(10, local)
    assert data == b"\x01\x03\x00\x00\x00ok\n" + b"\x03\x01\x00\x00\x00\x02"
    host.close()


async def test_sync_requests_split_at_every_byte(device):
    host = await Host.connect(device.port)
    await host.handshake(maxdata=4096)
    local = await host.open(5, "sync:")
    body = b"hello sync"
    spec = b"/data/local/tmp/s.txt,33188"
    request = (b"SEND" + struct.pack("<I", len(spec)) + spec
               + b"DATA" + struct.pack("<I", len(body)) + body + b"DONE" + struct.pack("<I", 1234))
    for i in range(len(request)):
        host.send(Command.WRTE, 5, local, request[i : i + 1])
    acks = 0
    reply = b""
    while len(reply) < 8:
        msg = await host.recv()
        if msg.command == Command.OKAY:
            acks += 1
        elif msg.command == Command.WRTE:
            reply += msg.data
            host.send(Command.OKAY, 5, local)
    assert acks == len(request)
    assert reply == b"OKAY\0\0\0\0"
    stat = device.files.stat("/data/local/tmp/s.txt")
    assert (stat.size, stat.mtime, oct(stat.mode)) == (len(body), 1234, "0o100644")
    host.close()


async def test_host_close_stops_a_streaming_logcat(device):
    host = await Host.connect(device.port)
    await host.handshake()
    local = await host.open(4, "shell:logcat")
    first = await host.recv()
    assert first.command == Command.WRTE
    host.send(Command.OKAY, 4, local)
    host.send(Command.CLSE, 4, local)
    # adbd answers the host's CLSE with its own (local_socket_close → remote_socket_shutdown).
    answer = await host.recv()
    while answer.command == Command.WRTE:  # log lines already on their way
        answer = await host.recv()
    assert answer == Message(Command.CLSE, local, 4)
    device.log("I", "After", "must not be sent", pid=1, tid=1)
    # The stream is gone: nothing more arrives for it, and the device still serves others.
    local2 = await host.open(6, "shell:echo next")
    assert await host.collect(6, local2) == b"next\n"
    assert all(m.arg1 != 4 or m.command != Command.WRTE for m in host.inbox)
    host.close()


async def test_a_host_close_of_a_closed_stream_is_not_answered(device):
    host = await Host.connect(device.port)
    await host.handshake()
    local = await host.open(4, "shell:echo x")
    assert await host.collect(4, local) == b"x\n"
    host.send(Command.CLSE, 4, local)  # the usual late CLSE after the device's own
    local2 = await host.open(6, "shell:echo y")
    assert await host.collect(6, local2) == b"y\n"  # nothing for stream 4 came in between
    host.close()


async def test_bad_magic_closes_only_that_connection(device):
    bad = await Host.connect(device.port)
    frame = bytearray(encode(Command.CNXN, 0x01000001, 4096, b"host::"))
    frame[20] ^= 1
    bad.writer.write(bytes(frame))
    with pytest.raises(EOFError):
        await bad.recv()
    good = await Host.connect(device.port)
    assert (await good.handshake()).command == Command.CNXN
    good.close()
    bad.close()


async def test_open_streams_are_bounded(device, monkeypatch):
    from device_bridge.sim import adbd

    monkeypatch.setattr(adbd, "MAX_STREAMS", 2)
    host = await Host.connect(device.port)
    await host.handshake()
    await host.open(1, "shell:sleep 30")
    await host.open(2, "shell:sleep 30")
    host.send(Command.OPEN, 3, 0, b"shell:echo third\0")
    assert await host.recv() == Message(Command.CLSE, 0, 3)


async def test_accepted_sockets_disable_nagle(device):
    import socket

    host = await Host.connect(device.port)
    await host.handshake()
    [conn] = device._connections
    sock = conn.writer.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_threaded_device_start_failure_leaves_no_thread():
    import threading

    from device_bridge.sim.threaded import ThreadedSimDevice

    with ThreadedSimDevice(noise_interval=None) as first:
        before = threading.active_count()
        with pytest.raises(OSError):
            ThreadedSimDevice(port=first.port, noise_interval=None).start()
        assert threading.active_count() == before


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 4])
async def test_stop_closes_a_connection_accepted_as_it_began(turns: int) -> None:
    """adb reconnects to an offline device all the time, so a connection is often mid-accept
    when the device stops. asyncio's Server.close() leaves accepted connections open; the
    device closes every one, whichever step of accepting it had reached after ``turns`` loop
    turns (before, asyncio lost one accepted just before the close: it stayed open, then a
    ResourceWarning at the next garbage collection)."""
    import socket

    dev = new_device()
    await dev.start()
    client = socket.create_connection(("127.0.0.1", dev.port), timeout=TIMEOUT)  # in backlog
    try:
        for _ in range(turns):
            await asyncio.sleep(0)
        await dev.stop()
        for _ in range(5):
            await asyncio.sleep(0)  # whatever accept step was still queued runs now
        try:  # closed, not left serving: an EOF, or a reset if it never left the backlog
            assert await asyncio.to_thread(client.recv, 1) == b""
        except ConnectionResetError:
            pass
    finally:
        client.close()


async def test_the_listener_outlives_a_failed_accept() -> None:
    """An accept that fails (out of file descriptors, say) is logged and retried: the device
    keeps listening instead of giving up on its socket."""
    import errno
    import socket

    from device_bridge.sim.listener import StreamListener

    failures = [OSError(errno.EMFILE, "Too many open files")]

    class Flaky(socket.socket):
        def accept(self):  # type: ignore[no-untyped-def]
            if failures:
                raise failures.pop()
            return super().accept()

    sock = Flaky(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    served = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hi")
        served.set()
        await reader.read()
        writer.close()

    listener = StreamListener(handler, sock)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await asyncio.wait_for(reader.readexactly(2), TIMEOUT) == b"hi"
        assert not failures and served.is_set()
        writer.close()
        await writer.wait_closed()
    finally:
        await listener.close()
