from __future__ import annotations

import struct
from pathlib import Path

import pytest

from models.base import ModelError
from models.chat import ChatMessage, ToolCall
from models.chat_template import ChatTemplate
from models.dialects import detect_dialect
from models.gguf_meta import read_metadata
from models.llama_backend import check_model_file
from models.replay import ReplayModel
from models.backends import load_model

# The behaviours of the Qwen3.5 template that make re-rendering unsafe, in miniature: earlier
# assistant turns lose their <think> block once a newer user query exists, tool results are grouped
# into one user turn, and a conversation with no user query is refused.
QWEN_LIKE = """
{%- if tools %}<|im_start|>system
<tools>{% for t in tools %}{{ t.function.name }} {% endfor %}</tools> Use <function=NAME><parameter=ARG>
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- set ns = namespace(last=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}
{%- if ns.last < 0 %}{{ raise_exception('No user query found in messages.') }}{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{% if loop.index0 > ns.last %}<think>
{{ m.reasoning_content or '' }}
</think>

{% endif %}{{ m.content }}<|im_end|>
{% elif m.role == 'tool' %}{% if loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}
<tool_response>
{{ m.content }}
</tool_response>{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>
{% endif %}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}"""


def conversation() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="sys"),
        ChatMessage(role="user", content="task"),
        ChatMessage(role="assistant", content="call", reasoning_content="plan",
                    tool_calls=[ToolCall(id="c1", name="Read", arguments={"file_path": "a"})]),
        ChatMessage(role="tool", content="result one", tool_call_id="c1", name="Read"),
        ChatMessage(role="tool", content="result two", tool_call_id="c2", name="Glob"),
    ]


def test_dialect_comes_from_the_template() -> None:
    assert detect_dialect(QWEN_LIKE) == "qwen3_coder"
    assert detect_dialect("{{ '<tool_call>' }}") == "hermes"
    assert ChatTemplate(None).dialect == "json"  # no template: plain ChatML, no tools


def test_delta_after_tool_results_is_what_a_full_render_appends() -> None:
    template = ChatTemplate(QWEN_LIKE, eos_token="<|im_end|>")
    assert template.opens_reasoning and template.turn_close == "<|im_end|>" and template.turn_end == "\n"
    history = conversation()
    full = template.render_conversation(history, None)
    upto_assistant = template.render(template.template_messages(history[:3]), None, False)
    assert full.startswith(upto_assistant)
    delta = template.delta(history[3:], None)
    assert upto_assistant + delta == full
    assert delta.startswith("<|im_start|>user") and delta.count("<|im_start|>user") == 1
    assert "<tool_response>\nresult one" in delta


def test_delta_for_a_follow_up_user_turn_does_not_rewrite_history() -> None:
    template = ChatTemplate(QWEN_LIKE, eos_token="<|im_end|>")
    delta = template.delta([ChatMessage(role="user", content="next")], None)
    assert delta == "<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n<think>\n"
    # A full re-render would drop the earlier <think> block: exactly what the stream must avoid.
    history = conversation()[:3] + [ChatMessage(role="user", content="next")]
    assert "plan" not in template.render_conversation(history, None)


def test_templates_without_tools_get_tool_results_as_one_user_message() -> None:
    template = ChatTemplate(None)
    delta = template.delta(conversation()[3:], None)
    assert delta.count("<|im_start|>user") == 1
    assert "[Result of Read]\nresult one" in delta and "[Result of Glob]\nresult two" in delta


def test_a_broken_template_is_a_one_line_model_error() -> None:
    with pytest.raises(ModelError, match="does not compile"):
        ChatTemplate("{% for %}")


def write_gguf_header(path: Path, keys: dict[str, str], truncate: int = 0) -> None:
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, len(keys))
    for key, value in keys.items():
        data += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 8)
        data += struct.pack("<Q", len(value)) + value.encode()
    path.write_bytes(data[: len(data) - truncate] if truncate else data)


def test_gguf_header_reader_and_corrupt_files(tmp_path: Path) -> None:
    good = tmp_path / "m.gguf"
    write_gguf_header(good, {"general.architecture": "llama", "general.name": "tiny"})
    meta = read_metadata(good)
    assert meta["general.architecture"] == "llama" and meta["general.name"] == "tiny"
    cut = tmp_path / "cut.gguf"
    write_gguf_header(cut, {"general.architecture": "llama"}, truncate=3)
    with pytest.raises(ModelError, match="truncated or corrupt"):
        read_metadata(cut)


def test_model_file_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        check_model_file(tmp_path / "missing.gguf")
    with pytest.raises(ModelError, match="is not a file"):
        check_model_file(tmp_path)
    text = tmp_path / "x.gguf"
    text.write_text("not a model")
    with pytest.raises(ModelError, match="not a GGUF file"):
        check_model_file(text)
    big = tmp_path / "big.gguf"
    write_gguf_header(big, {})
    monkeypatch.setattr("models.llama_backend.available_memory", lambda: 10)
    with pytest.raises(ModelError, match="GiB of RAM"):
        check_model_file(big)


def test_replay_spec_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "<tool_call>\\n<function=Read>"}\n\n{"text": "done"}\n')
    model = load_model(f"replay:{path}#delay=0")
    assert isinstance(model, ReplayModel) and model.turns == ["<tool_call>\n<function=Read>", "done"]
    assert model.info.dialect == "qwen3_coder"
    path.write_text('{"text": 1}\n')
    with pytest.raises(ModelError, match="r.jsonl:1"):
        load_model(f"replay:{path}")
    with pytest.raises(ModelError, match="does not exist"):
        load_model(f"replay:{tmp_path / 'none.jsonl'}")
