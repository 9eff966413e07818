"""``fix()`` through the real ``openai`` client over HTTP, against a scripted local server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from fixer import fix, fix_detailed
from fixer.exceptions import LlmError, ReplyRejected
from fixer.llm import DEFAULT_MODEL, LlmClient, LlmSettings
from fixer.prompt import extract_code
from fixer.source_index import SourceCodeIndex
from tests.conftest import TIME_SCALE
from tests.llm_server import LlmServer, Reply

SAMPLE = Path(__file__).parent / "sample_project"
PATH = "/ws/app/src/androidTest/java/com/example/demo/GenTest.kt"

BROKEN = """\
package com.example.demo

import org.junit.Test

class GenTest {
    @Test
    fun readsConfig() {
        val activity = MainActivity()
        val size: Int = activity.loadConfig()
        check(size > 0)
    }
}
"""

FIXED = BROKEN.replace(
    "val size: Int = activity.loadConfig()", "val size: Int = activity.loadConfig().length"
)

OUTPUT = (
    "> Task :app:compileDebugAndroidTestKotlin FAILED\n"
    f"e: file://{PATH}:9:25 Initializer type mismatch: expected 'kotlin.Int', actual 'kotlin.String'.\n"
    "\nBUILD FAILED in 3s\n"
)


@pytest.fixture(scope="module")
def index() -> SourceCodeIndex:
    return SourceCodeIndex(SAMPLE)


def settings(server: LlmServer, **overrides: object) -> LlmSettings:
    base: dict[str, object] = {
        "model": "gpt-test",
        "base_url": server.base_url,
        "api_key": "sk-test",
        "timeout_s": 5.0 * TIME_SCALE,
        "retry_initial_s": 0.01,
        "retry_max_s": 0.02,
    }
    base.update(overrides)
    return LlmSettings(**base)  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[LlmServer]:
    with LlmServer() as s:
        yield s


def run_fix(server: LlmServer, index: SourceCodeIndex | None, **overrides: object):  # type: ignore[no-untyped-def]
    with LlmClient(settings(server, **overrides)) as client:
        return fix_detailed(BROKEN, OUTPUT, index, client)


def test_fenced_reply_is_used_and_the_prompt_carries_errors_and_bodies(
    server: LlmServer, index: SourceCodeIndex
) -> None:
    server.enqueue(
        f"Here is the fixed test:\n\n```kotlin\n{FIXED}```\n\nThe call returns a String."
    )
    result = run_fix(server, index)
    assert result.fixer == "llm" and result.note is None
    assert result.code == FIXED
    assert "+        val size: Int = activity.loadConfig().length" in result.diff

    (request,) = server.completions
    body = request.json
    assert body["model"] == "gpt-test"
    assert body["temperature"] <= 0.1
    assert request.headers.get("authorization") == "Bearer sk-test"
    user = body["messages"][-1]["content"]
    assert "line 9:25: Initializer type mismatch" in user
    assert "at: val size: Int = activity.loadConfig()" in user
    assert BROKEN.strip() in user
    # The body of the method the error points at, from the source index.
    assert "fun loadConfig(): String {" in user and "ConfigStore.read(this)" in user


def test_unfenced_reply_is_used(server: LlmServer, index: SourceCodeIndex) -> None:
    server.enqueue("Sure, here is the whole file:\n" + FIXED + "\nThat should compile now.")
    result = run_fix(server, index)
    assert result.fixer == "llm"
    assert result.code == FIXED


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I am sorry, I cannot help with that.", "not_code"),
        (
            "```kotlin\npackage com.example.demo\n\nclass GenTest {\n    @Test\n    fun a() {\n```",
            "not_code",
        ),
        (
            f"```kotlin\n{FIXED.replace('class GenTest', 'class OtherTest')}```",
            "dropped_test_class",
        ),
        (
            f"```kotlin\n{FIXED.replace('package com.example.demo', 'package org.elsewhere')}```",
            "package_changed",
        ),
        (
            f"```kotlin\n{FIXED}\nclass MainActivity {{\n    fun loadConfig(): Int = 1\n}}\n```",
            "stubbed_app_symbol",
        ),
        (f"```kotlin\n{BROKEN}```", "unchanged"),
    ],
)
def test_malformed_or_unacceptable_replies_fall_back(
    server: LlmServer, index: SourceCodeIndex, reply: str, reason: str
) -> None:
    server.enqueue(reply)
    result = run_fix(server, index)
    assert result.fixer == "none" and result.code == BROKEN
    assert result.note is not None and result.note.startswith(f"llm: {reason}")


def test_malformed_http_body_is_an_llm_error(server: LlmServer, index: SourceCodeIndex) -> None:
    server.enqueue(Reply.raw("{this is not json"))
    result = run_fix(server, index)
    assert result.fixer == "none" and result.code == BROKEN
    assert result.note is not None and result.note.startswith("llm: ")


def test_timeout_is_not_retried(server: LlmServer, index: SourceCodeIndex) -> None:
    server.enqueue(Reply(FIXED, delay_s=30.0), f"```kotlin\n{FIXED}```")
    result = run_fix(server, index, timeout_s=0.3 * TIME_SCALE)
    assert result.fixer == "none" and result.code == BROKEN
    assert result.note is not None and result.note.startswith("llm: timeout")
    assert len(server.completions) == 1


def test_429_then_success(server: LlmServer, index: SourceCodeIndex) -> None:
    server.enqueue(Reply.error(429, "slow down"), f"```kotlin\n{FIXED}```")
    result = run_fix(server, index)
    assert result.fixer == "llm" and result.code == FIXED
    assert len(server.completions) == 2


def test_5xx_retried_up_to_the_budget(server: LlmServer) -> None:
    server.enqueue(Reply.error(503), Reply.error(500), Reply.error(502), "never reached")
    with LlmClient(settings(server, max_attempts=3)) as client, pytest.raises(LlmError) as info:
        client.complete([{"role": "user", "content": "hi"}])
    assert info.value.reason == "server_error" and info.value.status == 502
    assert len(server.completions) == 3


def test_4xx_is_not_retried(server: LlmServer) -> None:
    server.enqueue(Reply.error(400, "bad model"), "never reached")
    with LlmClient(settings(server)) as client, pytest.raises(LlmError) as info:
        client.complete([{"role": "user", "content": "hi"}])
    assert info.value.reason == "bad_request" and info.value.status == 400
    assert len(server.completions) == 1


def test_connection_refused_is_an_llm_error() -> None:
    with LlmServer() as s:
        url = s.base_url  # the port is free again once the server stops
    with (
        LlmClient(LlmSettings(base_url=url, api_key="k", timeout_s=2.0)) as client,
        pytest.raises(LlmError) as info,
    ):
        client.complete([{"role": "user", "content": "hi"}])
    assert info.value.reason in ("connection", "timeout")


def test_bare_openai_client_is_accepted(
    server: LlmServer, index: SourceCodeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DROIDWIRE_LLM_MODEL", "gpt-test")
    server.enqueue(f"```kotlin\n{FIXED}```")
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    try:
        assert fix(BROKEN, OUTPUT, index, client) == FIXED
    finally:
        client.close()


def test_settings_from_env() -> None:
    assert LlmSettings.from_env({}) is None
    assert LlmClient.from_env({}) is None
    s = LlmSettings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert s is not None and (s.model, s.api_key, s.base_url) == (
        DEFAULT_MODEL,
        "unused",
        "http://127.0.0.1:9/v1",
    )
    s = LlmSettings.from_env({"OPENAI_API_KEY": "k", "DROIDWIRE_LLM_MODEL": "qwen2.5-coder"})
    assert s is not None and (s.model, s.base_url) == ("qwen2.5-coder", None)
    assert LlmSettings(temperature=0.9).temperature == 0.1


def test_extract_code_variants() -> None:
    assert extract_code("```\nclass A {\n}\n```") == "class A {\n}\n"
    two = "```kotlin\nclass Small {}\n```\ntext\n```kotlin\npackage p\n\nclass Big {\n    fun x() {}\n}\n```"
    assert extract_code(two).startswith("package p")
    thinking = "<think>maybe ```kotlin\nclass Draft {\n    fun a() {}\n    fun b() {}\n}\n```</think>\n```kotlin\nclass Final {}\n```"
    assert extract_code(thinking) == "class Final {}\n"
    with pytest.raises(ReplyRejected, match="several files"):
        extract_code("```kotlin\npackage a\nclass A {}\npackage b\nclass B {}\n```")
    with pytest.raises(ReplyRejected):
        extract_code("")
    with pytest.raises(ReplyRejected):
        extract_code("```python\nprint('hi')\n```")
