"""The `gemma4` dialect on Gemma 4's real chat template: detection, what the template renders for calls
parses back to the same calls, the incremental render continues the stream exactly as a full render
does (apart from the history the template itself rewrites), the live stream split, and hostile output."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.stream import StreamSplitter
from models.dialects import parser_for
from agent.core.tools import ALL_TOOLS
from models.chat import ChatMessage, ToolCall
from models.chat_template import ChatTemplate
from models.dialects import detect_dialect
from models.dialects import gemma4
from models.replay import ReplayModel

DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATE = (DATA / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8")
# An earlier Gemma 4 template (llama.cpp's "interleaved" copy) that shows tool results only as
# `tool_responses` on the assistant message, as the templates inside many Gemma 4 GGUFs do.
LEGACY = (DATA / "google-gemma-4-31B-it-interleaved.jinja").read_text(encoding="utf-8")
SPECS = [t.spec() for t in ALL_TOOLS]
# The generation prompt with thinking off: an empty thought channel, which the template drops from the
# model turns of a re-rendered history (the one rewrite the stream keeps and a re-render does not).
EMPTY_THOUGHT = "<|channel>thought\n<channel|>"


def template(thinking: bool = False, source: str = TEMPLATE) -> ChatTemplate:
    # Thinking is switched by the `enable_thinking` variable (<|think|> in the system turn).
    return ChatTemplate(("{%- set enable_thinking = true -%}" if thinking else "") + source, bos_token="<bos>", eos_token="<eos>")


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id="", name=name, arguments=arguments)


CALLS = [
    call("Read", file_path="calc.py"),
    call("Read", file_path="src/a b.py", offset=3, limit=20),
    call("Write", file_path="notes/new.md", content="# Title\n\n{braces} [brackets], commas: colons\n\tTabs, \"quotes\", 'é ü 中文'\n"),
    call("Edit", file_path="x.html", old_string="<div>\n  a < b && c > d\n</div>", new_string="</p><tool_call|>", replace_all=True),
    call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b", replace_all=False),
    call("Glob", pattern="**/*.{ts,tsx}", path="src"),
    call("Bash", command="pytest -q && echo '<done>' | sed 's/a/b/' > out.txt", timeout=600),
]


def rendered_model_turn(tmpl: ChatTemplate, calls: list[ToolCall]) -> str:
    """What the template writes for an assistant turn with these calls: the model's own text."""
    messages = [ChatMessage(role="system", content="S"), ChatMessage(role="user", content="U")]
    before = tmpl.render(tmpl.template_messages(messages), SPECS, True)
    with_calls = messages + [ChatMessage(role="assistant", content="", tool_calls=[c.model_copy(update={"id": f"c{i}"}) for i, c in enumerate(calls)])]
    text = tmpl.render(tmpl.template_messages(with_calls), SPECS, False)
    head = before.removesuffix(EMPTY_THOUGHT)
    assert text.startswith(head) and text.endswith(gemma4.RESPONSE_OPEN)
    return text[len(head) : -len(gemma4.RESPONSE_OPEN)]


def test_the_dialect_comes_from_the_template_or_the_models_output() -> None:
    assert detect_dialect(TEMPLATE) == "gemma4"
    assert template().dialect == "gemma4" and not template().opens_reasoning
    assert (template().turn_close, template().turn_end) == ("<turn|>", "\n")
    assert detect_dialect("{{ '<tool_call>' }}") == "hermes"  # others are not mistaken for it
    assert detect_dialect("<|channel>thought\n<channel|>Hello") == "json"


def test_replay_of_gemma_output_uses_the_gemma_parser(tmp_path: Path) -> None:
    path = tmp_path / "gemma.jsonl"
    path.write_text(json.dumps({"text": '<|tool_call>call:Glob{pattern:<|"|>*.py<|"|>}<tool_call|>'}) + "\n")
    assert ReplayModel(path).info.dialect == "gemma4"


@pytest.mark.parametrize("index", range(len(CALLS)))
def test_what_the_template_renders_for_a_call_parses_back_to_it(index: int) -> None:
    text = rendered_model_turn(template(), [CALLS[index]])
    assert text.startswith("<|tool_call>call:") and text.endswith("<tool_call|>")
    turn = parser_for("gemma4", SPECS).parse(text)
    assert turn.errors == [] and turn.content == "" and turn.reasoning is None
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [(CALLS[index].name, CALLS[index].arguments)]


def test_several_calls_in_one_turn_round_trip() -> None:
    text = rendered_model_turn(template(), CALLS)
    turn = parser_for("gemma4", SPECS).parse(text)
    assert turn.errors == []
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [(c.name, c.arguments) for c in CALLS]
    for parsed in turn.tool_calls:
        next(t for t in ALL_TOOLS if t.name == parsed.name).args_model.model_validate(parsed.arguments)


