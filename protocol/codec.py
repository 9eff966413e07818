"""msgpack codec for envelopes: bytes in, typed frames out, with a frame-size cap.

Strict by contract: whatever bytes arrive, :func:`decode` returns a frame or raises
:class:`~protocol.errors.DecodeError` (:class:`~protocol.errors.FrameTooLarge` over the cap),
never another exception type. msgpack maps keep ``str`` keys (``raw=False``), ``bin`` stays
``bytes`` (``use_bin_type=True``); extension types are refused.

Hot path: ``evt`` frames (logcat batches, hundreds of lines each) skip pydantic — the envelope
keys are checked by hand and ``d`` is left as plain msgpack structures, for the channel's
consumer to validate once per batch (see :func:`protocol.methods.parse_log_batch`).
:func:`encode_event` likewise packs a plain dict, and :func:`encode_result` a successful
``res`` (the bridge's RPC hot path). :func:`encode_parts` gives a request that carries a large
payload (a tunnel's write) as a head and the payload, for a socket that writes the two without
joining them.

Set the WebSocket library's own ``max_size`` to the same cap, so an oversize frame is
refused before it is buffered whole.

Bounded decoding: a frame's bytes do not bound what unpacking it costs — one byte (``0x90``)
is an empty array, ~64 bytes of Python objects, so 16 MiB of them would be a gigabyte. So a
frame is read in two passes. The first walks the top-level map without building anything
(msgpack's ``skip``) to learn its kind ``t`` (and ``id``); the second unpacks it under that
kind's :class:`KindLimits`: msgpack's own per-object caps (``max_array_len``, ``max_map_len``,
``max_str_len``, ``max_bin_len``, checked before an object is built) and a budget of
containers and of items for the whole frame, counted as containers complete. A frame over any
of them is a :class:`~protocol.errors.DecodeError` naming its kind (docs/protocol.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
from pydantic import ValidationError

from protocol.envelope import FRAME_ADAPTER, FRAME_KINDS, Ack, Evt, Frame, Req, Res, is_channel
from protocol.errors import DecodeError, EncodeError, FrameTooLarge
from protocol.settings import DEFAULTS

__all__ = [
    "KIND_LIMITS",
    "PARTS_MIN_PAYLOAD",
    "Codec",
    "KindLimits",
    "decode",
    "decode_raw",
    "encode",
    "encode_event",
    "encode_parts",
    "encode_result",
    "event_of",
    "frame_of",
    "peek_kind",
]


@dataclass(frozen=True, slots=True)
class KindLimits:
    """What one frame kind can carry: msgpack's per-object caps (``None`` for strings and
    bytes: the frame cap), and the whole frame's budget of containers (arrays and maps) and
    of items (their elements, a map's entries counting twice)."""

    max_array_len: int
    max_map_len: int
    max_str_len: int | None
    max_bin_len: int | None
    max_containers: int
    max_items: int


_SMALL = KindLimits(16, 16, 1024, 0, 16, 256)
#: Per frame kind. Results and events carry the big payloads: a logcat dump of a 16 MiB
#: buffer (about 600,000 lines of 30 bytes or more), a UI tree, a screenshot (``bin``);
#: ``hello`` up to 10,000 devices and 100,000 held ids; requests at most a pushed file, a test
#: source, an argv of 256. Anything more is refused before it is built.
KIND_LIMITS: dict[str, KindLimits] = {
    "hello": KindLimits(100_000, 1_000, 65_536, 65_536, 100_000, 1_000_000),
    "welcome": KindLimits(100_000, 256, 65_536, 0, 1_000, 200_000),
    "req": KindLimits(10_000, 1_000, None, None, 20_000, 200_000),
    "res": KindLimits(600_000, 10_000, None, None, 100_000, 1_000_000),
    "evt": KindLimits(100_000, 1_000, None, None, 100_000, 1_000_000),
    "ack": KindLimits(100_000, 16, 1024, 0, 16, 100_016),
    "cancel": _SMALL,
    "ping": _SMALL,
    "pong": _SMALL,
}
_MAX_ENVELOPE_KEYS = 32
# Frames up to this size are unpacked without the container/item budget (at most one object
# per byte: a few MB of Python at worst), only under the per-object caps.
_BUDGET_FROM_BYTES = 64 * 1024
_ID_KINDS = frozenset({"req", "res", "cancel", "ping", "pong"})  # frames that carry an ``id``


class _Budget(Exception):
    """A frame over its kind's container or item budget."""


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not allowed")


def _pack(obj: dict[str, Any], limit: int) -> bytes:
    try:
        data: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode frame: {exc}") from exc
    if len(data) > limit:
        raise FrameTooLarge(len(data), limit)
    return data


def encode(frame: Frame, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes) -> bytes:
    """One frame as msgpack bytes; ``FrameTooLarge`` if over the cap (answer with an error)."""
    if isinstance(frame, Evt):
        return encode_event(frame.channel, frame.seq, frame.data, max_frame_bytes=max_frame_bytes)
    # The per-request frames as plain maps, built by hand: the same keys ``model_dump``
    # (exclude_none) gives, without its cost on every call. Anything else in ``p``/``r`` that
    # msgpack cannot pack (a model, a datetime) goes the model_dump way below.
    obj: dict[str, Any] | None = None
    if isinstance(frame, Req):
        obj = {"t": "req", "id": frame.id, "m": frame.method, "p": frame.params}
    elif isinstance(frame, Res) and frame.error is None:
        obj = {"t": "res", "id": frame.id, "r": frame.result}
    elif isinstance(frame, Ack):
        obj = {"t": "ack", "ids": frame.ids}
    if obj is not None:
        try:
            return _pack(obj, max_frame_bytes)
        except EncodeError:
            pass
    return _pack(frame.model_dump(exclude_none=True, by_alias=True), max_frame_bytes)


#: The smallest payload :func:`encode_parts` keeps apart: below it, one joined message costs
#: less than a second write. (At least 64 KiB: such a payload's ``bin`` header is bin 32.)
PARTS_MIN_PAYLOAD = 64 * 1024
_EMPTY_BIN_TAIL = b"\xc4\x00"  # msgpack's bin 8 of length 0: how an empty ``data`` ends a frame


def encode_parts(
    frame: Frame, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes
) -> tuple[bytes, memoryview] | None:
    """A ``req`` whose params end with a large bytes-like ``data`` (a tunnel's write) as two
    parts, its head and a byte view of that payload, so that the payload reaches the socket
    without being copied into the frame: ``head + payload`` is exactly what :func:`encode`
    gives. None for any other frame (or one :func:`encode` must judge: it raises what this
    would).

    The head is the frame packed with an empty ``data`` — the params' last value, so the
    frame's last bytes — and that empty ``bin`` replaced by the payload's ``bin`` header, in
    msgpack's shortest form as ``packb`` writes it."""
    if not isinstance(frame, Req):
        return None
    params = frame.params
    payload = params.get("data")
    if (not isinstance(payload, bytes | bytearray | memoryview)
            or next(reversed(params)) != "data"):
        return None
    view = memoryview(payload)
    if not view.contiguous or view.nbytes < PARTS_MIN_PAYLOAD:
        return None
    view = view.cast("B")
    size = view.nbytes
    try:
        head = msgpack.packb({"t": "req", "id": frame.id, "m": frame.method,
                              "p": {**params, "data": b""}}, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return None
    if not head.endswith(_EMPTY_BIN_TAIL):  # pragma: no cover - msgpack's own format
        return None
    # 64 KiB and more: msgpack's bin 32 (bin 16 ends at 64 KiB - 1, below PARTS_MIN_PAYLOAD).
    head = head[: -len(_EMPTY_BIN_TAIL)] + b"\xc6" + size.to_bytes(4, "big")
    if len(head) + size > max_frame_bytes:
        raise FrameTooLarge(len(head) + size, max_frame_bytes)
    return head, view


def encode_event(
    channel: str, seq: int, data: Any, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes
) -> bytes:
    """An ``evt`` frame from plain values, without building a model (the logcat hot path)."""
    obj: dict[str, Any] = {"t": "evt", "ch": channel, "seq": seq}
    if data is not None:
        obj["d"] = data
    return _pack(obj, max_frame_bytes)


def encode_result(
    request_id: str, result: dict[str, Any], *, max_frame_bytes: int = DEFAULTS.max_frame_bytes
) -> bytes:
    """A successful ``res`` from plain values: the bytes :func:`encode` gives for
    ``Res(id=request_id, result=result)``, without building the model (one result per RPC)."""
    try:
        return _pack({"t": "res", "id": request_id, "r": result}, max_frame_bytes)
    except EncodeError:  # something only model_dump can pack (a model, a datetime …)
        return encode(Res.trusted(id=request_id, result=result), max_frame_bytes=max_frame_bytes)


_KIND_BYTES = {k.encode(): k for k in FRAME_KINDS}


def _peek_fast(data: bytes) -> tuple[str, str | None] | None:
    """What our own encoders write: a fixmap whose first key is ``t`` (then ``id``)."""
    if len(data) < 4 or not 0x81 <= data[0] <= 0x8F or data[1:3] != b"\xa1t":
        return None
    size = data[3] - 0xA0
    if not 0 < size < 8:
        return None
    kind = _KIND_BYTES.get(bytes(data[4:4 + size]))
    if kind is None:
        return None
    if kind not in _ID_KINDS:
        return kind, None
    at = 4 + size
    if data[at:at + 3] != b"\xa2id":
        return None
    head = data[at + 3] if at + 3 < len(data) else 0
    if 0xA0 <= head <= 0xBF:
        start, length = at + 4, head - 0xA0
    elif head == 0xD9 and at + 4 < len(data):
        start, length = at + 5, data[at + 4]
    else:
        return None
    raw = bytes(data[start:start + length])
    if length > 64 or len(raw) != length or not raw.isascii():
        return None
    return kind, raw.decode("ascii")


def peek_kind(data: bytes) -> tuple[str, str | None]:
    """The kind ``t`` (and ``id``, when a short string) of a frame, without building it: the
    top-level map is walked with msgpack's ``skip``. :class:`DecodeError` if it is not a map
    with a known kind."""
    fast = _peek_fast(data)
    if fast is not None:
        return fast
    unpacker = msgpack.Unpacker(
        None, raw=False, max_buffer_size=max(len(data), 1), strict_map_key=True,
        ext_hook=_refuse_ext, max_str_len=256, max_bin_len=0, max_array_len=0, max_map_len=0,
        max_ext_len=0,
    )
    kind: Any = None
    frame_id: Any = None
    try:
        unpacker.feed(data)
        keys = unpacker.read_map_header()
        if keys > _MAX_ENVELOPE_KEYS:
            raise DecodeError(f"a frame has at most {_MAX_ENVELOPE_KEYS} keys, not {keys}")
        for _ in range(keys):
            key = unpacker.unpack()
            if key == "t" and kind is None:
                kind = unpacker.unpack()
            elif key == "id" and frame_id is None:
                frame_id = unpacker.unpack()
            else:
                unpacker.skip()
            if isinstance(kind, str) and (frame_id is not None or kind not in _ID_KINDS):
                break  # our encoders put ``t`` (and ``id``) first: nothing else to walk
    except DecodeError:
        raise
    except Exception as exc:  # not a map, a bad or oversize key, truncated …
        raise DecodeError(f"not a msgpack frame map: {type(exc).__name__}") from exc
    ident = frame_id if isinstance(frame_id, str) and len(frame_id) <= 64 else None
    if not isinstance(kind, str) or kind not in FRAME_KINDS:
        raise DecodeError("unknown frame kind", frame_id=ident)
    return kind, ident


_OPTIONS: dict[tuple[str, int], dict[str, Any]] = {}


def _unpack_options(kind: str, max_frame_bytes: int) -> dict[str, Any]:
    """msgpack's options for ``kind`` under a frame cap (computed once per pair)."""
    key = (kind, max_frame_bytes)
    options = _OPTIONS.get(key)
    if options is None:
        limits = KIND_LIMITS[kind]
        options = _OPTIONS[key] = {
            "raw": False, "use_list": True, "strict_map_key": True, "ext_hook": _refuse_ext,
            "max_array_len": limits.max_array_len, "max_map_len": limits.max_map_len,
            "max_str_len": max_frame_bytes if limits.max_str_len is None else limits.max_str_len,
            "max_bin_len": max_frame_bytes if limits.max_bin_len is None else limits.max_bin_len,
            "max_ext_len": 0,
        }
    return options


def decode_raw(data: bytes, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes) -> dict[str, Any]:
    """Bytes to the plain msgpack map with a known ``t``, within that kind's
    :data:`KIND_LIMITS`; no model validation."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"frames are binary, not {type(data).__name__}")
    if len(data) > max_frame_bytes:
        raise FrameTooLarge(len(data), max_frame_bytes)
    kind, frame_id = peek_kind(data)
    limits = KIND_LIMITS[kind]
    options = _unpack_options(kind, max_frame_bytes)
    try:
        if len(data) <= _BUDGET_FROM_BYTES:
            # A small frame cannot hold enough objects to matter (one per byte at most): the
            # budget's hooks, a Python call per container, are only for frames that could.
            obj = msgpack.unpackb(data, **options)
        else:
            counts = [0, 0]  # containers, items

            def _list(value: list[Any]) -> list[Any]:
                counts[0] += 1
                counts[1] += len(value)
                if counts[0] > limits.max_containers or counts[1] > limits.max_items:
                    raise _Budget
                return value

            def _map(value: dict[str, Any]) -> dict[str, Any]:
                counts[0] += 1
                counts[1] += 2 * len(value)
                if counts[0] > limits.max_containers or counts[1] > limits.max_items:
                    raise _Budget
                return value

            obj = msgpack.unpackb(data, list_hook=_list, object_hook=_map, **options)
    except _Budget:
        raise DecodeError(
            f"{kind} frame over its budget of {limits.max_containers} containers "
            f"/ {limits.max_items} items", kind=kind, frame_id=frame_id,
        ) from None
    except Exception as exc:
        # msgpack's exception set is not a documented contract (ValueError and subclasses,
        # TypeError, StackError, …): any failure to parse the peer's bytes is the peer's.
        raise DecodeError(
            f"not a msgpack frame: {type(exc).__name__}: {str(exc)[:120]}", kind=kind,
            frame_id=frame_id,
        ) from exc
    if not isinstance(obj, dict) or obj.get("t") != kind:
        raise DecodeError("a frame is a msgpack map with one kind", frame_id=frame_id)
    return obj


def decode(data: bytes, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes) -> Frame:
    """Bytes to a validated frame, or :class:`DecodeError` (``kind``/``frame_id`` when known)."""
    return frame_of(decode_raw(data, max_frame_bytes=max_frame_bytes))


def frame_of(obj: dict[str, Any]) -> Frame:
    """The frame of a map :func:`decode_raw` gave, validated (the second half of
    :func:`decode`), or :class:`DecodeError`."""
    kind: str = obj["t"]
    if kind == "evt":
        return _fast_event(obj)
    try:
        # By the wire keys only: a peer's frame spelling out ``method`` is not a request.
        return FRAME_ADAPTER.validate_python(obj, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise DecodeError(
            f"invalid {kind} frame: {_summarize(exc)}", kind=kind, frame_id=_id_of(obj)
        ) from exc


def event_of(obj: dict[str, Any]) -> tuple[str, int, Any]:
    """An ``evt`` map's (channel, seq, data), checked as :func:`decode` checks them, without
    building the frame (the logcat relay's path), or :class:`DecodeError`."""
    ch: Any = obj.get("ch")
    seq = obj.get("seq", 0)
    if not is_channel(ch):
        raise DecodeError("invalid evt frame: bad channel", kind="evt")
    if type(seq) is not int or seq < 0:
        raise DecodeError("invalid evt frame: bad seq", kind="evt")
    return ch, seq, obj.get("d")


def _fast_event(obj: dict[str, Any]) -> Evt:
    ch, seq, data = event_of(obj)
    return Evt.trusted(channel=ch, seq=seq, data=data)  # ch and seq checked


def _id_of(obj: dict[str, Any]) -> str | None:
    value = obj.get("id")
    return value if isinstance(value, str) and len(value) <= 64 else None


def _summarize(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = [
        f"{'.'.join(str(x) for x in err['loc']) or '<frame>'}: {err['msg']}" for err in errors[:3]
    ]
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more


class Codec:
    """The codec bound to one frame cap (from settings)."""

    __slots__ = ("max_frame_bytes",)

    def __init__(self, *, max_frame_bytes: int = DEFAULTS.max_frame_bytes) -> None:
        self.max_frame_bytes = max_frame_bytes

    def encode(self, frame: Frame) -> bytes:
        return encode(frame, max_frame_bytes=self.max_frame_bytes)

    def encode_event(self, channel: str, seq: int, data: Any) -> bytes:
        return encode_event(channel, seq, data, max_frame_bytes=self.max_frame_bytes)

    def encode_result(self, request_id: str, result: dict[str, Any]) -> bytes:
        return encode_result(request_id, result, max_frame_bytes=self.max_frame_bytes)

    def encode_parts(self, frame: Frame) -> tuple[bytes, memoryview] | None:
        return encode_parts(frame, max_frame_bytes=self.max_frame_bytes)

    def decode(self, data: bytes) -> Frame:
        return decode(data, max_frame_bytes=self.max_frame_bytes)

    def decode_raw(self, data: bytes) -> dict[str, Any]:
        return decode_raw(data, max_frame_bytes=self.max_frame_bytes)
