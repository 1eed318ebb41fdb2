"""`openai:BASE_URL[#MODEL][?OPTIONS]` — a model on an OpenAI-compatible chat-completions server.

For models on a bigger machine or a hosted endpoint (vLLM, SGLang, llama-server, llama_cpp.server,
a hosted router). Streams `/chat/completions` with the tools attached; the server parses tool calls
itself (`ModelInfo.native_tools`), so the turn's calls, content and reasoning come back in the TurnEnd.
Standard library only (http.client): no extra dependency for the client side.

OPTIONS, `&`-separated after the last `?` of the SPEC:
  key_env=NAME   the environment variable holding the API key (default OPENAI_API_KEY; a key is never
                 taken from the SPEC or the command line, and never written anywhere: models.api_keys)
  timeout=S      seconds the server may stay silent before the turn fails (default 600)
  retries=N      retries of a 429 / 5xx answer (default 5), waiting what Retry-After asks, else 1, 2, 4 ... s

The server keeps its own cache; `cached_tokens` is what it reports (`usage.prompt_tokens_details`), 0 if
it reports nothing. Cost is recorded where the server reports it (`usage.cost`, as OpenRouter does, or
LiteLLM's `x-litellm-response-cost` header).
"""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from models.api_keys import DEFAULT_KEY_ENV, ENV_NAME, StreamRedactor, redact, take_api_key
from models.base import Chunk, GenerationRequest, ModelCheck, ModelError, ModelInfo, ReasoningSwitch, TextChunk, TurnEnd, Usage, estimate_tokens
from models.chat import ChatMessage, ToolCall
from models.text import one_line

CONNECT_TIMEOUT = 10.0
# A first token from a big model behind a busy server can take a while.
DEFAULT_TIMEOUT = 600.0
DEFAULT_RETRIES = 5
# A server that asks for a longer wait than this (a quota, not a burst) ends the turn with an error.
MAX_RETRY_WAIT = 300.0
MAX_BACKOFF = 60.0
MAX_MODEL_LIST = 32 << 20  # bytes of /models read (a hosted router lists hundreds, with descriptions)
FINISH = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length", "content_filter": "stop"}
SPEC_HELP = "openai:URL[#MODEL][?key_env=NAME&timeout=S&retries=N]"


class OpenAISpec(BaseModel):
    """A parsed `openai:` SPEC. Holds the *name* of the key's variable, never the key."""

    base_url: str
    model: str | None = None
    key_env: str = DEFAULT_KEY_ENV
    key_env_given: bool = False  # named in the SPEC: then the variable must be set
    timeout_s: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    retries: int = Field(default=DEFAULT_RETRIES, ge=0)


