"""The openai: backend against a real OpenAI-compatible server: llama-cpp-python's own, serving the
embedded GGUF on 127.0.0.1 (needs the `llama-cpp-python[server]` extras)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from agent.tools import default_tools
from models.base import GenerationRequest, ModelError, TextChunk, TurnEnd
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.openai_backend import OpenAICompatibleModel, parse_spec
from models.spec import load_model

SPECS = [t.spec() for t in default_tools().values()]
TOOLS = default_tools()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_model_path()), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--chat_format", "chatml-function-calling",
             "--model_alias", "smol"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("llama_cpp.server did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def turn(model, messages, tools=(), max_tokens=8, should_stop=None):
    request = GenerationRequest(messages=messages, tools=list(tools), max_tokens=max_tokens)
    if should_stop:
        request.should_stop = should_stop
    text, end = "", None
    for chunk in model.generate(request):
        if isinstance(chunk, TextChunk):
            text += chunk.text
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None
    return text, end


def test_spec_parsing():
    assert parse_spec("openai:http://127.0.0.1:8000/v1#gemma") == ("http://127.0.0.1:8000/v1", "gemma")
    assert parse_spec("openai:127.0.0.1:8000") == ("http://127.0.0.1:8000/v1", None)
    with pytest.raises(ModelError):
        parse_spec("openai:")


def test_streams_text_and_reports_usage(server):
    model = load_model(f"openai:{server}", context=2048)
    assert model.info.native_tools and model.info.name == "smol"  # the first model the server lists
    messages = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Name a fruit.")]
    text, end = turn(model, messages, max_tokens=8)
    assert text.strip() and end.content == text.strip()
    assert end.tool_calls == []
    assert end.usage.prompt_tokens > 5 and 0 < end.usage.completion_tokens <= 8
    assert end.usage.prompt_tokens == end.usage.cached_tokens + end.usage.evaluated_tokens
    assert end.finish_reason in ("stop", "length")
    assert model.context_used() == end.usage.prompt_tokens + end.usage.completion_tokens


def test_a_forced_tool_call_comes_back_parsed(server):
    model = OpenAICompatibleModel.from_spec(f"openai:{server}#smol", context=2048)
    model.tool_choice = {"type": "function", "function": {"name": "Read"}}
    messages = [ChatMessage(role="system", content="You can read files."),
                ChatMessage(role="user", content="Read the file calc.py.")]
    _, end = turn(model, messages, tools=SPECS, max_tokens=48)
    assert end.tool_calls and end.tool_calls[0].name == "Read"
    assert end.tool_calls[0].id
    TOOLS["Read"].args_model.model_validate(end.tool_calls[0].arguments)


def test_tool_results_go_back_in_the_wire_form(server):
    model = OpenAICompatibleModel.from_spec(f"openai:{server}#smol", context=2048)
    from models.chat import ToolCall

    call = ToolCall(id="call_1", name="Read", arguments={"file_path": "calc.py"})
    messages = [
        ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="What is in calc.py?"),
        ChatMessage(role="assistant", content="", tool_calls=[call]),
        ChatMessage(role="tool", content="def add(a, b):\n    return a - b", tool_call_id="call_1", name="Read"),
    ]
    model.tool_choice = "none"
    text, end = turn(model, messages, tools=SPECS, max_tokens=6)
    assert end.usage.prompt_tokens > 20 and end.usage.completion_tokens > 0


def test_stop_mid_stream(server):
    model = OpenAICompatibleModel.from_spec(f"openai:{server}#smol", context=2048)
    seen = []

    def stop() -> bool:
        return len(seen) >= 1

    request = GenerationRequest(messages=[ChatMessage(role="user", content="Tell a long story.")], tools=[],
                                max_tokens=64, should_stop=stop)
    end = None
    for chunk in model.generate(request):
        if isinstance(chunk, TextChunk):
            seen.append(chunk)
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None and end.finish_reason == "cancelled" and len(seen) == 1


def test_unreachable_server_is_one_clear_error():
    with pytest.raises(ModelError, match="cannot reach"):
        OpenAICompatibleModel.from_spec(f"openai:http://127.0.0.1:{free_port()}/v1")
