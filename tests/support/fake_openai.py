"""A real, local, scripted OpenAI-compatible HTTP server for tests.

It listens on 127.0.0.1 (a free port) in a background thread and speaks the OpenAI wire format,
so the code under test runs through the real ``openai`` client, httpx and sockets:

- ``POST /v1/chat/completions``: answers from a queue of scripted replies, then from
  ``server.default`` (or a ``responder`` callable), else HTTP 500 "no scripted reply left";
- ``POST /v1/embeddings``: deterministic vectors (hashed words, L2-normalised, so texts sharing
  words are close), ``float`` or ``base64`` encoding, ``dimensions`` honoured;
- ``GET /v1/models``.

Every request is recorded in ``server.requests`` as {"method", "path", "headers" (names lower
case), "body" (parsed JSON)}; the chat bodies alone are ``server.chat_requests``.

    with FakeOpenAI() as server:
        server.queue('{"entities": [], ...}', Reply(status=503), Reply(delay=5, content="{}"))
        server.supports_json_schema = False     # 400 on response_format json_schema, like old vLLM
        client = openai.OpenAI(base_url=server.base_url, api_key="test")

The ``fake_openai`` pytest fixture yields a started server and sets OPENAI_BASE_URL /
OPENAI_API_KEY for the test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

EMPTY_DELTA = '{"entities": [], "states": [], "edges": [], "rules": []}'


@dataclass
class Reply:
    """One scripted answer. ``status`` != 200 sends an OpenAI-style error body with ``message``;
    ``delay`` waits first (longer than the client timeout: a timeout); ``body`` replaces the
    whole JSON response; ``headers`` are added (e.g. {"x-should-retry": "false"})."""

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    message: str | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


REJECT_JSON_SCHEMA = Reply(
    status=400,
    message="response_format type 'json_schema' is not supported by this server",
)


class FakeOpenAI:
    def __init__(self, *, embedding_dimensions: int = 1536, model: str = "fake-model") -> None:
        self.embedding_dimensions = embedding_dimensions
        self.model = model
        self.supports_json_schema = True
        self.supports_json_object = True
        self.default: Reply | str | None = None
        self.responder: Callable[[dict[str, Any]], Reply | str | None] | None = None
        self.requests: list[dict[str, Any]] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> FakeOpenAI:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        server.block_on_close = False  # a handler still sleeping in a delay must not block close
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": "test-key"}

    # ---------------------------------------------------------------- scripting

    def queue(self, *replies: Reply | str) -> None:
        """Append replies for the next chat requests; a str is a 200 answer with that content."""
        with self._lock:
            self._queue.extend(_as_reply(r) for r in replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of every /chat/completions request, in order."""
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        rf = (body.get("response_format") or {}).get("type")
        if rf == "json_schema" and not self.supports_json_schema:
            return REJECT_JSON_SCHEMA
        if rf == "json_object" and not self.supports_json_object:
            return Reply(status=400, message="response_format type 'json_object' is not supported")
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            answer = self.responder(body)
            if answer is not None:
                return _as_reply(answer)
        if self.default is not None:
            return _as_reply(self.default)
        return Reply(status=500, message="fake_openai: no scripted reply left",
                     headers={"x-should-retry": "false"})

    # ---------------------------------------------------------------- answers

    def chat_response(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        content = reply.content if reply.content is not None else EMPTY_DELTA
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion_tokens = len(content.split())
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def embeddings_response(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else list(raw)
        dims = int(body.get("dimensions") or self.embedding_dimensions)
        data = []
        for i, text in enumerate(texts):
            vec = fake_embedding(text if isinstance(text, str) else json.dumps(text), dims)
            if body.get("encoding_format") == "base64":
                emb: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode("ascii")
            else:
                emb = vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(str(t).split()) for t in texts)
        return {"object": "list", "data": data, "model": body.get("model", "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def fake_embedding(text: str, dimensions: int) -> list[float]:
    """Deterministic unit vector: each lowercase word adds +-1 at a hashed position."""
    vec = [0.0] * dimensions
    words = re.findall(r"\w+", text.lower()) or [""]
    for word in words:
        h = hashlib.sha256(word.encode("utf-8")).digest()
        idx = int.from_bytes(h[:4], "little") % dimensions
        vec[idx] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI; OPENAI_BASE_URL / OPENAI_API_KEY point at it during the test."""
    with FakeOpenAI() as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        yield server


# ---------------------------------------------------------------- HTTP plumbing


def _as_reply(value: Reply | str) -> Reply:
    return value if isinstance(value, Reply) else Reply(content=value)


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._record(None)
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": fake.model, "object": "model", "created": 0, "owned_by": "fake"}]})
            else:
                self._send(404, _error(f"no route GET {self.path}", "not_found"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._record(raw.decode("utf-8", "replace"))
                self._send(400, _error("request body is not JSON", "invalid_request_error"))
                return
            self._record(body)
            path = self.path.split("?")[0].rstrip("/")
            if path.endswith("/chat/completions"):
                reply = fake._next_reply(body)
                if reply.delay and fake._stopping.wait(reply.delay):
                    return
                if reply.status != 200:
                    err = reply.body if reply.body is not None else _error(
                        reply.message or f"HTTP {reply.status}", _error_type(reply.status),
                        "response_format" if reply is REJECT_JSON_SCHEMA else None)
                    self._send(reply.status, err, reply.headers)
                else:
                    payload = reply.body if reply.body is not None else fake.chat_response(reply, body)
                    self._send(200, payload, reply.headers)
            elif path.endswith("/embeddings"):
                self._send(200, fake.embeddings_response(body))
            else:
                self._send(404, _error(f"no route POST {self.path}", "not_found"))

        def _record(self, body: Any) -> None:
            with fake._lock:
                fake.requests.append({"method": self.command, "path": self.path,
                                      "headers": {k.lower(): v for k, v in self.headers.items()},
                                      "body": body})

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to tell it

    return Handler


def _error(message: str, type_: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": None}}


def _error_type(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 404: "not_found",
            429: "rate_limit_exceeded"}.get(status, "server_error")
