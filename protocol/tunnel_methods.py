"""Remote adb through the link (docs/tunnel.md): RPCs, stream chunks, client frames.

==========================  ==============================  ==============================
method                      params                          result
==========================  ==============================  ==============================
``device.tunnel.start``     :class:`TunnelStartParams`      :class:`TunnelStartResult`
``device.tunnel.open``      :class:`TunnelOpenParams`       :class:`TunnelOpenResult`
``device.tunnel.write``     :class:`TunnelWriteParams`      :class:`TunnelWriteResult`
``device.tunnel.ack``       :class:`TunnelAckParams`        :class:`~protocol.methods.Empty`
``device.tunnel.close``     :class:`TunnelCloseParams`      :class:`~protocol.methods.Empty`
==========================  ==============================  ==============================

One adb stream is one channel. ``open`` names the adb service (``shell,v2,raw:getprop``,
``sync:``, ``tcp:8080`` …); the bridge checks it against the caller's rights and the device's
profile and opens it through its adb server, or refuses it (``forbidden`` with the ``rule``).
Device → client bytes come as ``evt`` frames on the channel: ``{"data": bin}``, the last one
``{"eof": true, "reason"}``. At most ``window`` bytes are sent that the client has not
acknowledged (``device.tunnel.ack``). Client → device bytes go down as ``device.tunnel.write``
calls, one at a time per channel, at increasing ``offset``; each is answered once the device's
adb stream took the bytes (that is the back-pressure).

The client's side of the controller's tunnel WebSocket speaks msgpack maps (:func:`encode_frame`,
:func:`decode_frame`), one per binary message, ``op`` first:

client → controller: ``open {s, service}``, ``data {s, data}``, ``ack {s, n}``, ``close {s}``;
controller → client: ``hello {serial, banner, features, window, max_streams}``, ``opened {s}``,
``refused {s, message, rule}``, ``data {s, data}``, ``ack {s, n}``, ``close {s, reason}``,
``end {reason}`` (the whole tunnel ends: access lapsed, bridge gone).

Also here, sans I/O: what a refused ``OPEN`` looks like to the adb client that asked
(:func:`refusal_reply`) and the device features a tunnel announces (:data:`TUNNEL_FEATURES`).
"""

from __future__ import annotations

import re
import struct
from typing import Annotated, Any

import msgpack
from pydantic import Field, StringConstraints

from protocol.envelope import ChannelId, Serial
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Empty, Method, Params, Result, register

__all__ = [
    "DATA_HEAD_MAX",
    "MAX_INSTALLED",
    "MAX_SERVICE",
    "MAX_WINDOW",
    "MAX_WRITE",
    "REFUSAL_FIELDS",
    "TUNNEL_ACK",
    "TUNNEL_CLOSE",
    "TUNNEL_FEATURES",
    "TUNNEL_METHODS",
    "TUNNEL_OPEN",
    "TUNNEL_START",
    "TUNNEL_WRITE",
    "TunnelAckParams",
    "TunnelChunk",
    "TunnelCloseParams",
    "TunnelOpenParams",
    "TunnelOpenResult",
    "TunnelStartParams",
    "TunnelStartResult",
    "TunnelWriteParams",
    "TunnelWriteResult",
    "data_frame_head",
    "decode_frame",
    "encode_frame",
    "parse_data_frame",
    "parse_tunnel_chunk",
    "refusal_reply",
]

#: The longest adb service string carried (a long ``shell:`` command line fits).
MAX_SERVICE = 16 * 1024
#: The most bytes one ``device.tunnel.write`` carries.
MAX_WRITE = 1 << 20
#: The largest window a client may ask for, per stream and direction.
MAX_WINDOW = 4 << 20
#: The largest client ↔ controller frame (a data frame of MAX_WRITE bytes and its keys).
MAX_CLIENT_FRAME = MAX_WRITE + 4096

#: Device features a tunnel passes on (those the device has): every one changes only what the
#: adb client asks for in ways the bridge still checks. Left out: ``abb``/``abb_exec`` (binder
#: calls past the shell allow-list), ``sendrecv_v2*`` (sync requests the bridge does not parse),
#: ``delayed_ack`` (another transport).
TUNNEL_FEATURES = (
    "shell_v2",
    "cmd",
    "stat_v2",
    "ls_v2",
    "fixed_push_mkdir",
    "fixed_push_symlink_timestamp",
    "apex",
)

