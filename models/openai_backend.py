"""`openai:BASE_URL[#MODEL]` — a model on an OpenAI-compatible chat-completions server.

For users whose model lives on a bigger machine (vLLM, SGLang, llama-server, llama_cpp.server).
Streams `/chat/completions` with the tools attached; the server parses tool calls itself
(`ModelInfo.native_tools`), so the turn's calls, content and reasoning come back in the TurnEnd.
Standard library only (http.client): no extra dependency for the client side.

The server keeps its own cache; `cached_tokens` is what it reports (`usage.prompt_tokens_details`), 0 if
it reports nothing. Set RIBBIT_OPENAI_API_KEY (or OPENAI_API_KEY) for servers that want a key.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from models.base import Chunk, GenerationRequest, ModelError, ModelInfo, TextChunk, TurnEnd, Usage
from models.chat import ChatMessage, ToolCall

CONNECT_TIMEOUT = 10.0
# A first token from a big model behind a busy server can take a while.
READ_TIMEOUT = 600.0
FINISH = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length", "content_filter": "stop"}


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`openai:http://host:port/v1#model` -> (base URL ending in /v1, model or None)."""
    target = spec[len("openai:") :] if spec.startswith("openai:") else spec
    url, _, model = target.partition("#")
    url = url.strip().rstrip("/")
    if not url:
        raise ModelError("openai: needs a server URL, e.g. openai:http://127.0.0.1:8000/v1#model-name")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelError(f"bad server URL {url!r}; expected http://HOST:PORT/v1")
    if not parts.path.rstrip("/").endswith("/v1"):
        url += "/v1"
    return url, (model.strip() or None)


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI wire form, without the keys servers reject when null."""
    out = message.to_openai()
    out.pop("reasoning_content", None)
    if out.get("tool_calls") is None:
        out.pop("tool_calls", None)
    return out


class OpenAICompatibleModel:
    def __init__(self, base_url: str, model: str | None = None, *, context: int = 131_072,
                 api_key: str | None = None, temperature: float | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else (
            os.environ.get("RIBBIT_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY")
        )
        self.temperature = temperature
        # "auto" lets the model choose; a dict forces one function (OpenAI's tool_choice).
        self.tool_choice: str | dict[str, Any] = "auto"
        self.model = model or self._first_model()
        self.info = ModelInfo(name=self.model, path=self.base_url, dialect="native", native_tools=True,
                              context_length=context)
        self._context = 0

    @classmethod
    def from_spec(cls, spec: str, *, context: int = 131_072) -> OpenAICompatibleModel:
        url, model = parse_spec(spec)
        return cls(url, model, context=context)

    # -- ChatModel ------------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [wire_message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": request.max_tokens,
        }
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
            body["tool_choice"] = self.tool_choice
        if self.temperature is not None:
            body["temperature"] = self.temperature
        started = time.perf_counter()
        connection, response = self._post("/chat/completions", body)
        usage = Usage()
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = "stop"
        first = None
        deltas = 0
        try:
            for event in self._events(response):
                if request.should_stop():
                    finish = "cancelled"
                    break
                if event.get("usage"):
                    self._usage(event["usage"], usage)
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    if text or thought or delta.get("tool_calls"):
                        first = first or time.perf_counter()
                        deltas += 1
                    if thought:
                        reasoning.append(thought)
                    if text:
                        content.append(text)
                        yield TextChunk(text)
                    for piece in delta.get("tool_calls") or []:
                        self._merge_call(calls, piece)
                    if choice.get("finish_reason"):
                        finish = FINISH.get(choice["finish_reason"], "stop")
        except (OSError, http.client.HTTPException) as exc:
            raise ModelError(f"the server at {self.base_url} broke off the stream: {exc}") from None
        finally:
            connection.close()
        if not usage.prompt_tokens:
            # The server reported no usage (llama_cpp.server ignores stream_options): estimate, 4 characters
            # a token for the prompt, one streamed delta a token for the answer; nothing counted as cached.
            usage.prompt_tokens = usage.evaluated_tokens = estimate_tokens(body)
            usage.completion_tokens = usage.completion_tokens or deltas
        now = time.perf_counter()
        usage.prefill_s = (first or now) - started
        usage.decode_s = now - (first or now)
        self._context = usage.prompt_tokens + usage.completion_tokens
        tool_calls = [self._tool_call(index, calls[index]) for index in sorted(calls)]
        yield TurnEnd(
            finish_reason=finish,  # type: ignore[arg-type]
            usage=usage,
            tool_calls=tool_calls,
            content="".join(content).strip(),
            reasoning="".join(reasoning).strip() or None,
        )

    def context_used(self) -> int:
        return self._context

    def close(self) -> None:
        pass

    # -- HTTP -----------------------------------------------------------------------------------

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(self.base_url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT)
        return connection, parts.path.rstrip("/")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _post(self, path: str, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection, prefix = self._connection()
        try:
            connection.request("POST", prefix + path, body=json.dumps(body).encode(), headers=self._headers())
            if connection.sock is not None:
                connection.sock.settimeout(READ_TIMEOUT)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ModelError(f"cannot reach the OpenAI-compatible server at {self.base_url}: {_reason(exc)}") from None
        if response.status != 200:
            detail = response.read(2000).decode("utf-8", "replace").strip().replace("\n", " ")
            connection.close()
            raise ModelError(f"the server at {self.base_url} answered HTTP {response.status}: {detail[:300]}")
        return connection, response

    def _first_model(self) -> str:
        connection, prefix = self._connection()
        try:
            connection.request("GET", prefix + "/models", headers=self._headers())
            response = connection.getresponse()
            data = json.loads(response.read().decode("utf-8", "replace")) if response.status == 200 else {}
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ModelError(f"cannot reach the OpenAI-compatible server at {self.base_url}: {_reason(exc)}") from None
        finally:
            connection.close()
        models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]
        if not models:
            raise ModelError(f"the server at {self.base_url} lists no models; name one: openai:URL#MODEL")
        return models[0]

    @staticmethod
    def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
        """Server-sent events: `data: {...}` lines until `data: [DONE]`."""
        while True:
            line = response.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("data:"):
                continue
            payload = text[len("data:") :].strip()
            if payload == "[DONE]":
                return
            try:
                event = json.loads(payload)
            except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
                continue
            if isinstance(event, dict):
                if event.get("error"):
                    raise ModelError(f"the server reported an error: {json.dumps(event['error'])[:300]}")
                yield event

    # -- pieces ---------------------------------------------------------------------------------

    @staticmethod
    def _usage(data: dict[str, Any], usage: Usage) -> None:
        usage.prompt_tokens = int(data.get("prompt_tokens") or 0)
        usage.completion_tokens = int(data.get("completion_tokens") or 0)
        details = data.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        usage.cached_tokens = min(cached, usage.prompt_tokens)
        usage.evaluated_tokens = usage.prompt_tokens - usage.cached_tokens

    @staticmethod
    def _merge_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
        index = int(piece.get("index") or 0)
        call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if function.get("name"):
            call["name"] += function["name"] if not call["name"].endswith(function["name"]) else ""
        if function.get("arguments"):
            call["arguments"] += function["arguments"]

    @staticmethod
    def _tool_call(index: int, call: dict[str, Any]) -> ToolCall:
        raw = call["arguments"].strip()
        try:
            arguments = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
            arguments = {"_unparsed_arguments": raw}
        if not isinstance(arguments, dict):
            arguments = {"_unparsed_arguments": raw}
        return ToolCall(id=call["id"] or f"call_{index}", name=call["name"], arguments=arguments)


def estimate_tokens(body: dict[str, Any]) -> int:
    text = json.dumps(body.get("messages", []), ensure_ascii=False) + json.dumps(body.get("tools", []), ensure_ascii=False)
    return (len(text) + 3) // 4


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, socket.timeout):
        return "timed out"
    return str(exc) or type(exc).__name__
