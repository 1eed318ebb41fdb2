"""The openai: backend against a real OpenAI-compatible server — llama-cpp-python's own, serving the
embedded GGUF on 127.0.0.1 (needs the `llama-cpp-python[server]` extras) — and, for what a hosted
endpoint does (keys, rate limits, timeouts, cost), against a scripted fake server on 127.0.0.1."""

from __future__ import annotations

import email.utils
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agent.core.tools import default_tools
from models.base import GenerationRequest, ModelError, TextChunk, TurnEnd
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.openai_backend import OpenAICompatibleModel, parse_spec, retry_wait
from models.backends import load_model
from tests.engine.fake_openai import FakeOpenAI, Hang, Recorded, Status, Stream
from tests.engine.fake_openai import turn as fake_turn

# Loopback ports: a port this file finds free (bound, closed, then dialled as "nothing listens") can be taken
# meanwhile by test_sandbox.py's listener, which then counts the dial as an escape; the files share one
# worker (tests.suite).
pytestmark = pytest.mark.xdist_group("loopback_ports")

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
            [sys.executable, "-m", "tests.engine.guarded_server", "--model", str(embedded_model_path()), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--chat_format", "chatml-function-calling",
             "--model_alias", "smol"],
            stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
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
    spec = parse_spec("openai:http://127.0.0.1:8000/v1#gemma")
    assert (spec.base_url, spec.model, spec.key_env, spec.key_env_given) == (
        "http://127.0.0.1:8000/v1", "gemma", "OPENAI_API_KEY", False)
    assert (parse_spec("openai:127.0.0.1:8000").base_url, parse_spec("openai:127.0.0.1:8000").model) == (
        "http://127.0.0.1:8000/v1", None)
    hosted = parse_spec("openai:https://openrouter.ai/api/v1#google/gemma-4-12b-it:free?key_env=OPENROUTER_API_KEY&timeout=30&retries=2")
    assert (hosted.base_url, hosted.model, hosted.key_env, hosted.key_env_given, hosted.timeout_s, hosted.retries) == (
        "https://openrouter.ai/api/v1", "google/gemma-4-12b-it:free", "OPENROUTER_API_KEY", True, 30.0, 2)
    no_model = parse_spec("openai:http://gpu-box:8000/v1?key_env=VLLM_KEY")
    assert (no_model.base_url, no_model.model, no_model.key_env) == ("http://gpu-box:8000/v1", None, "VLLM_KEY")
    with pytest.raises(ModelError):
        parse_spec("openai:")


@pytest.mark.parametrize(
    "spec",
    [
        "openai:http://127.0.0.1:8000/v1#m?api_key=sk-live-SECRET123",
        "openai:http://127.0.0.1:8000/v1#m?key_env=sk-live-SECRET123",
        "openai:https://user:sk-live-SECRET123@example.com/v1#m",
        "openai:http://127.0.0.1:8000/v1?key=sk-live-SECRET123",
    ],
)
def test_a_key_in_the_spec_is_refused_without_repeating_it(spec):
    with pytest.raises(ModelError) as caught:
        parse_spec(spec)
    message = str(caught.value)
    assert "SECRET123" not in message and "\n" not in message
    assert "environment variable" in message


@pytest.mark.parametrize("option", ["timeout=0", "timeout=abc", "retries=-1", "retries=1.5", "key_env"])
def test_bad_options_are_one_line_errors(option):
    with pytest.raises(ModelError, match="openai: option|key_env=") as caught:
        parse_spec(f"openai:http://127.0.0.1:8000/v1#m?{option}")
    assert "\n" not in str(caught.value)


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


# -- hosted endpoints, against a scripted fake server on 127.0.0.1 ---------------------------------

KEY = "sk-test-7f3a9c1e5b2d4f6a8c0e"


def one_turn(model, tools=()):
    return turn(model, [ChatMessage(role="user", content="Fix calc.py.")], tools=tools, max_tokens=64)


def test_key_from_the_named_variable_goes_as_a_bearer_token_and_leaves_the_environment(monkeypatch):
    monkeypatch.setenv("RIBBIT_TEST_HOSTED_KEY", KEY)
    with FakeOpenAI() as server:
        model = load_model(f"openai:{server.url}#fake-model?key_env=RIBBIT_TEST_HOSTED_KEY")
        assert "RIBBIT_TEST_HOSTED_KEY" not in os.environ  # no child process inherits it from here on
        child = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
        assert KEY not in child
        one_turn(model)
        # A second load of the same SPEC (the next eval job) still has the key.
        one_turn(load_model(f"openai:{server.url}#fake-model?key_env=RIBBIT_TEST_HOSTED_KEY"))
    chats = server.chat_requests()
    assert len(chats) == 2
    assert all(r.headers.get("Authorization") == f"Bearer {KEY}" for r in chats)
    assert KEY not in repr(model) and KEY not in json.dumps(chats[0].body)