_Service = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SERVICE)]


class TunnelStartParams(Params):
    serial: Serial
    as_owner: bool = False


class TunnelStartResult(Result):
    features: list[Annotated[str, StringConstraints(max_length=64)]] = Field(max_length=64)
    profile: Annotated[str, StringConstraints(max_length=64)]


class TunnelOpenParams(Params):
    serial: Serial
    service: _Service
    window: int = Field(default=1 << 20, ge=64 * 1024, le=MAX_WINDOW)
    as_owner: bool = False


class TunnelOpenResult(Result):
    channel: ChannelId
    kind: Annotated[str, StringConstraints(max_length=32)] = "raw"
    installs: bool = False  # an install stream: an ``installed`` evt follows its end


class TunnelWriteParams(Params):
    channel: ChannelId
    offset: int = Field(ge=0)
    data: bytes = Field(min_length=1, max_length=MAX_WRITE)


class TunnelWriteResult(Result):
    written: int


class TunnelAckParams(Params):
    channel: ChannelId
    n: int = Field(ge=1, le=MAX_WINDOW)


class TunnelCloseParams(Params):
    channel: ChannelId


class TunnelChunk:
    """One ``evt`` of a tunnel stream: device bytes, the end, a request the bridge refused
    inside the stream (``refused``: a ``sync:`` request's kind, rule and path, never data), or
    what an install stream installed (``installed``: the packages new on the device once it
    ended, learned from the device; sent after the stream ended, however it ended)."""

    __slots__ = ("data", "eof", "installed", "reason", "refused", "seq")

    def __init__(self, data: bytes = b"", *, eof: bool = False, reason: str | None = None,
                 refused: dict[str, str] | None = None, installed: list[str] | None = None,
                 seq: int = 0) -> None:
        self.data = data
        self.eof = eof
        self.reason = reason
        self.refused = refused
        self.installed = installed
        self.seq = seq

    def to_wire(self) -> dict[str, Any]:
        if self.eof:
            return {"eof": True, "reason": self.reason or "closed"}
        if self.refused is not None:
            return {"refused": self.refused}
        if self.installed is not None:
            return {"installed": self.installed}
        return {"data": self.data}


MAX_INSTALLED = 64  # packages one ``installed`` chunk names (an install-multiple is one)
_PACKAGE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+")


# What a ``refused`` chunk carries, each bounded (characters).
REFUSAL_FIELDS = {"request": 8, "rule": 64, "path": 256}


def parse_tunnel_chunk(d: Any, *, seq: int = 0) -> TunnelChunk:
    """Validate one tunnel ``evt``'s ``d`` (:class:`RpcError` ``bad_request``)."""
    if not isinstance(d, dict):
        raise RpcError(ErrorCode.BAD_REQUEST, "tunnel chunk must be a map")
    if d.get("eof") is True:
        reason = d.get("reason")
        return TunnelChunk(eof=True, reason=str(reason)[:200] if reason is not None else "closed",
                           seq=seq)
    refused = d.get("refused")
    if refused is not None:
        if not isinstance(refused, dict) or not all(
                isinstance(refused.get(k), str) for k in REFUSAL_FIELDS):
            raise RpcError(ErrorCode.BAD_REQUEST,
                           "a tunnel refusal names its request, rule and path")
        return TunnelChunk(refused={k: refused[k][:n] for k, n in REFUSAL_FIELDS.items()},
                           seq=seq)
    installed = d.get("installed")
    if installed is not None:
        if not isinstance(installed, list) or len(installed) > MAX_INSTALLED or not all(
                isinstance(p, str) and len(p) <= 255 and _PACKAGE_NAME.fullmatch(p)
                for p in installed):
            raise RpcError(ErrorCode.BAD_REQUEST,
                           f"a tunnel's installed packages are at most {MAX_INSTALLED} names")
        return TunnelChunk(installed=list(installed), seq=seq)
    data = d.get("data")
    if not isinstance(data, bytes) or not 0 < len(data) <= MAX_WRITE:
        raise RpcError(ErrorCode.BAD_REQUEST, f"tunnel chunk data must be 1..{MAX_WRITE} bytes")
    return TunnelChunk(data, seq=seq)


