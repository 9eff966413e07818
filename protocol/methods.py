"""Params and results of every RPC, and the registry that validates them (docs/design.md §3).

A first cut: later issues add methods with :func:`register` (or by listing a
:class:`MethodSpec` in ``_SPECS``), and bump :data:`~protocol.envelope.PROTOCOL_VERSION`
where a change is not backward compatible. Adding a method or an optional field is compatible.

Conventions:

* Params models forbid unknown keys (a typo is a ``bad_request``, not a silently ignored
  option); result models ignore them (a newer bridge may return more).
* ``bytes`` travel as msgpack ``bin`` (no base64 on the wire).
* Every string and list has a bound; the frame cap bounds the rest.
* Streams: ``device.logcat.subscribe`` returns a channel id; the bridge then sends ``evt``
  frames on it whose ``d`` is a :class:`LogBatch` (``{"lines", "dropped", "eof"?, "reason"?}``)
  and whose envelope ``seq`` counts batches from 0. A consumer validates a batch at once with
  :meth:`LogBatch.from_event` / :func:`parse_log_batch`, not line by line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from protocol.envelope import Capabilities, ChannelId, DeviceInfo, Evt, Serial
from protocol.errors import ErrorCode, RpcError
from protocol.settings import Settings

__all__ = [
    "BRIDGE_INFO",
    "COMPILE",
    "DEVICES_LIST",
    "INSTALL",
    "INSTRUMENT",
    "INVALID_RESULT",
    "LOGCAT_CLEAR",
    "LOGCAT_DUMP",
    "LOGCAT_SUBSCRIBE",
    "LOGCAT_UNSUBSCRIBE",
    "METHODS",
    "PING",
    "PULL",
    "PUSH",
    "SCREENSHOT",
    "SHELL",
    "SOURCE_LOOKUP",
    "UNINSTALL",
    "Apk",
    "BridgeInfoResult",
    "CompileParams",
    "CompileResult",
    "DeviceParams",
    "DevicesChanged",
    "DevicesListResult",
    "Empty",
    "InstallParams",
    "InstallResult",
    "InstrumentParams",
    "InstrumentResult",
    "LogBatch",
    "LogBuffer",
    "LogFormat",
    "LogcatClearParams",
    "LogcatDumpParams",
    "LogcatDumpResult",
    "LogcatSubscribeParams",
    "LogcatSubscribeResult",
    "LogcatUnsubscribeParams",
    "Method",
    "MethodRecord",
    "MethodSpec",
    "Params",
    "PingParams",
    "PingResult",
    "PullParams",
    "PullResult",
    "PushParams",
    "PushResult",
    "Result",
    "ScreenshotResult",
    "ShellParams",
    "ShellResult",
    "SourceLookupParams",
    "SourceLookupResult",
    "UninstallParams",
    "dump",
    "method_named",
    "parse_log_batch",
    "register",
    "timeout_for",
    "validate_params",
    "validate_result",
]

_Text = Annotated[str, StringConstraints(max_length=4096)]
_Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
#: A device path: absolute, no NUL (policy confines it further on the bridge).
DevicePath = Annotated[
    str, StringConstraints(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$")
]
#: An Android package name.
Package = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$"),
]
Timeout = Annotated[float, Field(gt=0, le=24 * 3600)]

LogBuffer = Literal["main", "system", "crash", "events", "radio", "kernel", "default", "all"]
LogFormat = Literal["threadtime", "brief", "time", "process", "tag", "thread", "raw", "long"]


class Params(BaseModel):
    """Base of params models: unknown keys are a ``bad_request``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Result(BaseModel):
    """Base of result models: unknown keys are ignored (newer bridges may add some)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class Empty(Params):
    """No params / no result fields."""


class DeviceParams(Params):
    serial: Serial
    # The controller vouches that the caller is the device's owner: the bridge's ``full``
    # profile is theirs alone (anyone else gets at most ``standard``), and so are ``-g``
    # installs. Absent or false for a borrower, an admin, or the controller's own work.
    as_owner: bool = False


# --- ping, bridge.info, devices.list ---------------------------------------------------------


class PingParams(Params):
    payload: bytes = Field(default=b"", max_length=1 << 20)


class PingResult(Result):
    payload: bytes = b""


class BridgeInfoResult(Result):
    software: str
    protocol: int
    session: str
    caps: Capabilities
    devices: list[DeviceInfo] = Field(default_factory=list)


class DevicesListResult(Result):
    devices: list[DeviceInfo] = Field(default_factory=list)


class DevicesChanged(Result):
    """``d`` of an ``evt`` on :data:`~protocol.envelope.DEVICES_CHANNEL`: the full inventory."""

    devices: list[DeviceInfo] = Field(default_factory=list)


# --- shell -----------------------------------------------------------------------------------


class ShellParams(DeviceParams):
    """Exactly one of ``argv`` (preferred: no shell parsing) or ``command``."""

    argv: list[Annotated[str, StringConstraints(max_length=4096)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    command: Annotated[str, StringConstraints(min_length=1, max_length=8192)] | None = None
    timeout_s: Timeout | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.argv is None) == (self.command is None):
            raise ValueError("give exactly one of argv and command")
        return self


class ShellResult(Result):
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False


# --- logcat ----------------------------------------------------------------------------------


class LogcatClearParams(DeviceParams):
    buffers: list[LogBuffer] | None = Field(default=None, min_length=1, max_length=8)


class LogcatDumpParams(DeviceParams):
    format: LogFormat = "threadtime"
    lines: int | None = Field(default=None, ge=1, le=5000)  # ``-t N``; None: the whole buffer
    buffers: list[LogBuffer] | None = Field(default=None, min_length=1, max_length=8)
    pid: int | None = Field(default=None, ge=1)


class LogcatDumpResult(Result):
    lines: list[str] = Field(default_factory=list)


class LogcatSubscribeParams(DeviceParams):
    format: LogFormat = "threadtime"
    buffers: list[LogBuffer] | None = Field(default=None, min_length=1, max_length=8)
    pid: int | None = Field(default=None, ge=1)
    tail: int | None = Field(default=None, ge=0, le=5000)  # ``-T N``: start with the last N lines


class LogcatSubscribeResult(Result):
    channel: ChannelId


class LogcatUnsubscribeParams(Params):
    channel: ChannelId


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One logcat ``evt``: ``lines`` in order, ``dropped`` lines lost to backpressure since the
    previous batch, ``eof`` when the stream ended (device gone, unsubscribed), with ``reason``.

    ``seq`` is the envelope's (docs/design.md §3 puts the stream sequence there, once): it is not
    part of :meth:`to_wire`; :meth:`from_event` fills it in. A gap in ``seq`` means batches
    were lost (e.g. across a reconnect).
    """

    lines: list[str]
    dropped: int = 0
    eof: bool = False
    reason: str | None = None
    seq: int = 0

    def to_wire(self) -> dict[str, Any]:
        """The ``d`` of the ``evt`` frame."""
        out: dict[str, Any] = {"lines": self.lines, "dropped": self.dropped}
        if self.eof:
            out["eof"] = True
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_event(cls, evt: Evt) -> LogBatch:
        """Validate an ``evt`` frame's batch as a whole (see :func:`parse_log_batch`)."""
        return parse_log_batch(evt.data, seq=evt.seq)