def conversation_steps() -> list[tuple[str, ChatMessage, list[ChatMessage]]]:
    """(raw model output, the assistant message parsed from it, the messages that follow it)."""
    first = [call("Read", file_path="calc.py")]
    second = [call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"), call("Bash", command="pytest -q")]
    steps = []
    for number, calls in enumerate((first, second), start=1):
        ids = [c.model_copy(update={"id": f"call_{number}_{i}"}) for i, c in enumerate(calls)]
        raw = rendered_model_turn(template(), calls)
        assistant = ChatMessage(role="assistant", content="", tool_calls=ids)
        results = [ChatMessage(role="tool", content=f"result of {c.name}:\n     1\tdef add(a, b):", tool_call_id=c.id,
                               name=c.name) for c in ids]
        steps.append((raw, assistant, results))
    steps.append(("Fixed: add() adds.", ChatMessage(role="assistant", content="Fixed: add() adds."),
                  [ChatMessage(role="user", content="Now add a docstring.")]))
    return steps


def without_prompt_thoughts(text: str) -> str:
    return text.replace("<|turn>model\n" + EMPTY_THOUGHT, "<|turn>model\n")


def without_any_empty_thoughts(text: str) -> str:
    # The legacy template also opens and closes a thought channel in the prompt after tool results.
    return text.replace(EMPTY_THOUGHT, "")


@pytest.mark.parametrize(("source", "normal"), [(TEMPLATE, without_prompt_thoughts), (LEGACY, without_any_empty_thoughts)],
                         ids=["official", "legacy"])
def test_the_incremental_stream_is_a_full_render_but_for_the_history_the_template_rewrites(source, normal) -> None:
    tmpl = template(source=source)
    assert tmpl.dialect == "gemma4" and tmpl.legacy_tool_results == (source is LEGACY)
    messages = [ChatMessage(role="system", content="You are ribbit."), ChatMessage(role="user", content="Fix calc.py")]
    stream = tmpl.render_conversation(messages, SPECS)
    for raw, assistant, following in conversation_steps():
        # The model writes `raw`; the stream then gets the turn's close and the rendered new messages.
        stream += raw + tmpl.after_turn(assistant, following, SPECS)
        messages += [assistant, *following]
        assert normal(stream) == normal(tmpl.render_conversation(messages, SPECS))
    assert stream.count("<|tool_response>response:") == 3 and "<|turn>tool" not in stream
    assert stream.endswith("<|turn>user\nNow add a docstring.<turn|>\n<|turn>model\n" + EMPTY_THOUGHT)


def test_calls_close_with_a_tool_response_and_answers_with_the_end_of_the_turn() -> None:
    tmpl = template()
    with_calls = ChatMessage(role="assistant", content="", tool_calls=[call("Glob", pattern="*").model_copy(update={"id": "c"})])
    result = ChatMessage(role="tool", content="a.py", tool_call_id="c", name="Glob")
    # After tool results the model goes on in the same turn: no new turn header, no generation prompt.
    assert tmpl.after_turn(with_calls, [result], SPECS) == '<|tool_response>response:Glob{value:<|"|>a.py<|"|>}<tool_response|>'
    follow_up = ChatMessage(role="user", content="next")
    prompt = "<|turn>user\nnext<turn|>\n<|turn>model\n" + EMPTY_THOUGHT
    assert tmpl.after_turn(ChatMessage(role="assistant", content="done"), [follow_up], SPECS) == "<turn|>\n" + prompt
    # A turn stopped before the model wrote anything is an empty answer.
    assert tmpl.after_turn(ChatMessage(role="assistant", content=""), [follow_up], SPECS) == "<turn|>\n" + prompt
    # A turn with a call and a malformed one: no results, the error comes back as a user turn.
    assert tmpl.after_turn(with_calls, [follow_up], SPECS) == "<|tool_response>" + prompt
    legacy = template(source=LEGACY)
    assert legacy.after_turn(with_calls, [follow_up], SPECS) == "<turn|>\n" + prompt
    assert legacy.after_turn(with_calls, [result], SPECS) == '<|tool_response>response:Glob{value:<|"|>a.py<|"|>}<tool_response|>' + EMPTY_THOUGHT


def test_with_thinking_on_the_stream_is_still_prefix_stable() -> None:
    tmpl = template(thinking=True)
    messages = [ChatMessage(role="system", content="S"), ChatMessage(role="user", content="U")]
    prompt = tmpl.render_conversation(messages, SPECS)
    assert prompt.startswith("<bos><|turn>system\n<|think|>\nS") and prompt.endswith("<|turn>model\n")
    ids = [call("Read", file_path="a.py").model_copy(update={"id": "c1"})]
    assistant = ChatMessage(role="assistant", content="", reasoning_content="Look first.", tool_calls=ids)
    result = ChatMessage(role="tool", content="x = 1", tool_call_id="c1", name="Read")
    assert tmpl.after_turn(assistant, [result], SPECS) == '<|tool_response>response:Read{value:<|"|>x = 1<|"|>}<tool_response|>'
    raw = '<|channel>thought\nLook first.<channel|><|tool_call>call:Read{file_path:<|"|>a.py<|"|>}<tool_call|>'
    turn = parser_for("gemma4", SPECS).parse(raw)
    assert turn.reasoning == "Look first." and [c.arguments for c in turn.tool_calls] == [{"file_path": "a.py"}]


# -- the parser on what models write -----------------------------------------------------------


def parse(text: str, reasoning_opened: bool = False):
    return parser_for("gemma4", SPECS).parse(text, reasoning_opened)


def test_reasoning_text_and_calls_are_told_apart() -> None:
    turn = parse('<|channel>thought\nThe sign is wrong.<channel|>Fixing it.<|tool_call>call:Edit{file_path:<|"|>calc.py<|"|>,'
                 'new_string:<|"|>a + b<|"|>,old_string:<|"|>a - b<|"|>}<tool_call|>')
    assert turn.reasoning == "The sign is wrong." and turn.content == "Fixing it." and not turn.errors
    assert turn.tool_calls[0].arguments == {"file_path": "calc.py", "new_string": "a + b", "old_string": "a - b"}


def test_answers_stray_channel_marks_and_made_up_results() -> None:
    assert parse("<channel|>All done.").content == "All done."  # a stray close of the prompt's channel
    trailing = parse("All done.<|channel>thought\n<channel|>")  # Gemma 4 sometimes adds an empty one
    assert trailing.content == "All done." and trailing.reasoning is None
    cut = parse("<|channel>thought\nStill thinking when the turn ended")
    assert cut.reasoning == "Still thinking when the turn ended" and cut.content == ""
    made_up = parse('<|tool_call>call:Glob{pattern:<|"|>*<|"|>}<tool_call|><|tool_response>response:Glob{value:<|"|>x<|"|>}')
    assert [c.name for c in made_up.tool_calls] == ["Glob"] and not made_up.errors
    spaced = parse('<|tool_call>call:Read{ file_path : <|"|>a<|"|> , limit : 5 }<tool_call|>')
    assert spaced.tool_calls[0].arguments == {"file_path": "a", "limit": 5}


def test_values_of_every_kind() -> None:
    turn = parse('<|tool_call>call:T{a:-1.5e3,b:true,c:null,d:None,e:[1,<|"|>x<|"|>,[]],f:{g:{}},<|"|>h<|"|>:7}<tool_call|>')
    assert turn.tool_calls[0].arguments == {"a": -1500.0, "b": True, "c": None, "d": None, "e": [1, "x", []], "f": {"g": {}}, "h": 7}


BAD = {
    '<|tool_call>call:Read{file_path:<|"|>calc.py}<tool_call|>': "string is not closed",
    '<|tool_call>call:Read{file_path:calc.py}<tool_call|>': "a value must be",
    '<|tool_call>call:Read{file_path:<|"|>a<|"|>': "not closed with <tool_call|>",
    '<|tool_call>call:Read{file_path:<|"|>a<|"|>}and more': "not closed with <tool_call|>",
    '<|tool_call>Read{file_path:<|"|>a<|"|>}<tool_call|>': "must be followed by call:NAME",
    '<|tool_call>call:{file_path:<|"|>a<|"|>}<tool_call|>': "no valid tool name",
    '<|tool_call>call:Read(file_path=1)<tool_call|>': "must go on with {",
    '<|tool_call>call:Read{file_path<|"|>a<|"|>}<tool_call|>': "expected ':'",
    '<|tool_call>call:Read{file_path:<|"|>a<|"|> limit:3}<tool_call|>': "expected ',' or '}'",
    '<|tool_call>call:Read{a:1,a:2}<tool_call|>': "given twice",
    '<|tool_call>call:Read{:1}<tool_call|>': "expected an argument name",
    '<|tool_call>call:Read{a:[1 2]}<tool_call|>': "in a list",
    '<|tool_call>call:Read{a:' + "9" * 5000 + "}<tool_call|>": "too long",
    '<|tool_call>call:Read{a:1e999}<tool_call|>': "out of range",
}


@pytest.mark.parametrize("text", sorted(BAD))
def test_malformed_calls_are_one_line_errors(text: str) -> None:
    turn = parse(text)
    assert turn.tool_calls == [] and len(turn.errors) == 1
    assert BAD[text] in turn.errors[0] and "\n" not in turn.errors[0] and len(turn.errors[0]) < 300


def test_a_bad_call_does_not_hide_the_good_ones_after_it() -> None:
    turn = parse('<|tool_call>call:Read{x}<tool_call|><|tool_call>call:Glob{pattern:<|"|>*<|"|>}<tool_call|>')
    assert [c.name for c in turn.tool_calls] == ["Glob"] and len(turn.errors) == 1


def test_hostile_nesting_and_huge_values_are_errors_or_calls_never_a_crash() -> None:
    deep = "<|tool_call>call:Read{a:" + "[" * 100_000 + "]" * 100_000 + "}<tool_call|>"
    assert "nest more than 32 levels" in parse(deep).errors[0]
    deep_dict = "<|tool_call>call:Read{" + "a:{" * 50_000 + "}" * 50_001 + "<tool_call|>"
    assert "nest more than 32 levels" in parse(deep_dict).errors[0]
    huge = "x" * 5_000_000
    turn = parse(f'<|tool_call>call:Write{{file_path:<|"|>a<|"|>,content:<|"|>{huge}<|"|>}}<tool_call|>')
    assert turn.tool_calls[0].arguments["content"] == huge
    unterminated = parse('<|tool_call>call:Write{content:<|"|>' + huge)
    assert "is not closed with <tool_call|>" in unterminated.errors[0] and len(unterminated.errors[0]) < 300
    many = parse("<|tool_call>" * 200_000)
    assert len(many.errors) == 1 and many.tool_calls == []


MARKUP = st.sampled_from(['<|tool_call>', 'call:', 'Read', '{', '}', ':', ',', '[', ']', '<|"|>', '<tool_call|>', '<|channel>',
                          'thought\n', '<channel|>', '<|tool_response>', '1', 'true', 'None', ' ', 'a', 'é'])


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(MARKUP, st.text(max_size=6)), max_size=40), opened=st.booleans())
def test_any_output_parses_to_calls_or_one_line_errors(pieces: list[str], opened: bool) -> None:
    turn = parse("".join(pieces), opened)
    assert isinstance(turn.content, str)
    for parsed in turn.tool_calls:
        json.dumps(parsed.arguments)  # plain JSON values only
    assert all(isinstance(e, str) and e and "\n" not in e for e in turn.errors)


