"""The LLM client: the official ``openai`` package against any OpenAI-compatible endpoint.

Hosted APIs and local servers (llama.cpp, vLLM, Ollama) alike. Configuration comes from the
environment the openai SDK already reads, plus our model name:

    OPENAI_BASE_URL       endpoint, e.g. ``http://127.0.0.1:8080/v1`` (default: OpenAI's)
    OPENAI_API_KEY        key (local servers accept any string)
    DROIDWIRE_LLM_MODEL   model name (default ``DEFAULT_MODEL``)

``LlmClient.from_env()`` returns ``None`` when neither the URL nor the key is set: the fixer
then works with its offline rules alone. Sampling is near-deterministic (temperature ≤ 0.1).
Retries (tenacity, exponential backoff with jitter) cover 429 and 5xx only; a timeout, a
refused connection or a 4xx fails at once as ``LlmError``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import openai
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from fixer.exceptions import LlmError

__all__ = ["DEFAULT_MODEL", "ChatCompleter", "LlmClient", "LlmSettings"]

log = logging.getLogger("droidwire.fixer.llm")

DEFAULT_MODEL = "gpt-4o-mini"
MAX_TEMPERATURE = 0.1


class ChatCompleter(Protocol):
    """Anything that turns chat messages into the assistant's text (``LlmClient`` does)."""

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str: ...


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """How to reach the model. Every default is defined here once."""

    model: str = DEFAULT_MODEL
    base_url: str | None = None
    api_key: str | None = None
    # Sampling
    temperature: float = 0.0
    max_tokens: int = 4096
    # Timeouts
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    # Retries (429 / 5xx only)
    max_attempts: int = 3
    retry_initial_s: float = 1.0
    retry_max_s: float = 20.0

    def __post_init__(self) -> None:
        # Fixing code wants the model's most likely answer, not a creative one.
        object.__setattr__(self, "temperature", max(0.0, min(self.temperature, MAX_TEMPERATURE)))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LlmSettings | None:
        env = os.environ if env is None else env
        base_url = env.get("OPENAI_BASE_URL") or None
        api_key = env.get("OPENAI_API_KEY") or None
        if base_url is None and api_key is None:
            return None
        settings = cls(
            model=env.get("DROIDWIRE_LLM_MODEL") or DEFAULT_MODEL,
            base_url=base_url,
            # Local servers need no key, but the SDK insists on one.
            api_key=api_key or "unused",
        )
        return replace(settings, **overrides) if overrides else settings


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.RateLimitError):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


class LlmClient:
    """Synchronous chat-completion client with our timeouts and retry policy.

    Use as a context manager (or call ``close()``) to release its HTTP connections.
    """

    def __init__(self, settings: LlmSettings, *, client: openai.OpenAI | None = None):
        self.settings = settings
        self._owns_client = client is None
        self._client = client or openai.OpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "unused",
            timeout=openai.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            max_retries=0,  # tenacity decides, so 429/5xx-only holds
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LlmClient | None:
        settings = LlmSettings.from_env(env, **overrides)
        return cls(settings) if settings is not None else None

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> LlmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The assistant's reply text. Raises ``LlmError`` (reason says which failure)."""
        s = self.settings
        retrying = Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(max(1, s.max_attempts)),
            wait=wait_random_exponential(multiplier=s.retry_initial_s, max=s.retry_max_s),
            reraise=True,
            before_sleep=lambda state: log.info(
                "LLM call failed (%s), retry %d",
                state.outcome.exception() if state.outcome else "?",
                state.attempt_number,
            ),
        )
        try:
            response = retrying(self._call, messages)
        except openai.APITimeoutError as exc:
            raise LlmError("timeout", f"no answer within {s.timeout_s}s") from exc
        except openai.RateLimitError as exc:
            raise LlmError("rate_limited", str(exc), status=exc.status_code) from exc
        except openai.APIStatusError as exc:
            reason = "server_error" if exc.status_code >= 500 else "bad_request"
            raise LlmError(reason, str(exc), status=exc.status_code) from exc
        except openai.APIConnectionError as exc:
            raise LlmError("connection", str(exc)) from exc
        except (openai.OpenAIError, ValueError) as exc:  # malformed responses and the like
            raise LlmError("bad_response", str(exc)) from exc
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise LlmError("bad_response", "the response has no choices") from exc
        if not content:
            raise LlmError("empty_reply", "the model returned no text")
        return str(content)

    def _call(self, messages: Sequence[Mapping[str, str]]) -> Any:
        s = self.settings
        return self._client.chat.completions.create(
            model=s.model,
            messages=[dict(m) for m in messages],  # type: ignore[misc]
            temperature=s.temperature,
            max_tokens=s.max_tokens,
        )