# Up to this many lines, a batch's lines are checked by joining them (one C pass, a third of
# the cost of collecting their types); the joined copy is at most this many lines long.
_JOIN_CHECK_LINES = 512


def _all_str(lines: list[Any]) -> bool:
    """Whether every item of ``lines`` is a ``str``, without a Python step per line."""
    if len(lines) <= _JOIN_CHECK_LINES:
        try:
            "".join(lines)
        except TypeError:
            return False
        return True
    # map(type, …) runs in C: a tenth of a generator's cost on a 100-line batch.
    return set(map(type, lines)) <= {str}


def parse_log_batch(d: Any, *, seq: int = 0) -> LogBatch:
    """Validate one batch at once (no per-line model); :class:`RpcError` ``bad_request``."""
    if not isinstance(d, dict):
        raise RpcError(ErrorCode.BAD_REQUEST, "log batch must be a map")
    lines = d.get("lines", [])
    dropped = d.get("dropped", 0)
    eof = d.get("eof", False)
    reason = d.get("reason")
    if not isinstance(lines, list) or not _all_str(lines):
        raise RpcError(ErrorCode.BAD_REQUEST, "log batch lines must be a list of strings")
    if type(dropped) is not int or dropped < 0:
        raise RpcError(ErrorCode.BAD_REQUEST, "log batch dropped must be a non-negative int")
    if type(eof) is not bool or not (reason is None or isinstance(reason, str)):
        raise RpcError(ErrorCode.BAD_REQUEST, "log batch eof/reason malformed")
    return LogBatch(lines=lines, dropped=dropped, eof=eof, reason=reason, seq=seq)


# --- screenshot, files, packages -------------------------------------------------------------


class ScreenshotResult(Result):
    png: bytes


class PushParams(DeviceParams):
    path: DevicePath
    data: bytes
    mode: int = Field(default=0o644, ge=0, le=0o777)


class PushResult(Result):
    size: int


class PullParams(DeviceParams):
    path: DevicePath
    max_bytes: int | None = Field(default=None, ge=1)


class PullResult(Result):
    data: bytes


