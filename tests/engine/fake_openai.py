"""A scripted OpenAI-compatible server on 127.0.0.1 for tests: every request is recorded, every answer
is chosen by the test (a streamed turn, an HTTP error with headers, silence), so the openai: backend's
retries, timeouts and key handling can be checked against real sockets."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class Status:
    """An HTTP answer other than a stream: an error, or a JSON document."""

    code: int
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stream:
    """A streamed chat completion: `data:` events, then `data: [DONE]`."""

    events: list[dict[str, Any]]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Hang:
    """Accept the request and say nothing for `seconds`."""

    seconds: float


Reply = Status | Stream | Hang | Callable[[Recorded], "Status | Stream | Hang"]


def turn(content: str = "", calls: list[tuple[str, dict[str, Any]]] | None = None, *,
         prompt_tokens: int = 100, completion_tokens: int = 10, cost: float | None = None,
         headers: dict[str, str] | None = None) -> Stream:
    """One assistant turn as a server streams it: content deltas, tool-call deltas (arguments in two
    pieces, as real servers split them), a finish reason, and a usage event."""
    events: list[dict[str, Any]] = []
    for piece in [content[: len(content) // 2], content[len(content) // 2 :]]:
        if piece:
            events.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    for index, (name, arguments) in enumerate(calls or []):
        text = json.dumps(arguments)
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": text[:5]}}
        ]}}]})
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "function": {"arguments": text[5:]}}
        ]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2}}
    if cost is not None:
        usage["cost"] = cost
    events.append({"choices": [], "usage": usage})
    return Stream(events, headers or {})


class FakeOpenAI:
    def __init__(self, models: tuple[str, ...] = ("fake-model",)) -> None:
        self.models = list(models)
        self.requests: list[Recorded] = []
        self.chat: deque[Reply] = deque()  # answers to POST /chat/completions, in order
        self.listing: deque[Reply] = deque()  # answers to GET /models before the default list
        self.after_script: Reply = turn("All done.")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection, as the client makes them

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._answer(None)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                self._answer(json.loads(raw) if raw else None)

            def _answer(self, body: dict[str, Any] | None) -> None:
                request = Recorded(self.command, self.path, dict(self.headers.items()), body)
                fake.requests.append(request)
                if self.path.endswith("/models"):
                    reply = fake.listing.popleft() if fake.listing else Status(
                        200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})
                    )
                else:
                    reply = fake.chat.popleft() if fake.chat else fake.after_script
                if callable(reply):
                    reply = reply(request)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, reply: Status | Stream | Hang) -> None:
                if isinstance(reply, Hang):
                    time.sleep(reply.seconds)
                    return
                if isinstance(reply, Status):
                    data = reply.body.encode()
                    self.send_response(reply.code)
                    for key, value in {"Content-Type": "application/json", **reply.headers}.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                for key, value in {"Content-Type": "text/event-stream", **reply.headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                for event in reply.events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler
