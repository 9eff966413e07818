"""Named WebSocket close codes and the one function that says terminal or retryable.

Rule (docs/design.md §3, §4.3), decided once here:

* **Terminal**: the whole 4400–4499 range. Ours mirror HTTP 4xx ("the client is wrong":
  bad request, unauthorized, forbidden, replaced by a newer session, incompatible protocol);
  reconnecting the same way cannot help, so the bridge stops at once and exits non-zero.
  An unknown code in that range is terminal too: a newer controller may add client errors.
* **Retryable**: everything else — 1000/1001 (the controller went away or closed), 1006
  (no close frame: network loss; ``None`` means the same), 1011, 1012 (restart), 1013 (try
  again later), other RFC 6455 codes, and 4000–4399 / 4500–4999 (server-side trouble,
  mirroring HTTP 5xx). The reconnect budget bounds every retry.

RFC 6455 §7.4.1: 1006 is never sent in a close frame; a library reports it when the
connection dropped without one.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = ["CloseClass", "CloseCode", "classify", "describe", "is_terminal"]


class CloseCode(IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001  # controller shutting down
    PROTOCOL_ERROR = 1002
    ABNORMAL = 1006  # no close frame (network loss); never sent
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012
    TRY_AGAIN_LATER = 1013
    BAD_REQUEST = 4400  # a frame could not be parsed at all, or a bad hello
    UNAUTHORIZED = 4401  # token missing, unknown or revoked
    FORBIDDEN = 4403  # token valid but not allowed to connect as a bridge
    REPLACED = 4409  # a newer session of the same bridge took over
    INCOMPATIBLE = 4426  # protocol version not supported ("upgrade required")


class CloseClass(StrEnum):
    TERMINAL = "terminal"
    RETRYABLE = "retryable"


_TERMINAL_RANGE = range(4400, 4500)

_DESCRIPTIONS: dict[int, str] = {
    CloseCode.NORMAL: "closed normally",
    CloseCode.GOING_AWAY: "the peer is going away",
    CloseCode.PROTOCOL_ERROR: "protocol error",
    CloseCode.ABNORMAL: "connection lost without a close frame",
    CloseCode.MESSAGE_TOO_BIG: "message too big",
    CloseCode.INTERNAL_ERROR: "internal error on the peer",
    CloseCode.SERVICE_RESTART: "the controller is restarting",
    CloseCode.TRY_AGAIN_LATER: "the controller asks to try again later",
    CloseCode.BAD_REQUEST: "bad request: the controller could not parse what this bridge sent",
    CloseCode.UNAUTHORIZED: "unauthorized: the bridge token is missing, unknown or revoked",
    CloseCode.FORBIDDEN: "forbidden: this token may not connect as a bridge",
    CloseCode.REPLACED: "replaced: a newer session of this bridge took over",
    CloseCode.INCOMPATIBLE: "incompatible protocol version: upgrade droidwire",
}


def classify(code: int | None) -> CloseClass:
    """Terminal or retryable; ``None`` (no close code: a network error) is retryable."""
    if code is not None and code in _TERMINAL_RANGE:
        return CloseClass.TERMINAL
    return CloseClass.RETRYABLE


def is_terminal(code: int | None) -> bool:
    return classify(code) is CloseClass.TERMINAL


def describe(code: int | None) -> str:
    """A human sentence for logs and the bridge's exit message."""
    if code is None:
        return "connection lost (no close code)"
    text = _DESCRIPTIONS.get(code)
    if text is None:
        text = "unknown client error" if code in _TERMINAL_RANGE else "unknown close code"
    return f"{code} {text}"