class InstallParams(DeviceParams):
    """Exactly one of ``apk`` (bytes sent through droidwire) or ``path`` (on the bridge host)."""

    apk: bytes | None = None
    path: _Text | None = None
    replace: bool = True
    # ``-g``: every runtime permission granted at install. Honoured only with ``as_owner``:
    # a borrower's APK never gets permissions the owner did not give it.
    grant_permissions: bool = False
    allow_test: bool = True  # ``-t``: test-only APKs (androidTest)

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.apk is None) == (self.path is None):
            raise ValueError("give exactly one of apk and path")
        return self


class InstallResult(Result):
    """What the device installed, as the device tells it (its package list before and after,
    never the APK's own manifest): ``package`` ("" if it cannot be told), and ``existed``:
    the package was on the device before (this install updated it), so no cleanup may clear
    or uninstall it."""

    package: str
    existed: bool = False


class UninstallParams(DeviceParams):
    package: Package


class InstrumentParams(DeviceParams):
    package: Package  # the test package
    runner: _Name = "androidx.test.runner.AndroidJUnitRunner"
    args: dict[Annotated[str, StringConstraints(min_length=1, max_length=128)], _Text] = Field(
        default_factory=dict, max_length=64
    )
    timeout_s: Timeout | None = None


class InstrumentResult(Result):
    """Raw ``am instrument -w -r`` output; parsing is the controller's job."""

    output: str
    exit_code: int
    truncated: bool = False


# --- build and sources -----------------------------------------------------------------------


class Apk(Result):
    """A built APK; ``sha256`` is checked against ``data`` on validation."""

    role: Literal["app", "test"]
    name: _Name
    data: bytes
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

    @model_validator(mode="after")
    def _hash_matches(self) -> Self:
        if hashlib.sha256(self.data).hexdigest() != self.sha256:
            raise ValueError("apk sha256 does not match its data")
        return self

    @classmethod
    def from_bytes(cls, role: Literal["app", "test"], name: str, data: bytes) -> Apk:
        return cls(role=role, name=name, data=data, sha256=hashlib.sha256(data).hexdigest())


class CompileParams(Params):
    project: _Name | None = None  # None: the bridge's default project
    test_code: Annotated[str, StringConstraints(min_length=1, max_length=1 << 20)]
    timeout_s: Timeout | None = None


class CompileResult(Result):
    ok: bool
    output: str = ""
    toolchain: Literal["gradle", "simulated"]
    apks: list[Apk] = Field(default_factory=list)
    # Added in place (an older peer ignores them): "kotlinc" when the real Kotlin compiler
    # checked the test before the toolchain ran (or refused it, ``ok`` False), and the check's
    # summary: compiler, api_level, api_source, unchecked, warm, duration_ms.
    checked_by: Literal["kotlinc"] | None = None
    check: dict[str, Any] | None = None


class SourceLookupParams(Params):
    project: _Name | None = None
    names: list[_Name] = Field(min_length=1, max_length=200)


class MethodRecord(Result):
    name: str
    owner: str | None = None  # the declaring class
    file: str | None = None
    line: int | None = None
    signature: str | None = None
    text: str | None = None  # the declaration's source (bounded by the bridge)


class SourceLookupResult(Result):
    methods: list[MethodRecord] = Field(default_factory=list)


# --- the registry ----------------------------------------------------------------------------


#: ``data["reason"]`` of the :class:`RpcError` a result that does not fit its model raises.
INVALID_RESULT = "invalid_result"

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Method(Generic[P, R]):
    """One RPC, declared once: its wire name, params and result models, and how to treat it.

    ``hub.call(device, INSTALL, InstallParams(...))`` returns an :class:`InstallResult`
    (``Method[InstallParams, InstallResult]``); the bridge registers its handler for the same
    descriptor. The name is what travels in a ``req`` frame (and through the cluster).

    ``capability``: which bridge capability serves it (``devices``, ``build``, or None: any).
    ``idempotent``: safe to re-send to a bridge that restarted (its dedupe memory is gone).
    ``long``: uses the long default deadline (compile, install, instrument).
    """

    name: str
    params: type[P]
    result: type[R]
    capability: Literal["devices", "build"] | None = None
    idempotent: bool = False
    long: bool = False

    @property
    def device_bound(self) -> bool:
        return "serial" in self.params.model_fields

    def parse_params(self, p: Mapping[str, Any]) -> P:
        """The params model, or :class:`RpcError` ``bad_request`` with the errors."""
        try:
            return self.params.model_validate(p)
        except ValidationError as exc:
            raise RpcError(
                ErrorCode.BAD_REQUEST, f"invalid params for {self.name}", {"errors": _errors(exc)}
            ) from exc

    def parse_result(self, r: Mapping[str, Any]) -> R:
        """The result model; a bridge's malformed result is ``internal``."""
        try:
            return self.result.model_validate(r)
        except ValidationError as exc:
            raise RpcError(
                ErrorCode.INTERNAL, f"invalid result for {self.name}",
                {"reason": INVALID_RESULT, "errors": _errors(exc)},
            ) from exc