# -- the client's WebSocket frames ------------------------------------------------------------

_OPS: dict[str, dict[str, type | tuple[type, ...]]] = {
    # client → controller
    "open": {"s": int, "service": str},
    "data": {"s": int, "data": bytes},
    "ack": {"s": int, "n": int},
    "close": {"s": int},
    # controller → client
    "hello": {"serial": str, "banner": str, "features": list, "window": int,
              "max_streams": int},
    "opened": {"s": int},
    "refused": {"s": int, "message": str, "rule": str},
    "end": {"reason": str},
}
_OPTIONAL: dict[str, dict[str, type | tuple[type, ...]]] = {
    "close": {"reason": str},
}


def encode_frame(op: str, **fields: Any) -> bytes:
    """One client ↔ controller frame (msgpack map)."""
    return msgpack.packb({"op": op, **fields}, use_bin_type=True)


#: The longest :func:`data_frame_head`.
DATA_HEAD_MAX = 32
_DATA_KEYS = msgpack.packb("op") + msgpack.packb("data") + msgpack.packb("s")
_DATA_KEY = msgpack.packb("data")


def data_frame_head(s: int, n: int) -> bytes:
    """The first bytes of ``encode_frame("data", s=s, data=payload)`` for a payload of ``n``
    bytes, which follow them: a sender that reads the payload into place after room for its
    head sends the frame without copying the payload (the same msgpack map)."""
    if n < 1 << 8:
        size = b"\xc4" + n.to_bytes(1, "big")
    elif n < 1 << 16:
        size = b"\xc5" + n.to_bytes(2, "big")
    else:
        size = b"\xc6" + n.to_bytes(4, "big")
    return b"\x83" + _DATA_KEYS + msgpack.packb(s) + _DATA_KEY + size


_DATA_PREFIX = b"\x83" + _DATA_KEYS
_UINT = {0xCC: 1, 0xCD: 2, 0xCE: 4}  # msgpack's unsigned ints past a fixint: their widths
_BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}  # bin 8/16/32: the widths of their lengths


def parse_data_frame(data: bytes) -> tuple[int, memoryview] | None:
    """A ``data`` frame laid out as :func:`data_frame_head` lays it (what the CLI sends): its
    stream id and its payload, a view of ``data`` — the payload is neither copied nor unpacked.
    None for any other frame, or another layout of this one: :func:`decode_frame` decides
    those. What it accepts, :func:`decode_frame` accepts with the same ``s`` and ``data``."""
    if not data.startswith(_DATA_PREFIX) or len(data) > MAX_CLIENT_FRAME:
        return None
    at = len(_DATA_PREFIX)
    if at >= len(data):
        return None
    tag = data[at]
    if tag < 0x80:  # positive fixint
        s, at = tag, at + 1
    elif tag in _UINT:
        width = _UINT[tag]
        s = int.from_bytes(data[at + 1 : at + 1 + width], "big")
        at += 1 + width
    else:
        return None
    if not 0 < s < 1 << 31 or not data.startswith(_DATA_KEY, at):
        return None
    at += len(_DATA_KEY)
    length = _BIN.get(data[at]) if at < len(data) else None
    if length is None:
        return None
    n = int.from_bytes(data[at + 1 : at + 1 + length], "big")
    at += 1 + length
    if not 0 < n <= MAX_WRITE or at + n != len(data):
        return None
    return s, memoryview(data)[at:]


