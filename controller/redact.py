"""Keep secrets out of the logs, whatever a client sends.

Tokens travel only in the ``Authorization`` header (docs/design.md §6), and a request that carries
one in the URL is refused with 400 (``token_in_url``). uvicorn's access log writes the request
line *before* anyone refuses it, so a client's mistake would still put its token on disk. This
filter rewrites the query values of the token-like parameters in ``uvicorn.access`` records,
keeping the rest of the URL as it was.

Every other secret in every other record, on the controller and the bridge alike, is masked by
:mod:`protocol.redact` (installed by ``create_app`` and the CLI), which also covers these.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode

from protocol.redact import QUERY_TOKEN_PARAMS

__all__ = ["RedactQuerySecrets", "install_access_log_redaction"]

_MASK = "[redacted]"
_QUERY = re.compile(r"\?([^\s\"]*)")


def redact_url(target: str) -> str:
    """``/v1/x?token=abc&n=1`` → ``/v1/x?token=[redacted]&n=1``; other URLs unchanged."""

    def _one(match: re.Match[str]) -> str:
        pairs = parse_qsl(match.group(1), keep_blank_values=True)
        if not any(k.lower() in QUERY_TOKEN_PARAMS for k, _ in pairs):
            return match.group(0)
        safe = [(k, _MASK if k.lower() in QUERY_TOKEN_PARAMS else v) for k, v in pairs]
        return "?" + urlencode(safe, safe="[]")

    return _QUERY.sub(_one, target)


class RedactQuerySecrets(logging.Filter):
    """Rewrite string arguments (the request target) of access-log records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                redact_url(a) if isinstance(a, str) and "?" in a else a for a in record.args
            )
        elif isinstance(record.msg, str) and "?" in record.msg:
            record.msg = redact_url(record.msg)
        return True


def install_access_log_redaction() -> None:
    """Attach the filter to ``uvicorn.access`` once per process (idempotent)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactQuerySecrets) for f in logger.filters):
        logger.addFilter(RedactQuerySecrets())
