"""The envelope: one msgpack map per binary WebSocket frame (docs/design.md §3, a contract).

Keys are short on the wire: ``t`` kind, ``id`` request id, ``m`` method, ``p`` params,
``r`` result, ``e`` error ``{code, message, data?}``, ``ch`` channel, ``d`` data, ``seq`` stream
sequence. One pydantic model per kind, tagged by ``t``:

========  =====================  ==============================================================
kind      direction              fields
========  =====================  ==============================================================
hello     bridge → controller    first frame: session, software, protocol, caps, devices, held
welcome   controller → bridge    bridge, session, resumed, protocol, waiting, settings
req       controller → bridge    id (UUID4), m, p
res       bridge → controller    id, exactly one of r / e
ack       controller → bridge    ids: results received, the bridge may forget them
cancel    controller → bridge    id: stop working on it, nobody waits for the result
evt       bridge → controller    ch, seq, d (stream data, e.g. a logcat batch)
ping      either                 id: an application-level liveness probe (not RFC 6455 ping)
pong      either                 id: the probe's id echoed
========  =====================  ==============================================================

Unknown keys are ignored, so a later version may add optional fields without a bump; a change
that an older peer would misread bumps :data:`PROTOCOL_VERSION` (and the subprotocol name).
Every model's ``repr``/``str`` is safe for logs: payloads are truncated, bytes shown by size.
"""

from __future__ import annotations

import dataclasses
import os
import re
from enum import StrEnum
from itertools import islice
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

from protocol.errors import ErrorCode, RpcError
from protocol.settings import DEFAULTS, Settings

__all__ = [
    "DEVICES_CHANNEL",
    "FRAME_ADAPTER",
    "FRAME_KINDS",
    "LABEL_PATTERN",
    "MAX_LABELS",
    "PROTOCOL_VERSION",
    "SUBPROTOCOL",
    "Ack",
    "Cancel",
    "Capabilities",
    "ChannelId",
    "DeviceInfo",
    "ErrorBody",
    "Evt",
    "Frame",
    "Hello",
    "Label",
    "Ping",
    "Pong",
    "Profile",
    "Req",
    "RequestId",
    "Res",
    "Serial",
    "SharedSettings",
    "Welcome",
    "is_channel",
    "is_request_id",
    "new_request_id",
    "short_repr",
]

PROTOCOL_VERSION = 1
SUBPROTOCOL = f"droidwire.v{PROTOCOL_VERSION}"

#: The reserved channel on which a bridge announces inventory changes (``d``: ``{"devices": [...]}``).
DEVICES_CHANNEL = "$devices"

_MAX_ID = 64
_MAX_MESSAGE = 16_384
_MAX_LIST = 100_000  # ids in hello/welcome/ack; the frame cap bounds them anyway


# The canonical text of a UUID4 (RFC 4122 §4.4): version nibble 4, variant bits 10 (8, 9, a,
# b), lower-case hex, hyphenated 8-4-4-4-12 — exactly what ``str(uuid.UUID(x))`` gives for a
# version-4 UUID. A regex instead of ``uuid.UUID()``: ids are checked on every frame.
_UUID4_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _check_uuid4(value: str) -> str:
    if _UUID4_RE.fullmatch(value) is None:
        raise ValueError("request id must be a canonical lower-case UUID4 string")
    return value


#: A request id: a canonical UUID4 string, globally unique across controller replicas.
RequestId = Annotated[
    str, StringConstraints(min_length=36, max_length=36), AfterValidator(_check_uuid4)
]
#: An adb serial: printable ASCII without spaces (``emulator-5554``, ``10.0.0.7:5555``).
Serial = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!-~]+$")]
#: A stream channel name (a subscription's id, or a reserved ``$name``).
ChannelId = Annotated[str, StringConstraints(min_length=1, max_length=_MAX_ID, pattern=r"^[!-~]+$")]
_Nonce = Annotated[str, StringConstraints(max_length=_MAX_ID)]
_Name = Annotated[str, StringConstraints(max_length=256)]
#: A device label or pool name (bridge config, admin API, ``label=``/``pool=`` selectors).
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_LABELS = 32
Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]


_CHANNEL_RE = re.compile(rf"[!-~]{{1,{_MAX_ID}}}")


def is_channel(value: object) -> bool:
    """A valid ``ch``: 1–64 printable ASCII characters, no spaces (cheap, for hot paths)."""
    return isinstance(value, str) and _CHANNEL_RE.fullmatch(value) is not None


def is_request_id(value: object) -> bool:
    """A valid request id (canonical UUID4 string)."""
    return isinstance(value, str) and _UUID4_RE.fullmatch(value) is not None


def new_request_id() -> str:
    """A fresh request id (UUID4): ids from several controller replicas never collide.

    ``str(uuid.uuid4())`` without the UUID object (one per RPC): 122 random bits from
    ``os.urandom``, the version nibble 4 and the RFC 4122 variant bits set as uuid4() does."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr`` for logs: bytes as their size, containers and strings cut, never the whole payload."""
    text = _brief(value, limit, 0)
    if len(text) > limit:
        return f"{text[:limit]}…"
    return text