def decode_frame(data: bytes | str) -> dict[str, Any]:
    """Validate one frame: a msgpack map with a known ``op`` and its typed fields.

    Raises :class:`RpcError` ``bad_request``; never anything else."""
    if not isinstance(data, bytes) or len(data) > MAX_CLIENT_FRAME:
        raise RpcError(ErrorCode.BAD_REQUEST, "a tunnel frame is one binary msgpack map")
    try:
        frame = msgpack.unpackb(data, raw=False, max_bin_len=MAX_WRITE, max_str_len=MAX_SERVICE,
                                max_array_len=64, max_map_len=16, max_ext_len=0)
    except Exception as exc:  # msgpack raises several unrelated types
        raise RpcError(ErrorCode.BAD_REQUEST, f"not a msgpack map: {type(exc).__name__}") from None
    if not isinstance(frame, dict):
        raise RpcError(ErrorCode.BAD_REQUEST, "a tunnel frame is a map")
    op = frame.get("op")
    fields = _OPS.get(op) if isinstance(op, str) else None
    if fields is None:
        raise RpcError(ErrorCode.BAD_REQUEST, f"unknown tunnel op {str(op)[:32]!r}")
    for name, kind in fields.items():
        value = frame.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RpcError(ErrorCode.BAD_REQUEST, f"tunnel {op}: {name} missing or mistyped")
    assert isinstance(op, str)
    for name, kind in _OPTIONAL.get(op, {}).items():
        if name in frame and not isinstance(frame[name], kind):
            raise RpcError(ErrorCode.BAD_REQUEST, f"tunnel {op}: {name} mistyped")
    s = frame.get("s")
    if isinstance(s, int) and not 0 < s < 1 << 31:
        raise RpcError(ErrorCode.BAD_REQUEST, f"tunnel {op}: stream id out of range")
    n = frame.get("n")
    if op == "ack" and isinstance(n, int) and not 0 < n <= MAX_WINDOW:
        raise RpcError(ErrorCode.BAD_REQUEST, "tunnel ack: n out of range")
    if op == "data" and not frame["data"]:
        raise RpcError(ErrorCode.BAD_REQUEST, "tunnel data: empty")
    return frame


# -- refusals as the adb client sees them -----------------------------------------------------


def _service_name(service: str) -> str:
    return service.split(":", 1)[0].split(",", 1)[0]


def refusal_reply(service: str, message: str) -> bytes | None:
    """What the local adbd side writes for a refused ``OPEN`` of ``service`` before its
    ``CLSE`` — the service accepted, the refusal as its output, so the adb client prints it —
    or None: answer with a bare ``CLSE``, as adbd answers a service it cannot open (``sync:``,
    ``tcp:``, ``jdwp:`` …: their clients print their own "closed" error).

    * ``shell,v2…:``: the message on stderr and exit code 1 (shell protocol packets);
    * ``shell:``, ``exec:``, ``root:``, ``reboot:``, ``remount:`` …: the message as output;
    * ``reverse:``: a ``FAIL`` answer with the message, which ``adb reverse`` prints.
    """
    text = f"droidwire: {message}".rstrip("\n") + "\n"
    body = text.encode("utf-8", errors="replace")[:4000]
    name = _service_name(service)
    if name == "shell":
        options = service.split(":", 1)[0].split(",")[1:]
        if "v2" in options:
            return struct.pack("<BI", 2, len(body)) + body + struct.pack("<BI", 3, 1) + b"\x01"
        return body
    if name == "reverse":
        return b"FAIL" + f"{len(body):04x}".encode() + body
    if name in ("exec", "root", "unroot", "remount", "reboot", "tcpip", "usb", "enable-verity",
                "disable-verity", "backup", "restore", "sideload", "abb", "abb_exec"):
        return body
    return None


TUNNEL_START = Method("device.tunnel.start", TunnelStartParams, TunnelStartResult, "devices",
                      idempotent=True)
TUNNEL_OPEN = Method("device.tunnel.open", TunnelOpenParams, TunnelOpenResult, "devices")
TUNNEL_WRITE = Method("device.tunnel.write", TunnelWriteParams, TunnelWriteResult, "devices")
TUNNEL_ACK = Method("device.tunnel.ack", TunnelAckParams, Empty, "devices")
TUNNEL_CLOSE = Method("device.tunnel.close", TunnelCloseParams, Empty, "devices",
                      idempotent=True)
TUNNEL_METHODS: tuple[Method[Any, Any], ...] = (
    TUNNEL_START, TUNNEL_OPEN, TUNNEL_WRITE, TUNNEL_ACK, TUNNEL_CLOSE,
)

for _spec in TUNNEL_METHODS:
    register(_spec, replace=True)
