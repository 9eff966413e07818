"""A small, fast mutation fuzzer for the frame decoder and the session objects.

Hypothesis builds the starting corpus (every frame kind, valid), then a seeded
:class:`random.Random` mutates it — byte flips, msgpack type markers, truncation, splicing,
length fields pointing past the end, deep nesting, and structure-aware edits that re-pack a
valid frame's map with one value swapped for another type. It runs in a tight loop (tens of
microseconds an input), so the full profile feeds well over 100,000 inputs in seconds.
Deterministic: the same seed gives the same inputs (a failure names its seed and index).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings

from protocol.codec import encode
from protocol.envelope import FRAME_KINDS, Frame
from tests.protocol.strategies import frames

__all__ = ["Mutator", "seed_corpus"]

#: msgpack leading bytes that change the parser's path: nil, never-used 0xc1, bools, bin/ext
#: with lengths, floats, ints, fixext, str/array/map with 16/32-bit lengths.
MARKERS = bytes(
    [0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCF, 0xD0,
     0xD3, 0xD4, 0xD5, 0xD8, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0x80, 0x8F, 0x90, 0x9F,
     0xA0, 0xBF, 0xFF, 0x00, 0x7F]
)


def seed_corpus(count: int) -> list[bytes]:
    """``count`` valid encoded frames of every kind (hypothesis picks them)."""
    corpus: list[bytes] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames)
    def collect(frame: Frame) -> None:
        corpus.append(encode(frame))

    collect()
    return corpus


def _wire_value(rnd: random.Random, depth: int = 0) -> Any:
    """A random value of a random msgpack type (type confusion for structure edits)."""
    pick = rnd.randrange(12 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return rnd.random() < 0.5
    if pick == 2:
        return rnd.choice([0, -1, 1, 2**63 - 1, -(2**63), 2**64 - 1, rnd.randrange(-1000, 1000)])
    if pick == 3:
        return rnd.choice([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e308, 5e-324])
    if pick == 4:
        return "".join(chr(rnd.choice([0, 0x41, 0x7F, 0xE9, 0x202E, 0xFEFF, 0x1F600, 0xFF1B]))
                       for _ in range(rnd.randrange(0, 12)))
    if pick == 5:
        return rnd.randbytes(rnd.randrange(0, 16))
    if pick == 6:
        return str(uuid.UUID(int=rnd.getrandbits(128), version=4))
    if pick == 7:
        return "x" * rnd.choice([0, 36, 64, 65, 129, 257, 5000, 70_000])
    if pick == 8:
        return [_wire_value(rnd, depth + 1) for _ in range(rnd.randrange(0, 4))]
    if pick == 9:
        return {str(_wire_value(rnd, 3)): _wire_value(rnd, depth + 1) for _ in range(rnd.randrange(0, 4))}
    if pick == 10:
        return rnd.choice(sorted(FRAME_KINDS))
    return {"code": _wire_value(rnd, 3), "message": _wire_value(rnd, 3)}


def _nested(depth: int, kind: int) -> bytes:
    """A value nested ``depth`` levels deep, as raw msgpack (arrays or maps of one item)."""
    if kind == 0:
        return b"\x91" * depth + b"\xc0"
    return b"\x81\xa1k" * depth + b"\xc0"


class Mutator:
    """Turns a seed corpus into an endless stream of hostile inputs."""

    def __init__(self, corpus: list[bytes], seed: int) -> None:
        self.corpus = corpus
        self.rnd = random.Random(seed)
        self.ops: list[Callable[[bytes], bytes]] = [
            self._flip, self._marker, self._truncate, self._splice, self._insert,
            self._length_bomb, self._structure, self._structure, self._structure,
            self._nest, self._duplicate_key, self._garbage,
        ]

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.next()

    def next(self) -> bytes:
        data = self.rnd.choice(self.corpus)
        for _ in range(self.rnd.choice([1, 1, 1, 2, 3])):
            data = self.rnd.choice(self.ops)(data)
        return data

    # -- byte level

    def _pos(self, data: bytes) -> int:
        return self.rnd.randrange(len(data)) if data else 0

    def _flip(self, data: bytes) -> bytes:
        if not data:
            return data
        b = bytearray(data)
        i = self._pos(data)
        b[i] ^= 1 << self.rnd.randrange(8)
        return bytes(b)

    def _marker(self, data: bytes) -> bytes:
        b = bytearray(data or b"\x00")
        b[self._pos(b)] = self.rnd.choice(MARKERS)
        return bytes(b)

    def _truncate(self, data: bytes) -> bytes:
        return data[: self._pos(data)]

    def _splice(self, data: bytes) -> bytes:
        other = self.rnd.choice(self.corpus)
        return data[: self._pos(data)] + other[self._pos(other):]

    def _insert(self, data: bytes) -> bytes:
        i = self._pos(data)
        return data[:i] + self.rnd.randbytes(self.rnd.randrange(1, 9)) + data[i:]

    def _length_bomb(self, data: bytes) -> bytes:
        """A str/bin/array/map header claiming far more than follows."""
        header = self.rnd.choice([b"\xdb\xff\xff\xff\xff", b"\xc6\x7f\xff\xff\xff",
                                  b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff",
                                  b"\xc9\x7f\xff\xff\xff\x01"])
        i = self._pos(data)
        return data[:i] + header + data[i:]

    def _garbage(self, data: bytes) -> bytes:
        return self.rnd.randbytes(self.rnd.randrange(0, 64))

    # -- structure level (re-packed, so the bytes are valid msgpack with wrong content)

    def _load(self, data: bytes) -> dict[str, Any] | None:
        try:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception:  # a byte-mutated seed: fall back to byte mutations
            return None
        return obj if isinstance(obj, dict) else None

    def _pack(self, obj: Any, fallback: bytes) -> bytes:
        try:
            return bytes(msgpack.packb(obj, use_bin_type=True))
        except (TypeError, ValueError, OverflowError):
            return fallback

    def _structure(self, data: bytes) -> bytes:
        obj = self._load(data)
        if obj is None:
            return self._flip(data)
        action = self.rnd.randrange(4)
        keys = list(obj)
        if action == 0 and keys:
            obj[self.rnd.choice(keys)] = _wire_value(self.rnd)
        elif action == 1 and keys:
            del obj[self.rnd.choice(keys)]
        elif action == 2:
            obj[self.rnd.choice(["t", "id", "m", "p", "r", "e", "ch", "d", "seq", "ids",
                                 "session", "held", "waiting", "caps", "devices", "protocol",
                                 "settings", "zz"])] = _wire_value(self.rnd)
        else:  # a nested field replaced deeper down
            for key in keys:
                if isinstance(obj[key], dict) and obj[key]:
                    inner = obj[key]
                    inner[self.rnd.choice(list(inner))] = _wire_value(self.rnd)
                    break
                if isinstance(obj[key], list) and obj[key]:
                    obj[key][self.rnd.randrange(len(obj[key]))] = _wire_value(self.rnd)
                    break
        return self._pack(obj, data)

    def _duplicate_key(self, data: bytes) -> bytes:
        """The same key twice in one map (msgpack allows it; the last one wins)."""
        obj = self._load(data)
        if not obj:
            return data
        key = self.rnd.choice(list(obj))
        head = msgpack.packb(key) + msgpack.packb(_wire_value(self.rnd), use_bin_type=True)
        n = len(obj) + 1
        if n >= 16:
            return data
        body = b"".join(
            msgpack.packb(k) + self._pack(v, b"\xc0") for k, v in obj.items()
        )
        return bytes([0x80 | n]) + body + head

    def _nest(self, data: bytes) -> bytes:
        """Replace ``p``/``d``/``r`` with a value nested hundreds to thousands of levels."""
        depth = self.rnd.choice([100, 600, 1100, 5000, 50_000])
        kind = self.rnd.choice(sorted(FRAME_KINDS))
        key = self.rnd.choice(["p", "d", "r", "caps", "e"])
        head = b"\x83" + msgpack.packb("t") + msgpack.packb(kind)
        head += msgpack.packb("id") + msgpack.packb(str(uuid.UUID(int=self.rnd.getrandbits(128),
                                                                version=4)))
        return head + msgpack.packb(key) + _nested(depth, self.rnd.randrange(2))
