"""Typed errors of the fixer.

Exception tree (one root per package)::

    FixerError                    the root: anything ``fixer`` raises
    ├── LlmError                  the LLM endpoint failed (``reason``: timeout, rate_limited,
    │                             server_error, connection, bad_request, empty_reply)
    └── ReplyRejected             the LLM answered, but its reply is not an acceptable test
                                  (``reason``: not_code, dropped_test_class, package_changed,
                                  stubbed_app_symbol, unchanged)

Compiler output never raises: whatever text comes in, the parser returns a report.
``fixer.source_index`` has no dependency on this module (it is shared with the bridge) and
tolerates unreadable or unparsable files instead of raising.
"""

from __future__ import annotations

__all__ = ["FixerError", "LlmError", "ReplyRejected"]


class FixerError(Exception):
    """Root of every exception raised by ``fixer``."""


class LlmError(FixerError):
    """The OpenAI-compatible endpoint could not give an answer."""

    def __init__(self, reason: str, message: str, *, status: int | None = None):
        self.reason = reason
        self.status = status
        super().__init__(f"{reason}: {message}")


class ReplyRejected(FixerError):
    """The LLM's reply was refused by the guards of ``fixer.prompt``."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(f"{reason}: {message}")
