"""The scripted OpenAI-compatible test server itself (``tests/llm_server.py``)."""

from __future__ import annotations

import openai
import pytest

from tests.llm_server import LlmServer, Reply


def client_for(server: LlmServer, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_replies_in_order_then_default_then_500() -> None:
    with LlmServer(["one", Reply("two")]) as server:
        client = client_for(server)
        try:

            def ask():  # type: ignore[no-untyped-def]
                return client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "q"}]
                )

            assert ask().choices[0].message.content == "one"
            assert ask().choices[0].message.content == "two"
            with pytest.raises(openai.InternalServerError):
                ask()
            server.enqueue("three")
            assert ask().choices[0].message.content == "three"
        finally:
            client.close()
        assert server.wait_for_requests(4, timeout=1)
        assert [r.json["messages"][0]["content"] for r in server.completions] == ["q"] * 4


def test_default_reply_streaming_and_models() -> None:
    with LlmServer(default="always") as server:
        client = client_for(server)
        try:
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}], stream=True
            )
            text = "".join(
                chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
            )
            assert text == "always"
            assert [m.id for m in client.models.list()] == ["gpt-test"]
        finally:
            client.close()


def test_error_status_and_stop_releases_a_delayed_handler() -> None:
    server = LlmServer([Reply.error(429), Reply("late", delay_s=60)]).start()
    client = client_for(server, timeout=0.2)
    try:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    finally:
        client.close()
        server.stop()  # returns although a handler was still inside its 60 s delay
    assert len(server.completions) == 2
