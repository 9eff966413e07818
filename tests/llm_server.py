"""A scripted OpenAI-compatible HTTP server for tests: the real ``openai`` client, real HTTP.

Usage::

    from tests.llm_server import LlmServer, Reply

    with LlmServer([Reply.error(429), "```kotlin\\nclass A\\n```"]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...                                   # or set OPENAI_BASE_URL=server.base_url
        assert server.requests[0].json["model"] == "gpt-test"

What it serves (on 127.0.0.1, a free port chosen by the OS):

* ``POST /v1/chat/completions`` — answers with the next scripted reply, in order. A plain
  ``str`` is the assistant's text; a :class:`Reply` can also be an HTTP error status
  (``Reply.error(429)``, ``Reply.error(500)``), a delay before answering (to provoke client
  timeouts: ``Reply("late", delay_s=5)``), tool calls, or a raw body (``Reply.raw(...)``,
  e.g. malformed JSON). ``"stream": true`` requests get a server-sent-events answer.
  When the script runs out, ``default`` is used if given, else a 500 with a clear message.
* ``GET /v1/models`` — one model, ``gpt-test``.

Every request is recorded (:attr:`LlmServer.requests`, with method, path, headers and the
parsed JSON body). :meth:`LlmServer.wait_for_requests` blocks (with a timeout) until N have
arrived — use it instead of sleeping. Delays are interruptible: leaving the ``with`` block
releases any handler still waiting, and closing joins every handler thread, so no socket or
thread outlives the block.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LlmServer", "RecordedRequest", "Reply"]

MODEL = "gpt-test"


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = "stop"
    body: bytes | None = None  # raw body, sent as is (overrides everything above)
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, status: int, message: str = "scripted error", *, delay_s: float = 0.0) -> Reply:
        body = json.dumps({"error": {"message": message, "type": "scripted", "code": status}})
        return cls(status=status, body=body.encode(), delay_s=delay_s)

    @classmethod
    def raw(cls, body: str | bytes, status: int = 200) -> Reply:
        return cls(status=status, body=body.encode() if isinstance(body, str) else body)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    json: Any  # the parsed body, or None when it was not JSON


class LlmServer:
    """Scripted OpenAI-compatible server; see the module docstring."""

    def __init__(self, replies: Iterable[Reply | str] = (), *, default: Reply | str | None = None):
        self._script: deque[Reply] = deque(_as_reply(r) for r in replies)
        self._default = _as_reply(default) if default is not None else None
        self._requests: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- script
    def enqueue(self, *replies: Reply | str) -> None:
        with self._cond:
            self._script.extend(_as_reply(r) for r in replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def completions(self) -> list[RecordedRequest]:
        """Only the chat-completion requests."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= count, timeout)

    # --- lifecycle
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlmServer:
        handler = _make_handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = False  # server_close() joins every handler thread
        server.block_on_close = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases delayed handlers
        with self._cond:
            connections = list(self._connections)
        for conn in connections:  # idle keep-alive connections: wake their handlers
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LlmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- used by the handler
    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()

    def _next(self) -> Reply:
        with self._cond:
            if self._script:
                return self._script.popleft()
        if self._default is not None:
            return self._default
        return Reply.error(500, "LlmServer: no scripted reply left")


def _as_reply(value: Reply | str) -> Reply:
    return value if isinstance(value, Reply) else Reply(content=value)


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _make_handler(owner: LlmServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30  # an idle keep-alive connection cannot pin a handler thread forever

        def setup(self) -> None:
            super().setup()
            with owner._cond:
                owner._connections.add(self.connection)

        def finish(self) -> None:
            with owner._cond:
                owner._connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _read_json(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return None

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str = "application/json",
            extra: dict[str, str] | None = None,
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout): nothing to answer

        def do_GET(self) -> None:
            owner._record(RecordedRequest("GET", self.path, _headers(self), None))
            if self.path.rstrip("/").endswith("/models"):
                body = {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "owned_by": "tests"}],
                }
                self._send(200, json.dumps(body).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            payload = self._read_json()
            owner._record(RecordedRequest("POST", self.path, _headers(self), payload))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            reply = owner._next()
            if reply.delay_s > 0 and owner._stopping.wait(reply.delay_s):
                return  # shutting down: drop the answer
            if reply.body is not None:
                self._send(reply.status, reply.body, extra=reply.headers)
                return
            model = (payload or {}).get("model", MODEL) if isinstance(payload, dict) else MODEL
            if isinstance(payload, dict) and payload.get("stream"):
                self._send(200, _sse(reply, model), "text/event-stream", reply.headers)
                return
            self._send(
                reply.status, json.dumps(_completion(reply, model)).encode(), extra=reply.headers
            )

    return Handler


def _headers(handler: BaseHTTPRequestHandler) -> dict[str, str]:
    return {k.lower(): v for k, v in handler.headers.items()}


def _sse(reply: Reply, model: str) -> bytes:
    chunk = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": reply.content or ""},
                "finish_reason": None,
            }
        ],
    }
    done = dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}])
    return f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()