def _brief(value: Any, limit: int, depth: int) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        return repr(value[: limit + 1])
    if depth >= 3 and isinstance(value, dict | list | tuple):
        return "{…}" if isinstance(value, dict) else "[…]"
    if isinstance(value, dict):
        parts = [f"{k!r}: {_brief(v, limit, depth + 1)}" for k, v in islice(value.items(), 8)]
        more = ", …" if len(value) > 8 else ""
        return "{" + ", ".join(parts) + more + "}"
    if isinstance(value, list | tuple):
        parts = [_brief(v, limit, depth + 1) for v in islice(value, 8)]
        more = f", …({len(value)} items)" if len(value) > 8 else ""
        return "[" + ", ".join(parts) + more + "]"
    return repr(value)


_DEFAULTS: dict[type[BaseModel], tuple[dict[str, Any], list[tuple[str, Any]]]] = {}


def _defaults_of(cls: type[BaseModel]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A model's plain defaults and its default factories, computed once per class."""
    known = _DEFAULTS.get(cls)
    if known is None:
        plain: dict[str, Any] = {}
        factories: list[tuple[str, Any]] = []
        for name, info in cls.model_fields.items():
            if info.default_factory is not None:
                factories.append((name, info.default_factory))
            elif not info.is_required():
                plain[name] = info.default
        known = _DEFAULTS[cls] = (plain, factories)
    return known


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """An instance from values this process built and checked itself (never the peer's):
        what ``model_construct`` does, without its per-call walk over the fields — frames on
        the RPC and logcat hot paths. Fields left out take their defaults."""
        plain, factories = _defaults_of(cls)
        fields = {**plain, **values}
        for name, factory in factories:
            if name not in values:
                fields[name] = factory()
        self = cls.__new__(cls)
        object.__setattr__(self, "__dict__", fields)
        object.__setattr__(self, "__pydantic_fields_set__", set(values))
        object.__setattr__(self, "__pydantic_extra__", None)
        object.__setattr__(self, "__pydantic_private__", None)
        return self

    def __repr__(self) -> str:
        fields = " ".join(
            f"{name}={short_repr(getattr(self, name))}"
            for name in type(self).model_fields
            if getattr(self, name) is not None
        )
        return f"<{type(self).__name__} {fields}>"

    def __str__(self) -> str:
        return self.__repr__()


class Profile(StrEnum):
    """What a device's owner lets droidwire do with it (docs/design.md §6)."""

    STANDARD = "standard"
    INSTRUMENT_ONLY = "instrument-only"
    NO_SHELL = "no-shell"
    # Between standard and full, for an agent driving the phone: any app's activity, taps,
    # text and keys anywhere on screen; never an install, a wipe or a settings write.
    AGENT = "agent"
    FULL = "full"


class DeviceInfo(_Model):
    """One device as a bridge sees it; ``state`` is adb's (``device``, ``offline``, …)."""

    serial: Serial
    state: Annotated[str, StringConstraints(min_length=1, max_length=32)]
    model: _Name | None = None
    manufacturer: _Name | None = None
    release: _Name | None = None
    sdk: int | None = None
    abi: _Name | None = None
    battery: int | None = Field(default=None, ge=0, le=100)
    profile: Profile = Profile.STANDARD
    # Set by the bridge owner's config, for the controller's selectors (label=, pool=).
    labels: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    pool: Label | None = None


class Capabilities(_Model):
    """What a bridge can do. ``methods`` lists exactly the RPCs it implements (no lying)."""

    build: bool = False
    devices: bool = False
    toolchain: Literal["gradle", "simulated"] | None = None
    checker: Literal["kotlinc"] | None = None  # the real compiler checks tests first
    projects: list[_Name] = Field(default_factory=list, max_length=1000)
    methods: list[_Name] = Field(default_factory=list, max_length=1000)

    def supports(self, method: str) -> bool:
        """Whether the bridge said it implements ``method`` (route nothing else to it)."""
        return method in self.methods


class SharedSettings(_Model):
    """The controller's settings a bridge adopts, so both ends agree."""

    ping_interval_s: float | None = Field(default=None, gt=0)
    ping_timeout_s: float | None = Field(default=None, gt=0)
    max_frame_bytes: int = Field(gt=0)
    logcat_batch_lines: int = Field(gt=0)
    logcat_flush_s: float = Field(gt=0)

    @classmethod
    def from_settings(cls, settings: Settings = DEFAULTS) -> SharedSettings:
        return cls(
            ping_interval_s=settings.ping_interval_s,
            ping_timeout_s=settings.ping_timeout_s,
            max_frame_bytes=settings.max_frame_bytes,
            logcat_batch_lines=settings.logcat_batch_lines,
            logcat_flush_s=settings.logcat_flush_s,
        )

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with these values taken over."""
        return dataclasses.replace(
            settings,
            ping_interval_s=self.ping_interval_s,
            ping_timeout_s=self.ping_timeout_s,
            max_frame_bytes=self.max_frame_bytes,
            logcat_batch_lines=self.logcat_batch_lines,
            logcat_flush_s=self.logcat_flush_s,
        )


class ErrorBody(_Model):
    """A ``res`` frame's ``e``. ``code`` stays a string so a newer peer's codes pass through."""

    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    message: Annotated[str, StringConstraints(max_length=_MAX_MESSAGE)]
    data: dict[str, Any] | None = None

    @classmethod
    def from_error(cls, error: RpcError) -> ErrorBody:
        """The wire form of ``error``; a message over the bound is cut, not refused."""
        message = error.message
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 1] + "…"
        return cls(code=error.code.value, message=message, data=error.data)

    def to_error(self) -> RpcError:
        """The :class:`RpcError` to raise; an unknown code becomes ``internal``."""
        error = RpcError(self.code, self.message, self.data)
        if error.code is ErrorCode.INTERNAL and self.code != ErrorCode.INTERNAL.value:
            error.data = {**(self.data or {}), "wire_code": self.code}
        return error


class Hello(_Model):
    """Bridge → controller, first frame of every connection."""

    t: Literal["hello"] = "hello"
    session: RequestId  # the bridge process's session id (UUID4); same id => resume
    software: _Name  # droidwire version of the bridge
    protocol: int = PROTOCOL_VERSION
    caps: Capabilities = Field(default_factory=Capabilities)
    devices: list[DeviceInfo] = Field(default_factory=list, max_length=10_000)
    held: list[RequestId] = Field(default_factory=list, max_length=_MAX_LIST)


class Welcome(_Model):
    """Controller → bridge, answers ``hello``; the session is then open."""

    t: Literal["welcome"] = "welcome"
    bridge: _Name  # the bridge's id, from its token (never from what hello claims)
    session: RequestId
    resumed: bool = False
    protocol: int = PROTOCOL_VERSION
    waiting: list[RequestId] = Field(default_factory=list, max_length=_MAX_LIST)
    settings: SharedSettings = Field(default_factory=SharedSettings.from_settings)


# The wire keys are short (``m``, ``p``, ``r``, ``e``, ``ch``, ``d``); the attributes are named
# for what they hold. A peer's frame is read by its wire keys only (codec.decode); code may
# build a frame by either name.
_WIRE_NAMES = ConfigDict(frozen=True, extra="ignore", validate_by_alias=True,
                         validate_by_name=True, serialize_by_alias=True)


def _wire(key: str, **kwargs: Any) -> Any:
    """A field named for what it holds in code, ``key`` on the wire."""
    return Field(validation_alias=key, serialization_alias=key, **kwargs)


class Req(_Model):
    """A request: ``method`` (wire key ``m``) with its ``params`` (``p``)."""

    model_config = _WIRE_NAMES

    t: Literal["req"] = "req"
    id: RequestId
    method: Annotated[str, StringConstraints(min_length=1, max_length=128)] = _wire("m")
    params: dict[str, Any] = _wire("p", default_factory=dict)


class Res(_Model):
    """A response: exactly one of ``result`` (wire key ``r``) and ``error`` (``e``)."""

    model_config = _WIRE_NAMES

    t: Literal["res"] = "res"
    id: RequestId
    result: dict[str, Any] | None = _wire("r", default=None)
    error: ErrorBody | None = _wire("e", default=None)

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.result is None) == (self.error is None):
            raise ValueError("a res carries exactly one of r and e")
        return self

    @classmethod
    def success(cls, request_id: str, result: dict[str, Any]) -> Res:
        return cls(id=request_id, result=result)

    @classmethod
    def failure(cls, request_id: str, error: RpcError) -> Res:
        return cls(id=request_id, error=ErrorBody.from_error(error))

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> dict[str, Any]:
        """The result, or raise the error it carries as :class:`RpcError`."""
        if self.error is not None:
            raise self.error.to_error()
        assert self.result is not None  # guaranteed by _one_of
        return self.result


class Ack(_Model):
    t: Literal["ack"] = "ack"
    ids: list[RequestId] = Field(min_length=1, max_length=_MAX_LIST)


class Cancel(_Model):
    t: Literal["cancel"] = "cancel"
    id: RequestId


class Evt(_Model):
    """A stream frame on ``channel`` (wire key ``ch``); its ``data`` (``d``) is validated per
    batch by the channel's model, not per line."""

    model_config = _WIRE_NAMES

    t: Literal["evt"] = "evt"
    channel: ChannelId = _wire("ch")
    seq: int = Field(default=0, ge=0)
    data: Any = _wire("d", default=None)


class Ping(_Model):
    t: Literal["ping"] = "ping"
    id: _Nonce


class Pong(_Model):
    t: Literal["pong"] = "pong"
    id: _Nonce


Frame = Annotated[
    Hello | Welcome | Req | Res | Ack | Cancel | Evt | Ping | Pong,
    Field(discriminator="t"),
]
FRAME_ADAPTER: TypeAdapter[Frame] = TypeAdapter(Frame)
FRAME_KINDS: frozenset[str] = frozenset(
    {"hello", "welcome", "req", "res", "ack", "cancel", "evt", "ping", "pong"}
)
