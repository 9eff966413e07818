"""Typed errors of the wire protocol.

Exception tree (one root per package)::

    ProtocolError                 the root: anything this package raises
    ├── RpcError                  an error that travels in a ``res`` frame's ``e`` field
    │                             (code, message, data); raised by handlers, re-raised by callers
    ├── DecodeError               bytes that are not a valid frame (peer broke the protocol);
    │   │                         ``kind`` / ``frame_id`` say what could still be read, so a
    │   │                         malformed ``req`` can get an error ``res`` instead of a close
    │   ├── FrameTooLarge         over the configured frame-size cap (also raised by encode,
    │   │                         so a handler can answer "too large" instead of sending it)
    │   └── UnexpectedFrame       a valid frame the session's state does not allow (hello
    │                             twice, a req before welcome, …): close with 4400
    ├── HandshakeRefused          the peer's hello/welcome is unacceptable; carries the close code
    ├── EncodeError               a value that msgpack cannot carry (we broke the protocol)
    └── InvalidState              a send or transition not allowed in the session's state
                                  (we broke the protocol)

Error codes are the contract of docs/design.md §3; they are strings on the wire.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "FrameTooLarge",
    "HandshakeRefused",
    "InvalidState",
    "ProtocolError",
    "RpcError",
    "UnexpectedFrame",
]


class ErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    DEVICE_OFFLINE = "device_offline"
    BUSY = "busy"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """Root of every exception raised by ``protocol``."""


class RpcError(ProtocolError):
    """A typed RPC failure: what a ``res`` frame's ``e`` carries.

    ``data`` holds structured details, e.g. ``{"rule": "metacharacter"}`` for a policy refusal.
    """

    def __init__(self, code: ErrorCode | str, message: str, data: dict[str, Any] | None = None):
        try:
            self.code = ErrorCode(code)
        except ValueError:
            self.code = ErrorCode.INTERNAL
        self.message = message
        self.data = data
        super().__init__(f"{self.code.value}: {message}")

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def from_wire(cls, e: dict[str, Any]) -> RpcError:
        return cls(str(e.get("code", "internal")), str(e.get("message", "")), e.get("data"))


class DecodeError(ProtocolError):
    """The peer sent bytes that are not a valid frame.

    ``kind`` is the frame's ``t`` and ``frame_id`` its ``id`` when those could be read (both
    ``None`` otherwise): a receiver answers a malformed ``req`` with a ``bad_request`` result
    and closes with 4400 only when it cannot tell what the frame was.
    """

    def __init__(self, message: str, *, kind: str | None = None, frame_id: str | None = None):
        self.kind = kind
        self.frame_id = frame_id
        super().__init__(message)


class FrameTooLarge(DecodeError):
    """A frame exceeded the size cap."""

    def __init__(self, size: int, limit: int):
        self.size = size
        self.limit = limit
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte cap")


class UnexpectedFrame(DecodeError):
    """The peer sent a well-formed frame that its side or the session state does not allow."""


class EncodeError(ProtocolError):
    """A frame holds a value msgpack cannot encode (a local bug)."""


class HandshakeRefused(ProtocolError):
    """The peer's ``hello``/``welcome`` cannot be accepted; close the connection with ``close_code``."""

    def __init__(self, close_code: int, message: str):
        self.close_code = close_code
        super().__init__(message)


class InvalidState(ProtocolError):
    """An operation not allowed in the current session state (a local bug)."""
