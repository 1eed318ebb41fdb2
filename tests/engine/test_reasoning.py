"""Reasoning on / off (`enable_thinking`): the real Qwen3.5 template both ways, and the append-only stream
across a switch on a tiny qwen35 GGUF (and on the embedded GGUF, which has no switch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.base import GenerationRequest, PrefillProgress, TurnEnd
from models.chat import ChatMessage
from models.chat_template import ChatTemplate
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.engine.tiny_qwen35 import QWEN35_TEMPLATE

TEMPLATES = Path(__file__).resolve().parents[1] / "data"
OFF_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
ON_PROMPT = "<|im_start|>assistant\n<think>\n"


def conversation() -> list[ChatMessage]:
    return [ChatMessage(role="system", content="You are terse."), ChatMessage(role="user", content="Fix calc.py.")]


def render(template: ChatTemplate, messages: list[ChatMessage], enable_thinking: bool | None) -> str:
    template.enable_thinking = enable_thinking
    try:
        return template.render_conversation(messages, None)
    finally:
        template.enable_thinking = None


# -- the template, rendered both ways ------------------------------------------------------------


def test_qwen35_template_has_a_switch_and_off_closes_an_empty_think_block() -> None:
    template = ChatTemplate(QWEN35_TEMPLATE, eos_token="<|im_end|>")
    found = template.reasoning
    assert found.switch and found.default_on
    assert found.opens_when_on and not found.opens_when_off and found.opens_by_default
    assert render(template, conversation(), None).endswith(ON_PROMPT)
    assert render(template, conversation(), True).endswith(ON_PROMPT)
    assert render(template, conversation(), False).endswith(OFF_PROMPT)
    # Only the generation prompt differs: everything before it is the same either way.
    on, off = render(template, conversation(), True), render(template, conversation(), False)
    assert on[: -len(ON_PROMPT)] == off[: -len(OFF_PROMPT)]


@pytest.mark.parametrize("reasoning", [True, False])
def test_history_renders_as_the_stream_has_it(reasoning: bool) -> None:
    """A turn generated after either prompt, closed and followed by a tool result, is exactly what a full
    render of the conversation has: switching appends, nothing before it would render differently."""
    template = ChatTemplate(QWEN35_TEMPLATE, eos_token="<|im_end|>")
    template.enable_thinking = reasoning
    generated = ("Look at the file first.\n</think>\n\n" if reasoning else "") + "Reading it."
    stream = (
        template.render_conversation(conversation(), None) + generated + template.turn_close + template.turn_end
        + template.delta([ChatMessage(role="tool", content="def add(a, b):", tool_call_id="c1", name="Read")], None)
    )
    history = conversation() + [
        ChatMessage(role="assistant", content="Reading it.",
                    reasoning_content="Look at the file first." if reasoning else None),
        ChatMessage(role="tool", content="def add(a, b):", tool_call_id="c1", name="Read"),
    ]
    assert stream == template.render_conversation(history, None)


@pytest.mark.parametrize("name", ["Qwen-Qwen2.5-7B-Instruct.jinja", None])
def test_templates_without_enable_thinking_have_no_switch(name: str | None) -> None:
    source = (TEMPLATES / name).read_text() if name else None
    template = ChatTemplate(source)
    assert not template.reasoning.switch
    assert render(template, conversation(), False) == render(template, conversation(), True)


# -- the stream across a switch (real llama.cpp) -------------------------------------------------


def turn(model: LlamaCppModel, messages: list[ChatMessage], reasoning: bool | None, max_tokens: int = 6) -> TurnEnd:
    end = None
    request = GenerationRequest(messages=messages, tools=[], max_tokens=max_tokens, reasoning=reasoning)
    for chunk in model.generate(request):
        if isinstance(chunk, TurnEnd):
            end = chunk
        assert not isinstance(chunk, PrefillProgress) or chunk.done <= chunk.total
    assert end is not None
    return end


def detok(model: LlamaCppModel, tokens: list[int]) -> str:
    return model.llm.detokenize(tokens, special=True).decode("utf-8", "replace")


def switch_session(model: LlamaCppModel, settings: list[bool | None]) -> list[tuple[int, int]]:
    """One turn per setting, each followed by a tool result; (stream length before, after) each prompt."""
    messages = conversation()
    marks = []
    for index, reasoning in enumerate(settings):
        before = len(model.stream_tokens())
        end = turn(model, messages, reasoning)
        assert end.usage.cached_tokens == before  # nothing read twice: the prompt extended what was there
        stream = model.stream_tokens()
        prompt_end = end.usage.prompt_tokens
        assert detok(model, stream[:prompt_end]).endswith(OFF_PROMPT if reasoning is False else ON_PROMPT), reasoning
        marks.append((before, prompt_end))
        text = detok(model, stream[prompt_end:])
        messages = messages + [
            ChatMessage(role="assistant", content=text),
            ChatMessage(role="tool", content=f"result {index}", tool_call_id=f"c{index}", name="Read"),
        ]
    return marks


def test_switching_mid_session_reads_nothing_twice_on_tiny_qwen35(thinking_qwen35: Path, tmp_path: Path) -> None:
    model = LlamaCppModel(thinking_qwen35, n_ctx=1024, temperature=0.0, state_dir=tmp_path / "states")
    try:
        assert model.info.reasoning is not None and model.info.reasoning.via == "template"
        assert model.recurrent  # the hybrid path: a re-read would be the only way back
        marks = switch_session(model, [None, False, True, False])
        stream = model.stream_tokens()
        # tokens evaluated / tokens appended: 1.00 across three switches
        assert model.stats.evaluated == len(stream)
        assert model.stats.snapshot_restores == 0 and model.stats.restored == 0
        assert [b for b, _ in marks[1:]] == sorted(b for b, _ in marks[1:])
    finally:
        model.close()


def test_the_embedded_model_has_no_switch_and_its_stream_is_unchanged(tmp_path: Path) -> None:
    plain = LlamaCppModel(embedded_model_path(), n_ctx=1024, temperature=0.0, state_dir=tmp_path / "a")
    told = LlamaCppModel(embedded_model_path(), n_ctx=1024, temperature=0.0, state_dir=tmp_path / "b")
    try:
        assert plain.info.reasoning is None
        messages = conversation()
        for reasoning in (None, False, True):
            a, b = turn(plain, messages, None), turn(told, messages, reasoning)
            text = detok(plain, plain.stream_tokens()[a.usage.prompt_tokens :])
            messages = messages + [ChatMessage(role="assistant", content=text),
                                   ChatMessage(role="user", content="Go on.")]
            assert b.usage.prompt_tokens == a.usage.prompt_tokens
        assert told.stream_tokens() == plain.stream_tokens()
        assert told.stats.evaluated == len(told.stream_tokens())
    finally:
        plain.close()
        told.close()