def test_default_variable_and_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeOpenAI() as server:
        one_turn(load_model(f"openai:{server.url}#fake-model"))
    assert server.chat_requests()[0].headers.get("Authorization") == f"Bearer {KEY}"
    # A variable named in the SPEC must be set: a clear error, before any request.
    monkeypatch.delenv("RIBBIT_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ModelError, match="RIBBIT_TEST_UNSET_KEY .* is not set"):
        load_model("openai:http://127.0.0.1:9/v1#m?key_env=RIBBIT_TEST_UNSET_KEY")


def sleeps() -> tuple[list[float], object]:
    waited: list[float] = []
    return waited, waited.append


def test_429_with_retry_after_is_retried_after_that_wait():
    waited, sleep = sleeps()
    with FakeOpenAI() as server:
        server.chat.extend([
            Status(429, '{"error": {"message": "rate limited"}}', {"Retry-After": "7"}),
            Status(503, "overloaded", {"Retry-After-Ms": "1500"}),
            fake_turn("fixed", cost=0.003),
        ])
        model = OpenAICompatibleModel(server.url, "fake-model", sleep=sleep)
        text, end = one_turn(model)
    assert text == "fixed" and len(server.chat_requests()) == 3
    assert sum(waited) == pytest.approx(7 + 1.5, abs=0.15)  # what the server asked for, not a fixed backoff
    assert end.usage.cost == pytest.approx(0.003)


def test_retry_after_as_an_http_date():
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_wait(when, None, 0) <= 31
    assert retry_wait(None, None, 0) <= 1.0 and 1.5 <= retry_wait(None, None, 1) <= 2.0  # 1, 2, 4 ... s
    assert retry_wait("soon", None, 3) <= 8.0


def test_5xx_retries_run_out_with_one_line_error_and_4xx_is_not_retried():
    waited, sleep = sleeps()
    with FakeOpenAI() as server:
        server.chat.extend([Status(502, "bad gateway\nupstream\x1b[31m down")] * 3)
        model = OpenAICompatibleModel(server.url, "fake-model", retries=2, sleep=sleep)
        with pytest.raises(ModelError) as caught:
            one_turn(model)
    message = str(caught.value)
    assert len(server.chat_requests()) == 3 and len(waited) > 0
    assert "HTTP 502" in message and "after 2 retries" in message
    assert "\n" not in message and "\x1b" not in message
    with FakeOpenAI() as server:
        server.chat.append(Status(400, '{"error": "bad request"}'))
        with pytest.raises(ModelError, match="HTTP 400"):
            one_turn(OpenAICompatibleModel(server.url, "fake-model", sleep=sleep))
        assert len(server.chat_requests()) == 1


def test_a_wait_longer_than_the_cap_gives_up_at_once():
    waited, sleep = sleeps()
    with FakeOpenAI() as server:
        server.chat.append(Status(429, "quota", {"Retry-After": "86400"}))
        with pytest.raises(ModelError, match="asks to wait 86400 s"):
            one_turn(OpenAICompatibleModel(server.url, "fake-model", sleep=sleep))
    assert waited == []


def test_stopping_during_a_retry_wait_ends_the_turn_as_cancelled():
    with FakeOpenAI() as server:
        server.chat.append(Status(429, "slow down", {"Retry-After": "60"}))
        model = OpenAICompatibleModel(server.url, "fake-model")
        request = GenerationRequest(messages=[ChatMessage(role="user", content="x")], tools=[], should_stop=lambda: True)
        (end,) = list(model.generate(request))
    assert isinstance(end, TurnEnd) and end.finish_reason == "cancelled"


def test_a_silent_server_times_out_with_one_line_error():
    with FakeOpenAI() as server:
        server.chat.append(Hang(5))
        model = load_model(f"openai:{server.url}#fake-model?timeout=0.5&retries=0")
        with pytest.raises(ModelError) as caught:
            one_turn(model)
    assert "0.5 s" in str(caught.value) and "\n" not in str(caught.value)


def test_a_dead_endpoint_is_one_line_error_from_ribbit_run(tmp_path, repo):
    spec = f"openai:http://127.0.0.1:{free_port()}/v1#m"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "fix it", "--repo", str(repo), "--model", spec, "--mode", "full-auto"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot reach" in proc.stderr and "connection refused" in proc.stderr


def test_what_a_server_echoes_of_the_key_goes_no_further(monkeypatch):
    """A hostile or careless server repeats the key: in an error, in the answer, in a tool call."""
    monkeypatch.setenv("RIBBIT_TEST_HOSTED_KEY", KEY)

    def echo_error(request: Recorded) -> Status:
        return Status(401, json.dumps({"error": f"invalid key {request.headers['Authorization']}"}))

    def echo_turn(request: Recorded) -> Stream:
        seen = request.headers["Authorization"].split()[-1]
        return fake_turn(f"your key is {seen}", [("Write", {"file_path": "leak.txt", "content": seen})])

    with FakeOpenAI() as server:
        server.chat.extend([echo_error, echo_turn])
        model = load_model(f"openai:{server.url}#fake-model?key_env=RIBBIT_TEST_HOSTED_KEY")
        with pytest.raises(ModelError) as caught:
            one_turn(model)
        text, end = one_turn(model)
    assert "HTTP 401" in str(caught.value) and KEY not in str(caught.value) and "[redacted]" in str(caught.value)
    assert KEY not in text and KEY not in (end.content or "")
    assert end.tool_calls[0].arguments == {"file_path": "leak.txt", "content": "[redacted]"}


def test_cost_from_a_litellm_header_and_tool_calls_in_pieces():
    with FakeOpenAI() as server:
        server.chat.append(fake_turn("", [("Read", {"file_path": "calc.py"})], headers={"x-litellm-response-cost": "0.0125"}))
        _, end = one_turn(OpenAICompatibleModel(server.url, "fake-model"), tools=SPECS)
    assert end.usage.cost == pytest.approx(0.0125)
    assert [(c.name, c.arguments) for c in end.tool_calls] == [("Read", {"file_path": "calc.py"})]
    assert (end.usage.prompt_tokens, end.usage.cached_tokens, end.usage.evaluated_tokens) == (100, 50, 50)


def test_doctor_checks_the_endpoint_and_lists_its_models(monkeypatch, capsys):
    from app.doctor import doctor_main

    monkeypatch.setenv("RIBBIT_TEST_HOSTED_KEY", KEY)
    with FakeOpenAI(models=("gemma-4-12b-it", "frognano-4b", "evil\x1b[2Jname")) as server:
        code = doctor_main(["--model", f"openai:{server.url}#gemma-4-12b-it?key_env=RIBBIT_TEST_HOSTED_KEY"])
        out = capsys.readouterr().out
        assert server.requests[-1].headers.get("Authorization") == f"Bearer {KEY}"

    def line(name: str) -> str:
        return next(text for text in out.splitlines() if text[3:].startswith(name + " "))

    # The escape sequence in a model's name reaches the terminal escaped (models.text.one_line), never raw.
    assert line("endpoint").startswith("ok ") and "3 models: gemma-4-12b-it, frognano-4b, evil\\x1b[2Jname" in line("endpoint")
    assert line("API key").startswith("ok ") and "from RIBBIT_TEST_HOSTED_KEY" in line("API key")
    assert line("served model").startswith("ok ") and "gemma-4-12b-it is listed" in line("served model")
    assert KEY not in out and "\x1b" not in out
    required = ("llama.cpp", "embedded model", "endpoint", "API key", "served model")
    assert (code == 0) == all(line(name).startswith("ok ") for name in required)
    with FakeOpenAI(models=("other",)) as server:
        assert doctor_main(["--model", f"openai:{server.url}#gemma-4-12b-it"]) == 1
        assert "!! served model" in capsys.readouterr().out
    assert doctor_main(["--model", f"openai:http://127.0.0.1:{free_port()}/v1#m"]) == 1
    dead = [line for line in capsys.readouterr().out.splitlines() if line[3:].startswith("endpoint ")]
    assert dead == [dead[0]] and dead[0].startswith("!! endpoint") and "connection refused" in dead[0]


def test_a_dropped_connection_is_retried():
    waited, sleep = sleeps()
    with FakeOpenAI() as server:
        server.chat.extend([Hang(0), fake_turn("after the drop")])  # Hang(0): the server closes without answering
        text, _ = one_turn(OpenAICompatibleModel(server.url, "fake-model", sleep=sleep))
    assert text == "after the drop" and len(server.chat_requests()) == 2 and len(waited) > 0