#: The earlier name of :class:`Method`.
MethodSpec = Method

PING = Method("ping", PingParams, PingResult, idempotent=True)
BRIDGE_INFO = Method("bridge.info", Empty, BridgeInfoResult, idempotent=True)
DEVICES_LIST = Method("devices.list", Empty, DevicesListResult, "devices", idempotent=True)
SHELL = Method("device.shell", ShellParams, ShellResult, "devices")
LOGCAT_CLEAR = Method("device.logcat.clear", LogcatClearParams, Empty, "devices", idempotent=True)
LOGCAT_DUMP = Method(
    "device.logcat.dump", LogcatDumpParams, LogcatDumpResult, "devices", idempotent=True
)
LOGCAT_SUBSCRIBE = Method(
    "device.logcat.subscribe", LogcatSubscribeParams, LogcatSubscribeResult, "devices"
)
LOGCAT_UNSUBSCRIBE = Method(
    "device.logcat.unsubscribe", LogcatUnsubscribeParams, Empty, "devices", idempotent=True
)
SCREENSHOT = Method("device.screenshot", DeviceParams, ScreenshotResult, "devices", idempotent=True)
PUSH = Method("device.push", PushParams, PushResult, "devices", idempotent=True)
PULL = Method("device.pull", PullParams, PullResult, "devices", idempotent=True)
INSTALL = Method(
    "device.install", InstallParams, InstallResult, "devices", idempotent=True, long=True
)
UNINSTALL = Method("device.uninstall", UninstallParams, Empty, "devices", idempotent=True)
INSTRUMENT = Method("device.instrument", InstrumentParams, InstrumentResult, "devices", long=True)
COMPILE = Method(
    "workspace.compile", CompileParams, CompileResult, "build", idempotent=True, long=True
)
SOURCE_LOOKUP = Method(
    "source.lookup", SourceLookupParams, SourceLookupResult, "build", idempotent=True
)

_SPECS: list[Method[Any, Any]] = [
    PING, BRIDGE_INFO, DEVICES_LIST, SHELL, LOGCAT_CLEAR, LOGCAT_DUMP, LOGCAT_SUBSCRIBE,
    LOGCAT_UNSUBSCRIBE, SCREENSHOT, PUSH, PULL, INSTALL, UNINSTALL, INSTRUMENT, COMPILE,
    SOURCE_LOOKUP,
]

#: Every known RPC by name. Extend with :func:`register`.
METHODS: dict[str, Method[Any, Any]] = {spec.name: spec for spec in _SPECS}


def register(spec: Method[P, R], *, replace: bool = False) -> Method[P, R]:
    """Add a method to :data:`METHODS` (a later issue's ``device.state``, ``ui.dump``, …)."""
    if spec.name in METHODS and not replace:
        raise ValueError(f"method {spec.name!r} is already registered")
    METHODS[spec.name] = spec
    return spec


def method_named(name: str) -> Method[Any, Any]:
    """The descriptor of a method by its wire name (a forwarded or recorded call), or
    :class:`RpcError` ``bad_request``."""
    return _spec(name)


def _spec(method: str) -> Method[Any, Any]:
    spec = METHODS.get(method)
    if spec is None:
        raise RpcError(
            ErrorCode.BAD_REQUEST, f"unknown method {method[:128]!r}", {"reason": "unknown_method"}
        )
    return spec


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(x) for x in err["loc"]), "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)[:10]
    ]


def validate_params(method: str, p: Mapping[str, Any]) -> BaseModel:
    """The params model for ``method``, or :class:`RpcError` ``bad_request`` with the errors."""
    spec: Method[BaseModel, BaseModel] = _spec(method)
    return spec.parse_params(p)


def validate_result(method: str, r: Mapping[str, Any]) -> BaseModel:
    """The result model for ``method``; a bridge's malformed result is ``internal``."""
    spec: Method[BaseModel, BaseModel] = _spec(method)
    return spec.parse_result(r)


def dump(model: BaseModel) -> dict[str, Any]:
    """A params/result model as the plain dict that goes into ``p`` / ``r``."""
    return model.model_dump(exclude_none=True)


def timeout_for(method: str, settings: Settings, requested: float | None = None) -> float:
    """The deadline length for a call: the caller's, else the method's default."""
    if requested is not None:
        return requested
    spec = METHODS.get(method)
    return settings.rpc_long_timeout_s if spec is not None and spec.long else settings.rpc_timeout_s