def parse_spec(spec: str) -> OpenAISpec:
    """`openai:http://host:port/v1#model?key_env=NAME` -> OpenAISpec; a bad SPEC is a one-line ModelError.

    Messages name what is wrong but never repeat a value: a user may have pasted a key where a name goes.
    """
    target = spec[len("openai:") :] if spec.startswith("openai:") else spec
    target, _, options = target.rpartition("?") if "?" in target else (target, "", "")
    url, _, model = target.partition("#")
    url = url.strip().rstrip("/")
    if not url:
        raise ModelError(f"openai: needs a server URL, e.g. openai:http://127.0.0.1:8000/v1#model-name ({SPEC_HELP})")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise ModelError("the openai: URL carries a user name or password; put the API key in an environment "
                         "variable instead (OPENAI_API_KEY, or key_env=NAME in the SPEC)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelError(f"bad server URL {url!r}; expected http://HOST:PORT/v1")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise ModelError(f"bad port in the server URL {url!r}") from None
    if not parts.path.rstrip("/").endswith("/v1"):
        url += "/v1"
    fields: dict[str, Any] = {"base_url": url, "model": model.strip() or None}
    for option in filter(None, options.split("&")):
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep and key in ("key_env", "timeout", "retries"):
            raise ModelError(f"openai: option {key} needs a value ({SPEC_HELP})")
        if key == "key_env":
            if not ENV_NAME.match(value.strip()):
                raise ModelError("key_env= must name an environment variable (letters, digits and _), "
                                 "not hold the key itself")
            fields.update(key_env=value.strip(), key_env_given=True)
        elif key in ("timeout", "retries"):
            number = _number(value, integer=key == "retries")
            if number is None or (key == "timeout" and number <= 0) or number < 0:
                raise ModelError(f"bad openai: option {key}={value.strip()[:20]}; expected a "
                                 + ("positive number of seconds" if key == "timeout" else "whole number ≥ 0"))
            fields["timeout_s" if key == "timeout" else "retries"] = number
        else:
            # The option's value is not repeated: `api_key=sk-...` is exactly what must not be echoed.
            raise ModelError(f"unknown openai: option {key[:30]!r}; the options are key_env, timeout and retries "
                             f"({SPEC_HELP}); an API key is read from an environment variable, never from the SPEC")
    return OpenAISpec(**fields)


def api_key_for(spec: OpenAISpec) -> str | None:
    """The key for `spec` from its environment variable; a variable named in the SPEC must be set."""
    key = take_api_key(spec.key_env)
    if key is None and spec.key_env_given:
        raise ModelError(f"the environment variable {spec.key_env} (key_env in the SPEC) is not set; "
                         f"it should hold the API key for {spec.base_url}")
    return key


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI wire form, without the keys servers reject when null."""
    out = message.to_openai()
    out.pop("reasoning_content", None)
    if out.get("tool_calls") is None:
        out.pop("tool_calls", None)
    return out


class StopWaiting(Exception):
    """The user stopped the turn while a retry was waiting."""


class ServerRefused(ModelError):
    """The server answered with an HTTP error status (after any retries)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class OpenAICompatibleModel:
    def __init__(self, base_url: str, model: str | None = None, *, context: int = 131_072,
                 api_key: str | None = None, temperature: float | None = None, seed: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES, probe: bool = True,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.temperature = temperature
        self.seed = seed
        self.timeout_s = timeout_s
        self.retries = retries
        self._sleep = sleep
        # "auto" lets the model choose; a dict forces one function (OpenAI's tool_choice).
        self.tool_choice: str | dict[str, Any] = "auto"
        if model is None:
            self.model = self._first_model()
        else:
            self.model = model
            if probe:
                self._probe()
        # Whether the server's template reads `enable_thinking` cannot be known from here: it is sent
        # (chat_template_kwargs: llama-server, vLLM, SGLang) only when the user set reasoning on or off.
        self.info = ModelInfo(name=self.model, path=self.base_url, dialect="native", native_tools=True,
                              context_length=context, reasoning=ReasoningSwitch(via="server", default_on=None))
        self._context = 0

    @classmethod
    def from_spec(cls, spec: str, *, context: int = 131_072, seed: int | None = None) -> OpenAICompatibleModel:
        parsed = parse_spec(spec)
        return cls(parsed.base_url, parsed.model, context=context, api_key=api_key_for(parsed), seed=seed,
                   timeout_s=parsed.timeout_s, retries=parsed.retries)

    def __repr__(self) -> str:  # never the key
        return f"OpenAICompatibleModel({self.base_url!r}, {self.model!r})"

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
        if self.seed is not None:
            body["seed"] = self.seed
        if request.reasoning is not None:
            body["chat_template_kwargs"] = {"enable_thinking": request.reasoning}
        started = time.perf_counter()
        try:
            connection, response = self._request("POST", "/chat/completions", body, request.should_stop)
        except StopWaiting:
            yield TurnEnd(finish_reason="cancelled", usage=Usage())
            return
        usage = Usage(cost=_header_cost(response))
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = "stop"
        first = None
        deltas = 0
        shown = StreamRedactor()
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
                    if isinstance(thought, str) and thought:
                        reasoning.append(thought)
                    if isinstance(text, str) and text:
                        content.append(text)
                        if visible := shown.feed(text):
                            yield TextChunk(visible)
                    for piece in delta.get("tool_calls") or []:
                        if isinstance(piece, dict):
                            self._merge_call(calls, piece)
                    if choice.get("finish_reason"):
                        finish = FINISH.get(choice["finish_reason"], "stop")
        except TimeoutError:
            raise ModelError(f"the server at {self.base_url} sent nothing for {self.timeout_s:g} s "
                             "(timeout=S in the SPEC sets this limit)") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ModelError(redact(f"the server at {self.base_url} broke off the stream: {_reason(exc)}")) from None
        finally:
            connection.close()
        if rest := shown.flush():
            yield TextChunk(rest)
        if not usage.prompt_tokens:
            # The server reported no usage (llama_cpp.server ignores stream_options): estimate, 4 characters
            # a token for the prompt, one streamed delta a token for the answer; nothing counted as cached.
            usage.prompt_tokens = usage.evaluated_tokens = request_tokens(body)
            usage.completion_tokens = usage.completion_tokens or deltas
        now = time.perf_counter()
        usage.prefill_s = (first or now) - started
        usage.decode_s = now - (first or now)
        self._context = usage.prompt_tokens + usage.completion_tokens
        # What a server sends is hostile input: a key it echoes back goes no further than here.
        tool_calls = [self._tool_call(index, calls[index]) for index in sorted(calls)]
        yield TurnEnd(
            finish_reason=finish,  # type: ignore[arg-type]
            usage=usage,
            tool_calls=tool_calls,
            content=redact("".join(content).strip()),
            reasoning=redact("".join(reasoning).strip()) or None,
        )

    def context_used(self) -> int:
        return self._context

    def close(self) -> None:
        pass

    def list_models(self) -> list[str]:
        """The model ids the server lists at /models (retried like a chat request)."""
        connection, response = self._request("GET", "/models", None, lambda: False)
        try:
            data = json.loads(response.read(MAX_MODEL_LIST).decode("utf-8", "replace"))
        except TimeoutError:
            raise ModelError(f"the server at {self.base_url} sent nothing for {self.timeout_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ModelError(redact(f"the server at {self.base_url} sent a bad model list: {_reason(exc)}")) from None
        finally:
            connection.close()
        items = data.get("data", []) if isinstance(data, dict) else []
        ids = (one_line(m["id"], 200) for m in items if isinstance(m, dict) and isinstance(m.get("id"), str))
        return [i for i in ids if i]

    # -- HTTP -----------------------------------------------------------------------------------

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(self.base_url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=min(CONNECT_TIMEOUT, self.timeout_s))
        return connection, parts.path.rstrip("/")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None, should_stop: Callable[[], bool]
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One request, retried on 429 / 5xx; the connection and a 200 response, else a one-line ModelError."""
        data = json.dumps(body).encode() if body is not None else None
        attempt = 0
        while True:
            connection, prefix = self._connection()
            try:
                connection.request(method, prefix + path, body=data, headers=self._headers())
                if connection.sock is not None:
                    connection.sock.settimeout(self.timeout_s)
                response = connection.getresponse()
            except TimeoutError:
                connection.close()
                raise ModelError(f"the server at {self.base_url} did not answer within {self.timeout_s:g} s "
                                 "(timeout=S in the SPEC sets this limit)") from None
            except (ConnectionResetError, http.client.RemoteDisconnected) as exc:
                # A connection dropped by a busy server or proxy is worth another try; a refused one is not.
                connection.close()
                if attempt >= self.retries:
                    raise ModelError(redact(f"the server at {self.base_url} dropped the connection "
                                            f"(after {attempt} retries): {_reason(exc)}")) from None
                attempt += 1
                self._wait(retry_wait(None, None, attempt - 1), should_stop)
                continue
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                raise ModelError(redact(f"cannot reach the OpenAI-compatible server at {self.base_url}: "
                                        f"{_reason(exc)}")) from None
            if response.status == 200:
                return connection, response
            try:
                detail = response.read(2000).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                detail = ""
            connection.close()
            detail = one_line(redact(detail), 300)
            if not retryable(response.status) or attempt >= self.retries:
                raise ServerRefused(self._refusal(response.status, detail, attempt), response.status)
            wait = retry_wait(response.getheader("Retry-After"), response.getheader("Retry-After-Ms"), attempt)
            if wait > MAX_RETRY_WAIT:
                raise ServerRefused(f"the server at {self.base_url} answered HTTP {response.status} and asks to wait "
                                    f"{wait:.0f} s before retrying; giving up: {detail}"[:400], response.status)
            attempt += 1
            self._wait(wait, should_stop)

    def _refusal(self, status: int, detail: str, retried: int) -> str:
        after = f" (after {retried} retries)" if retried else ""
        if status in (401, 403):
            return (f"the server at {self.base_url} refused the request (HTTP {status}): {detail} — check the API key "
                    f"in OPENAI_API_KEY or the variable named by key_env=")[:400]
        return f"the server at {self.base_url} answered HTTP {status}{after}: {detail}"[:400]

    def _wait(self, seconds: float, should_stop: Callable[[], bool]) -> None:
        left = seconds
        while left > 0:  # in short naps, so a stop is noticed at once
            if should_stop():
                raise StopWaiting
            nap = min(0.1, left)
            self._sleep(nap)
            left -= nap

    def _probe(self) -> None:
        """A dead endpoint, or a refused key, is an error at load time, before a session starts.

        Other refusals of /models are let pass: the chat endpoint is what matters, and some servers
        answer /models oddly."""
        try:
            self.list_models()
        except ServerRefused as exc:
            if exc.status in (401, 403):
                raise

    def _first_model(self) -> str:
        models = self.list_models()
        if not models:
            raise ModelError(f"the server at {self.base_url} lists no models; name one: openai:URL#MODEL")
        return models[0]

    def _events(self, response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
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
                    raise ModelError(redact(f"the server reported an error: {one_line(json.dumps(event['error']), 300)}"))
                yield event

    # -- pieces ---------------------------------------------------------------------------------

    @staticmethod
    def _usage(data: Any, usage: Usage) -> None:
        if not isinstance(data, dict):
            return
        usage.prompt_tokens = _count(data.get("prompt_tokens"))
        usage.completion_tokens = _count(data.get("completion_tokens"))
        details = data.get("prompt_tokens_details") or {}
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        usage.cached_tokens = min(cached, usage.prompt_tokens)
        usage.evaluated_tokens = usage.prompt_tokens - usage.cached_tokens
        cost = _money(data.get("cost"))
        if cost is not None:
            usage.cost = cost

    @staticmethod
    def _merge_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
        index = _count(piece.get("index"))
        call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if isinstance(piece.get("id"), str) and piece["id"]:
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            return
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str) and name:
            call["name"] += name if not call["name"].endswith(name) else ""
        if isinstance(arguments, str) and arguments:
            call["arguments"] += arguments

    @staticmethod
    def _tool_call(index: int, call: dict[str, Any]) -> ToolCall:
        raw = redact(call["arguments"].strip())
        try:
            arguments = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
            arguments = {"_unparsed_arguments": raw}
        if not isinstance(arguments, dict):
            arguments = {"_unparsed_arguments": raw}
        return ToolCall(id=call["id"] or f"call_{index}", name=call["name"], arguments=arguments)


def retryable(status: int) -> bool:
    """429 (rate limit) and server-side failures; 501 / 505 say the request itself will never work."""
    return status == 429 or (500 <= status <= 599 and status not in (501, 505))


def retry_wait(retry_after: str | None, retry_after_ms: str | None, attempt: int) -> float:
    """Seconds to wait before retry `attempt + 1`: what the server asks for, else 1, 2, 4 ... s (capped, jittered)."""
    if retry_after_ms:
        millis = _number(retry_after_ms)
        if millis is not None and millis >= 0:
            return millis / 1000
    if retry_after:
        seconds = _number(retry_after)
        if seconds is None:
            try:  # the HTTP-date form
                seconds = parsedate_to_datetime(retry_after).timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                seconds = None
        if seconds is not None:
            return max(0.0, seconds)
    return min(MAX_BACKOFF, 2.0**attempt) * (0.75 + random.random() / 4)


def request_tokens(body: dict[str, Any]) -> int:
    """A request's prompt tokens, estimated (servers that do not report them)."""
    return estimate_tokens(json.dumps(body.get("messages", []), ensure_ascii=False) + json.dumps(body.get("tools", []), ensure_ascii=False))


def _header_cost(response: http.client.HTTPResponse) -> float | None:
    return _money(response.getheader("x-litellm-response-cost"))


def _money(value: Any) -> float | None:
    number = _number(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) or number < 0:
        return None
    return float(number)


def _number(text: Any, *, integer: bool = False) -> float | None:
    try:
        value = int(str(text).strip()) if integer else float(str(text).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return one_line(str(exc) or type(exc).__name__, 200)


MODELS_SHOWN = 30  # models named on doctor's endpoint line


def endpoint_checks(spec: str) -> list[ModelCheck]:
    """An openai: SPEC: where its key comes from (never the key), whether the server answers, its models."""
    from urllib.parse import urlsplit

    try:
        parsed = parse_spec(spec)
        key = api_key_for(parsed)
    except ModelError as exc:
        return [ModelCheck(name="endpoint", ok=False, detail=str(exc))]
    host = urlsplit(parsed.base_url).hostname or ""
    if key is None:
        key_line = ModelCheck(name="API key", ok=True, detail=f"none ({parsed.key_env} is not set; fine for a server without keys)")
    else:
        clear = parsed.base_url.startswith("http://") and host not in ("127.0.0.1", "localhost", "::1")
        key_line = ModelCheck(name="API key", ok=True, detail=f"from {parsed.key_env}" + (
            "; sent in clear text over http:// to another machine" if clear else ""))
    try:
        client = OpenAICompatibleModel(parsed.base_url, parsed.model or "-", api_key=key,
                                       timeout_s=min(parsed.timeout_s, 30.0), retries=min(parsed.retries, 2), probe=False)
        models = client.list_models()
    except ModelError as exc:
        return [ModelCheck(name="endpoint", ok=False, detail=str(exc)), key_line]
    shown = ", ".join(models[:MODELS_SHOWN]) + (f" and {len(models) - MODELS_SHOWN} more" if len(models) > MODELS_SHOWN else "")
    checks = [ModelCheck(name="endpoint", ok=True, detail=f"{parsed.base_url} answers; {len(models)} models: {shown or '(none)'}"),
              key_line]
    if parsed.model is None:
        checks.append(ModelCheck(name="served model", ok=bool(models),
                                 detail=f"{models[0]} (the first listed; name one with #MODEL)" if models
                                 else "the server lists no models; name one: openai:URL#MODEL"))
    elif parsed.model in models:
        checks.append(ModelCheck(name="served model", ok=True, detail=f"{parsed.model} is listed"))
    else:
        checks.append(ModelCheck(name="served model", ok=False, detail=f"{parsed.model} is not among the models the server lists"))
    return checks