# -- the live stream ---------------------------------------------------------------------------


def split(text: str, cuts: list[int]) -> tuple[str, str]:
    shown: list[tuple[str, str]] = []
    splitter = StreamSplitter.for_dialect("gemma4", lambda t: shown.append(("t", t)), lambda t: shown.append(("r", t)))
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    for a, b in zip(points, points[1:]):
        splitter.feed(text[a:b])
    splitter.flush()
    return "".join(t for k, t in shown if k == "r"), "".join(t for k, t in shown if k == "t")


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 200), max_size=12))
def test_the_live_view_shows_reasoning_apart_and_holds_back_call_markup(cuts: list[int]) -> None:
    text = ('<|channel>thought\nRead it first.<channel|>Reading calc.py.<|channel>thought\n'
            'Then fix.<channel|> Now.<|tool_call>call:Read{file_path:<|"|>calc.py<|"|>}<tool_call|>')
    reasoning, visible = split(text, cuts)
    assert reasoning == "Read it first.Then fix."
    assert visible == "Reading calc.py. Now."
    assert not re.search(r"<\||\|>", visible + reasoning)


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 80), max_size=8))
def test_the_live_view_drops_a_stray_channel_close(cuts: list[int]) -> None:
    assert split("<channel|>All done, <channel|>tests pass.", cuts) == ("", "All done, tests pass.")


def test_the_grammar_waits_for_a_call_outside_thought_channels() -> None:
    trigger = gemma4.CallTrigger()
    thinking = b"<|channel>thought\nI could write <|tool_call>call:Bash{...} here<channel|>Now: "
    match = trigger.search(thinking + b"<|tool_call>call:Read{", 0)
    assert match is not None and match.start() == len(thinking)
    assert trigger.search(b"<|channel>thought\nstill thinking <|tool_call>", 0) is None
    assert trigger.search(b"<channel|>plain text <|tool_call>", 0).start() == len(b"<channel|>plain text ")
    # What followed the opening inside its token must be able to start a call the grammar accepts.
    names = ["Read", "Glob"]
    assert gemma4.tail_ok("<|tool_call>", "", names) and gemma4.tail_ok("<|tool_call>", "call:Re", names) and gemma4.tail_ok("<|tool_call>", "call:Glob{", names)
    assert not gemma4.tail_ok("<|tool_call>", "call:Delete", names) and not gemma4.tail_ok("<|tool_call>", " call:Read{", names)
