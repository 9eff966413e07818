"""Why a link's connection ended, and whether retrying can help: the reconnect loop's classifier.

docs/design.md §4. :func:`classify_failure` turns what ended an attempt or a connection into a
:class:`Failure`, terminal (stop, do not retry) or retryable; a link that ends for good raises
one of the exception tree below (the bridge exits with its ``exit_code``)::

    LinkError              the link ended for good: the bridge exits non-zero
    ├── LinkRefused        terminal: close code 44xx, HTTP 401/403, bad welcome, bad URL
    └── BudgetExhausted    the reconnect budget ran out
"""

from __future__ import annotations

import json
import ssl as _ssl
from dataclasses import dataclass

from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)

from protocol.closecodes import describe, is_terminal

__all__ = [
    "TERMINAL_HTTP",
    "BudgetExhausted",
    "Failure",
    "LinkError",
    "LinkRefused",
    "classify_failure",
]

#: HTTP statuses at the handshake that no retry can fix (the token is wrong or not a bridge's).
TERMINAL_HTTP = frozenset({401, 403})


class LinkError(Exception):
    """The link ended for good; ``str()`` is the message for the user."""

    exit_code = 1


class LinkRefused(LinkError):
    """Terminal: retrying the same way cannot help (close code 44xx, HTTP 401/403 …)."""

    exit_code = 2

    def __init__(
        self, message: str, *, close_code: int | None = None, http_status: int | None = None
    ) -> None:
        self.close_code = close_code
        self.http_status = http_status
        super().__init__(message)


class BudgetExhausted(LinkError):
    """The controller stayed unreachable for the whole reconnect budget."""

    exit_code = 3


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one connection (or attempt) ended. ``terminal``: stop, do not retry."""

    message: str
    terminal: bool = False
    close_code: int | None = None
    http_status: int | None = None
    unreached: bool = False  # no answer at all: refused, unknown host, timed out

    def error(self) -> LinkRefused:
        return LinkRefused(self.message, close_code=self.close_code, http_status=self.http_status)


def classify_failure(exc: BaseException) -> Failure:
    """The classifier of the reconnect loop: what ``exc`` means, terminal or retryable.

    * HTTP 401/403 at the handshake: terminal (the token); any other status: retryable (a
      proxy's 502, a controller's 503 while it starts).
    * A close frame received: its code decides (:func:`protocol.closecodes.classify`); no
      close frame (1006): retryable.
    * An untrusted TLS certificate: terminal (only the owner's config can fix it).
    * Network errors, timeouts and other handshake failures: retryable.
    """
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        reason = exc.response.reason_phrase or ""
        answer = _error_message(bytes(exc.response.body or b""))
        if answer is None and status in (403, 404):
            # Not droidwire's answer (every refusal of ours has a JSON error body): nothing
            # serves the bridge endpoint at that URL, e.g. a path after the host:port.
            return Failure(
                f"no droidwire bridge endpoint at that URL (HTTP {status} {reason}): "
                "--controller takes the controller's base URL, e.g. http://HOST:8700, with "
                "a path only where a proxy serves the controller under one",
                terminal=True,
                http_status=status,
            )
        if status in TERMINAL_HTTP:
            what = "unauthorized" if status == 401 else "forbidden"
            return Failure(
                f"the controller refused the bridge token: HTTP {status} {what}"
                + (f" ({answer})" if answer else "")
                + ": check --token-file / DROIDWIRE_BRIDGE_TOKEN (a bridge token, from "
                "`droidwire token create --kind bridge NAME`)",
                terminal=True,
                http_status=status,
            )
        return Failure(f"handshake refused: HTTP {status} {reason}".rstrip(), http_status=status)
    if isinstance(exc, ConnectionClosed):
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        text = describe(code) + (f" ({reason[:200]})" if reason else "")
        return Failure(f"connection closed: {text}", terminal=is_terminal(code), close_code=code)
    if isinstance(exc, InvalidURI):
        return Failure(f"bad controller URL: {exc}", terminal=True)
    if isinstance(exc, _ssl.SSLCertVerificationError):
        # Retrying cannot make an untrusted certificate trusted: say so and stop.
        return Failure(
            f"the controller's TLS certificate is not trusted: {getattr(exc, 'verify_message', None) or exc}"
            " (set controller.ca to its CA)",
            terminal=True,
        )
    if isinstance(exc, TimeoutError):
        return Failure("timed out connecting to the controller", unreached=True)
    if isinstance(exc, InvalidHandshake):
        return Failure(f"WebSocket handshake failed: {exc}")
    if isinstance(exc, OSError):
        return Failure(f"network error: {exc.strerror or exc}", unreached=True)
    return Failure(f"connection failed: {type(exc).__name__}: {exc}")


def _error_message(body: bytes) -> str | None:
    """The message of a droidwire JSON error body, or None when the body is not one."""
    try:
        error = json.loads(body)["error"]
        return str(error["message"])[:200]
    except (ValueError, KeyError, TypeError):
        return None

