"""droidwire's wire protocol, sans I/O (docs/design.md §3: bytes in, bytes or events out).

Bytes or models in, bytes, models and outcomes out: no sockets, no asyncio, no clock reads.
Importing this package pulls in pydantic and msgpack only — never websockets, fastapi or
adbutils — so both ends (and tools) can use it anywhere.

Modules: :mod:`protocol.envelope` (frames), :mod:`protocol.codec` (msgpack, size cap),
:mod:`protocol.methods` (RPC params/results, registry), :mod:`protocol.closecodes`,
:mod:`protocol.errors`, :mod:`protocol.session` (pending map, outbox, dedupe, resume),
:mod:`protocol.settings` (every timing and limit, backoff, reconnect budget).
"""

from __future__ import annotations

from protocol import (
    agent_methods,  # noqa: F401  (registers the agent toolkit's RPCs)
    manage_methods,  # noqa: F401  (registers the device management RPCs)
    screen_methods,  # noqa: F401  (registers the live screen's RPCs)
    tunnel_methods,  # noqa: F401  (registers the adb tunnel's RPCs)
)
from protocol.closecodes import CloseClass, CloseCode, classify, describe, is_terminal
from protocol.codec import Codec, decode, decode_raw, encode, encode_event, encode_result
from protocol.envelope import (
    DEVICES_CHANNEL,
    PROTOCOL_VERSION,
    SUBPROTOCOL,
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    ErrorBody,
    Evt,
    Frame,
    Hello,
    Ping,
    Pong,
    Profile,
    Req,
    Res,
    SharedSettings,
    Welcome,
    is_channel,
    is_request_id,
    new_request_id,
)
from protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    FrameTooLarge,
    HandshakeRefused,
    InvalidState,
    ProtocolError,
    RpcError,
    UnexpectedFrame,
)
from protocol.methods import (
    METHODS,
    LogBatch,
    MethodSpec,
    parse_log_batch,
    register,
    timeout_for,
    validate_params,
    validate_result,
)
from protocol.session import (
    Admission,
    BridgeSession,
    Completion,
    ControllerSession,
    Duplicate,
    Liveness,
    Pending,
    Resume,
    State,
    WelcomeOutcome,
)
from protocol.settings import DEFAULTS, ReconnectBudget, Settings, backoff

__all__ = [
    "DEFAULTS",
    "DEVICES_CHANNEL",
    "METHODS",
    "PROTOCOL_VERSION",
    "SUBPROTOCOL",
    "Ack",
    "Admission",
    "BridgeSession",
    "Cancel",
    "Capabilities",
    "CloseClass",
    "CloseCode",
    "Codec",
    "Completion",
    "ControllerSession",
    "DecodeError",
    "DeviceInfo",
    "Duplicate",
    "EncodeError",
    "ErrorBody",
    "ErrorCode",
    "Evt",
    "Frame",
    "FrameTooLarge",
    "HandshakeRefused",
    "Hello",
    "InvalidState",
    "Liveness",
    "LogBatch",
    "MethodSpec",
    "Pending",
    "Ping",
    "Pong",
    "Profile",
    "ProtocolError",
    "ReconnectBudget",
    "Req",
    "Res",
    "Resume",
    "RpcError",
    "Settings",
    "SharedSettings",
    "State",
    "UnexpectedFrame",
    "Welcome",
    "WelcomeOutcome",
    "backoff",
    "classify",
    "decode",
    "decode_raw",
    "describe",
    "encode",
    "encode_event",
    "encode_result",
    "is_channel",
    "is_request_id",
    "is_terminal",
    "new_request_id",
    "parse_log_batch",
    "register",
    "timeout_for",
    "validate_params",
    "validate_result",
]
