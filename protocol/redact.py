"""Keep secrets out of every log line, on both ends (docs/security.md, "Bounds and secrets").

Tokens travel only in the ``Authorization`` header, but libraries log what they handle: at
DEBUG the websockets library logs every handshake header (``Authorization: Bearer …``) on the
controller and on the bridge, and uvicorn logs request targets, where a client's mistake may
have put ``?token=…``. So redaction is not left to each call site: :func:`install` wraps the
log-record factory, so **every** record of **every** logger (uvicorn, uvicorn.error,
uvicorn.access, websockets, httpx, ours) is redacted when it is made, before any handler or
filter sees it, whatever handlers are configured later; and it attaches :class:`RedactSecrets`
to the handlers that exist, for records made before the factory was swapped in.

What is redacted, in the message, its arguments and any exception text:

* ``Bearer <anything>`` and the value of an ``Authorization`` header;
* droidwire tokens by their shape (``dw_u_…``, ``dw_b_…``, ``dw_a_…``);
* the values of token-like query parameters (``token``, ``access_token``, ``api_key``, …);
* any secret registered with :func:`add_secret` (the bootstrap token, which has no prefix; the
  bridge's own token, whatever it looks like).

Pure standard library; imports nothing of droidwire's I/O.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "MASK",
    "QUERY_TOKEN_PARAMS",
    "RedactSecrets",
    "add_secret",
    "install",
    "redact",
]

MASK = "[redacted]"
#: Query parameters that carry a token when a client gets it wrong.
QUERY_TOKEN_PARAMS = frozenset({"token", "access_token", "api_key", "apikey", "auth"})

_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[^\s'\",;]+")
_HEADER = re.compile(r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie)(\s*[:=]\s*)"
                     r"(?!bearer\b)([^\r\n'\"]+)")
_TOKEN = re.compile(r"\bdw_[a-z]_[A-Za-z0-9_\-]{8,}")
_QUERY = re.compile(
    r"(?i)([?&;](?:" + "|".join(sorted(QUERY_TOKEN_PARAMS)) + r")=)([^&\s'\"#]*)"
)
_MIN_SECRET = 8

_secrets: set[str] = set()


def add_secret(secret: str | None) -> None:
    """Redact this exact string wherever it appears in a log record from now on."""
    if secret and len(secret) >= _MIN_SECRET:
        _secrets.add(secret)  # one atomic operation; readers iterate over a copy


def redact(text: str) -> str:
    """``text`` with every secret replaced by :data:`MASK`."""
    if not text:
        return text
    for secret in tuple(_secrets):
        if secret in text:
            text = text.replace(secret, MASK)
    text = _BEARER.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    text = _HEADER.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    text = _TOKEN.sub(MASK, text)
    return _QUERY.sub(lambda m: f"{m[1]}{MASK}", text)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: keep what there is, as text
        message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = redact(message), None
    else:
        if redact(message) != message:
            _mask_in_place(record)
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


def _mask_in_place(record: logging.LogRecord) -> None:
    """A record whose text holds a secret: its message and string arguments are masked where
    they are, so formatters that read the arguments (uvicorn's access log unpacks its five)
    still find them; a secret left only in what an argument formats to (a repr, bytes)
    flattens the record to its masked text."""
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if isinstance(record.args, tuple):
        record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
    message = record.getMessage()
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None


class RedactSecrets(logging.Filter):
    """A filter that redacts (never drops) records: for handlers and loggers alike."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _wrap(factory: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        _redact_record(record)
        return record

    make.droidwire_redacts = True  # type: ignore[attr-defined]
    return make


#: Loggers whose own handlers (if a config gave them some) get the filter too.
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "websockets", "websockets.client",
           "websockets.server", "httpx", "httpcore", "droidwire")


def install() -> None:
    """Redact every log record of this process from now on (idempotent)."""
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "droidwire_redacts", False):
        logging.setLogRecordFactory(_wrap(factory))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(RedactSecrets())
