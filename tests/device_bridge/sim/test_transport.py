"""adb transport framing: bytes in, messages out."""

from __future__ import annotations

import struct

import pytest

from device_bridge.sim.transport import Command, FramingError, MessageReader, encode

# The adb 29 server's first CNXN header, as captured on the wire.
SERVER_CNXN_HEADER = bytes.fromhex("434E584E 01000001 00001000 77000000 402E0000 BCB1A7B1")


def test_parses_a_real_server_header_split_anywhere():
    payload = b"host::features=shell_v2,cmd".ljust(0x77, b",")
    wire = SERVER_CNXN_HEADER + payload
    for cut in range(len(wire) + 1):
        reader = MessageReader()
        msgs = reader.feed(wire[:cut]) + reader.feed(wire[cut:])
        assert len(msgs) == 1
        assert msgs[0].command is Command.CNXN
        assert (msgs[0].arg0, msgs[0].arg1) == (0x01000001, 0x100000)
        assert msgs[0].data == payload


def test_encode_round_trips_and_several_messages_share_a_chunk():
    wire = encode(Command.OKAY, 1, 2) + encode(Command.WRTE, 1, 2, b"hi") + encode(Command.CLSE, 1, 2)
    assert wire[:4] == b"OKAY"
    msgs = MessageReader().feed(wire)
    assert [(m.command, m.data) for m in msgs] == [
        (Command.OKAY, b""), (Command.WRTE, b"hi"), (Command.CLSE, b"")]
    assert "WRTE" in str(msgs[1])


def test_bad_magic_and_oversize_payloads_are_framing_errors():
    bad = bytearray(encode(Command.OKAY, 1, 2))
    bad[20] ^= 0xFF
    with pytest.raises(FramingError, match="magic"):
        MessageReader().feed(bytes(bad))
    huge = struct.pack("<6I", Command.WRTE, 1, 2, 2 << 20, 0, Command.WRTE ^ 0xFFFFFFFF)
    with pytest.raises(FramingError, match="exceeds"):
        MessageReader().feed(huge)
    unknown = struct.pack("<6I", 0x41414141, 0, 0, 0, 0, 0x41414141 ^ 0xFFFFFFFF)
    with pytest.raises(FramingError, match="unknown"):
        MessageReader().feed(unknown)


def test_checksum_is_the_byte_sum_when_asked():
    wire = encode(Command.WRTE, 1, 2, b"\xff\x01ab", checksum=True)
    assert struct.unpack_from("<I", wire, 16)[0] == 0xFF + 0x01 + ord("a") + ord("b")
    assert struct.unpack_from("<I", encode(Command.WRTE, 1, 2, b"ab"), 16)[0] == 0
