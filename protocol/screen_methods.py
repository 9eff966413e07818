"""The live screen and remote control RPCs, registered when :mod:`protocol` is imported.

==========================  ===============================  ===============================
method                      params                           result
==========================  ===============================  ===============================
``device.screen.subscribe``   :class:`ScreenSubscribeParams`   :class:`ScreenSubscribeResult`
``device.screen.unsubscribe`` :class:`ScreenUnsubscribeParams` :class:`~protocol.methods.Empty`
``device.input``              :class:`InputParams`             :class:`InputResult`
==========================  ===============================  ===============================

A screen subscription streams ``evt`` frames on its own channel whose ``d`` is a
:class:`ScreenFrame` (``{"codec", "key", "data", "w", "h", "n", "ts"}``); the last one is
``{"eof": true, "reason"}``. ``codec`` is ``h264`` (one access unit per frame, Annex B, SPS
and PPS in front of every key frame), ``jpeg`` or ``png`` (one whole picture per frame).
``n`` numbers the frames the source produced (a gap: frames skipped because the link was
busy); ``ts`` is the wall-clock time in ms the bridge read the frame from the device.

Input coordinates are fractions (0 ≤ x, y < 1) of the screen *as it is shown* (the stream's
picture, in the current rotation): the bridge maps them to pixels with the screen's real size
and rotation, so no client needs either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from protocol.envelope import ChannelId, Evt, Serial
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Empty, Method, Params, Result, register

__all__ = [
    "INPUT",
    "INPUT_KEYS",
    "MAX_FRAME_DATA",
    "SCREEN_SUBSCRIBE",
    "SCREEN_UNSUBSCRIBE",
    "InputParams",
    "InputResult",
    "ScreenCodec",
    "ScreenFrame",
    "ScreenSubscribeParams",
    "ScreenSubscribeResult",
    "ScreenUnsubscribeParams",
    "parse_screen_frame",
]

ScreenCodec = Literal["h264", "jpeg", "png"]
#: A frame's bytes: far below the frame cap, so a frame never crowds out a result.
MAX_FRAME_DATA = 4 << 20
#: The keys a remote control may press, and their Android key codes.
INPUT_KEYS: dict[str, str] = {
    "back": "KEYCODE_BACK",
    "home": "KEYCODE_HOME",
    "recents": "KEYCODE_APP_SWITCH",
    "volume_up": "KEYCODE_VOLUME_UP",
    "volume_down": "KEYCODE_VOLUME_DOWN",
    "power": "KEYCODE_POWER",
    "enter": "KEYCODE_ENTER",
    "delete": "KEYCODE_DEL",
}
_Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]


class ScreenSubscribeParams(Params):
    serial: Serial
    codec: ScreenCodec = "jpeg"
    max_fps: int = Field(default=10, ge=1, le=30)
    #: The longer side of the picture, in pixels (the source scales down to it).
    max_side: int = Field(default=720, ge=64, le=2400)


class ScreenSubscribeResult(Result):
    channel: ChannelId
    codec: ScreenCodec
    source: Literal["screenrecord", "screencap"]


class ScreenUnsubscribeParams(Params):
    channel: ChannelId


class InputParams(Params):
    serial: Serial
    action: Literal["tap", "long_press", "swipe", "text", "key"]
    x: _Fraction | None = None
    y: _Fraction | None = None
    x2: _Fraction | None = None
    y2: _Fraction | None = None
    duration_ms: int | None = Field(default=None, ge=0, le=10_000)
    text: Annotated[str, StringConstraints(min_length=1, max_length=500)] | None = None
    key: Literal[
        "back", "home", "recents", "volume_up", "volume_down", "power", "enter", "delete"
    ] | None = None

    @model_validator(mode="after")
    def _fields_of_action(self) -> Self:
        need: dict[str, tuple[str, ...]] = {
            "tap": ("x", "y"),
            "long_press": ("x", "y"),
            "swipe": ("x", "y", "x2", "y2"),
            "text": ("text",),
            "key": ("key",),
        }
        missing = [f for f in need[self.action] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"{self.action} needs {', '.join(missing)}")
        return self


class InputResult(Result):
    ok: bool
    exit_code: int = 0
    argv: list[Annotated[str, StringConstraints(max_length=600)]] = Field(
        default_factory=list, max_length=16
    )


@dataclass(frozen=True, slots=True)
class ScreenFrame:
    """One screen ``evt``: a picture (or H.264 access unit), or the stream's end."""

    codec: str = "jpeg"
    data: bytes = b""
    key: bool = True
    w: int = 0
    h: int = 0
    n: int = 0
    ts: float = 0.0
    eof: bool = False
    reason: str | None = None
    seq: int = 0

    def to_wire(self) -> dict[str, Any]:
        if self.eof:
            return {"eof": True, "reason": self.reason or "eof"}
        return {"codec": self.codec, "key": self.key, "data": self.data, "w": self.w,
                "h": self.h, "n": self.n, "ts": self.ts}

    @classmethod
    def from_event(cls, evt: Evt) -> ScreenFrame:
        return parse_screen_frame(evt.data, seq=evt.seq)


def parse_screen_frame(d: Any, *, seq: int = 0) -> ScreenFrame:
    """Validate one screen ``evt``'s ``d`` (:class:`RpcError` ``bad_request``)."""
    if not isinstance(d, dict):
        raise RpcError(ErrorCode.BAD_REQUEST, "screen frame must be a map")
    if d.get("eof") is True:
        reason = d.get("reason")
        return ScreenFrame(eof=True, reason=str(reason)[:200] if reason is not None else "eof",
                           seq=seq)
    codec, data, key = d.get("codec"), d.get("data"), d.get("key", True)
    w, h, n, ts = d.get("w", 0), d.get("h", 0), d.get("n", 0), d.get("ts", 0.0)
    if codec not in ("h264", "jpeg", "png"):
        raise RpcError(ErrorCode.BAD_REQUEST, "screen frame codec must be h264, jpeg or png")
    if not isinstance(data, bytes) or not 0 < len(data) <= MAX_FRAME_DATA:
        raise RpcError(ErrorCode.BAD_REQUEST, f"screen frame data must be 1..{MAX_FRAME_DATA} bytes")
    if type(key) is not bool or not all(type(v) is int and 0 <= v < 1 << 31 for v in (w, h, n)):
        raise RpcError(ErrorCode.BAD_REQUEST, "screen frame key/w/h/n malformed")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise RpcError(ErrorCode.BAD_REQUEST, "screen frame ts must be a number")
    return ScreenFrame(codec=codec, data=data, key=key, w=w, h=h, n=n, ts=float(ts), seq=seq)


SCREEN_SUBSCRIBE = Method(
    "device.screen.subscribe", ScreenSubscribeParams, ScreenSubscribeResult, "devices"
)
SCREEN_UNSUBSCRIBE = Method(
    "device.screen.unsubscribe", ScreenUnsubscribeParams, Empty, "devices", idempotent=True
)
INPUT = Method("device.input", InputParams, InputResult, "devices")

SCREEN_METHODS: tuple[Method[Any, Any], ...] = (SCREEN_SUBSCRIBE, SCREEN_UNSUBSCRIBE, INPUT)

for _spec in SCREEN_METHODS:
    register(_spec, replace=True)
