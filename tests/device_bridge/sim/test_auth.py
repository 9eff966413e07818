"""A secure simulated phone at the byte level: what an unauthorised host can and cannot do."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

from device_bridge.sim.adbd import MAX_BAD_SIGNATURES
from device_bridge.sim.auth import (
    AUTH_RSAPUBLICKEY,
    AUTH_SIGNATURE,
    AUTH_TOKEN,
    AdbAuth,
    AdbKeyError,
    encode_public_key,
    parse_public_key,
)
from device_bridge.sim.transport import Command, Message, MessageReader, encode
from tests.device_bridge.sim.helpers import new_device

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def sign(key: rsa.RSAPrivateKey, token: bytes) -> bytes:
    return key.sign(token, padding.PKCS1v15(), utils.Prehashed(hashes.SHA1()))


class Host:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = MessageReader()
        self.inbox: list[Message] = []

    def send(self, command: Command, arg0: int, arg1: int, data: bytes = b"") -> None:
        self.writer.write(encode(command, arg0, arg1, data))

    async def recv(self) -> Message:
        while not self.inbox:
            chunk = await self.reader.read(65536)
            if not chunk:
                raise EOFError
            self.inbox += self.parser.feed(chunk)
        return self.inbox.pop(0)


@pytest.fixture
async def secure(key):
    dev = new_device(auth=True, adb_keys=[encode_public_key(key.public_key(), "t@host")])
    async with dev:
        yield dev


async def connect(dev) -> Host:
    host = Host(*await asyncio.open_connection("127.0.0.1", dev.port))
    host.send(Command.CNXN, 0x01000001, 1 << 20, b"host::\0")
    return host


async def test_token_signature_and_then_cnxn(secure, key):
    host = await connect(secure)
    token = await host.recv()
    assert (token.command, token.arg0, len(token.data)) == (Command.AUTH, AUTH_TOKEN, 20)
    host.send(Command.OPEN, 1, 0, b"shell:echo no\0")  # before authorisation: ignored
    host.send(Command.AUTH, AUTH_SIGNATURE, 0, sign(key, token.data))
    reply = await host.recv()
    assert reply.command == Command.CNXN and b"device::" in reply.data
    host.writer.close()


async def test_unknown_key_waits_for_allow(secure):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    host = await connect(secure)
    token = await host.recv()
    host.send(Command.AUTH, AUTH_SIGNATURE, 0, sign(other, token.data))
    again = await host.recv()
    assert again.command == Command.AUTH and again.data != token.data  # a fresh token
    prompted = asyncio.Event()
    secure.auth.on_prompt = lambda p: prompted.set()
    host.send(Command.AUTH, AUTH_RSAPUBLICKEY, 0,
              encode_public_key(other.public_key(), "o@host").encode() + b"\0")
    await prompted.wait()  # no reply is due until the user answers
    assert [p.comment for p in secure.pending_keys] == ["o@host"]
    assert secure.allow() == 1
    assert (await host.recv()).command == Command.CNXN
    host.writer.close()


async def test_guessing_signatures_gets_the_connection_dropped(secure):
    host = await connect(secure)
    await host.recv()
    for _ in range(MAX_BAD_SIGNATURES):
        host.send(Command.AUTH, AUTH_SIGNATURE, 0, b"\x01" * 256)
        assert (await host.recv()).command == Command.AUTH
    host.send(Command.AUTH, AUTH_SIGNATURE, 0, b"\x01" * 256)
    with pytest.raises((EOFError, ConnectionError)):
        await host.recv()
    host.writer.close()


async def test_oversized_auth_payload_closes_the_connection(secure):
    host = await connect(secure)
    await host.recv()
    host.send(Command.AUTH, AUTH_RSAPUBLICKEY, 0, b"A" * 5000)
    with pytest.raises((EOFError, ConnectionError)):
        await host.recv()
    host.writer.close()


@pytest.mark.parametrize("line", ["", "not base64!", "QUFBQQ== x@y",
                                  "A" * 700 + " x@y"])
def test_bad_public_keys_are_typed_errors(line):
    with pytest.raises(AdbKeyError):
        parse_public_key(line)


def test_keys_round_trip_and_prompts_are_bounded(key, monkeypatch):
    from device_bridge.sim import auth as auth_mod

    line = encode_public_key(key.public_key(), "me@host")
    parsed, comment = parse_public_key(line + "\0")
    assert comment == "me@host"
    assert parsed.public_numbers() == key.public_key().public_numbers()
    monkeypatch.setattr(auth_mod, "MAX_PENDING", 2)
    auth = AdbAuth()
    keys = [key] + [rsa.generate_private_key(public_exponent=65537, key_size=2048)
                    for _ in range(2)]
    for i, k in enumerate(keys):
        auth.request(encode_public_key(k.public_key(), f"h{i}").encode(), lambda: None)
    assert [p.comment for p in auth.pending] == ["h1", "h2"]  # the oldest prompt went
