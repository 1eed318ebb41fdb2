from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.stream import StreamSplitter
from models.dialects import parser_for
from agent.core.tools import ALL_TOOLS

SPECS = [t.spec() for t in ALL_TOOLS]


def xml(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def hermes(name: str, **args: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def plain(name: str, **args: object) -> str:
    return json.dumps({"tool": name, "arguments": args})


FORMATS = {"qwen3_coder": xml, "hermes": hermes, "json": plain}


@pytest.mark.parametrize("dialect", FORMATS)
def test_one_call_with_reasoning_and_text(dialect: str) -> None:
    text = "Check the file first.\n</think>\n\nReading it now.\n" + FORMATS[dialect]("Read", file_path="a.py", limit=5)
    turn = parser_for(dialect, SPECS).parse(text, reasoning_opened=True)
    assert turn.errors == []
    assert turn.reasoning == "Check the file first."
    assert turn.content == "Reading it now."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("Read", {"file_path": "a.py", "limit": 5})]


@pytest.mark.parametrize("dialect", FORMATS)
def test_several_calls_keep_their_order(dialect: str) -> None:
    make = FORMATS[dialect]
    text = make("Glob", pattern="**/*.py") + "\n" + make("Bash", command="pytest -q") + "\n" + make("Read", file_path="x")
    turn = parser_for(dialect, SPECS).parse(text)
    assert [c.name for c in turn.tool_calls] == ["Glob", "Bash", "Read"]


@pytest.mark.parametrize("dialect", FORMATS)
def test_no_call_is_a_final_answer(dialect: str) -> None:
    turn = parser_for(dialect, SPECS).parse("<think>done?</think>All tests pass now.")
    assert turn.tool_calls == [] and turn.errors == []
    assert turn.content == "All tests pass now." and turn.reasoning == "done?"


def test_xml_values_keep_inner_newlines_and_indentation() -> None:
    code = "def f():\n    return 1\n"
    turn = parser_for("qwen3_coder", SPECS).parse(xml("Write", file_path="f.py", content=code))
    assert turn.tool_calls[0].arguments["content"] == code


def test_xml_typed_parameters_follow_the_schema() -> None:
    turn = parser_for("qwen3_coder", SPECS).parse(
        xml("Edit", file_path="a", old_string="1", new_string="2", replace_all="true")
        + xml("Read", file_path="123", offset="7")
    )
    edit, read = turn.tool_calls
    assert edit.arguments["replace_all"] is True and edit.arguments["old_string"] == "1"
    assert read.arguments == {"file_path": "123", "offset": 7}


@pytest.mark.parametrize(
    ("dialect", "text", "needle"),
    [
        ("qwen3_coder", "<tool_call>\n<function=Read>\n<parameter=file_path>\nx\n", "not closed"),
        ("qwen3_coder", "<tool_call>\nRead file x\n</tool_call>", "no <function=NAME>"),
        ("qwen3_coder", "<tool_call>\n<function=Re ad!>\n</function>\n</tool_call>", "not a valid tool name"),
        ("hermes", '<tool_call>{"name": "Read", "arguments": {"file_path": }</tool_call>', "not hold valid JSON"),
        ("hermes", '<tool_call>{"name": "Read"', "not closed"),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
        ("json", '{"tool": "Read", "arguments": {"file_path": "a"', "not closed"),
        ("json", '{"tool": "Read", "arguments": "{bad"}', "not valid JSON"),
    ],
)
def test_malformed_markup_names_what_is_wrong(dialect: str, text: str, needle: str) -> None:
    turn = parser_for(dialect, SPECS).parse(text)
    assert turn.errors, text
    assert any(needle in e for e in turn.errors), turn.errors


def test_think_with_and_without_opening_tag() -> None:
    parser = parser_for("qwen3_coder", SPECS)
    assert parser.parse("<think>\nplan\n</think>\nok").reasoning == "plan"
    assert parser.parse("plan\n</think>\nok", reasoning_opened=True).reasoning == "plan"
    cut = parser.parse("<think>\nstill thinking")
    assert cut.reasoning == "still thinking" and cut.content == "" and cut.tool_calls == []


def test_json_fallback_reads_fenced_calls_and_ignores_other_json() -> None:
    text = 'Config is {"a": 1}.\n```json\n{"tool": "Glob", "arguments": {"pattern": "*.py"}}\n```'
    turn = parser_for("json", SPECS).parse(text)
    assert [c.name for c in turn.tool_calls] == ["Glob"]
    assert turn.content.startswith("Config is") and "```" not in turn.content


GARBLE = st.lists(
    st.sampled_from(list("<>/=\n{}\"':, abcx") + ["<tool_call>", "</tool_call>", "<function=", "</function>",
                                                         "<parameter=", "</parameter>", "<think>", "</think>",
                                                         '{"tool": ', '"arguments": ', "Read", "null", "\\"]),
    max_size=60,
).map(lambda parts: "".join(parts))


@pytest.mark.parametrize("dialect", FORMATS)
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), GARBLE))
def test_garbled_output_never_crashes_the_parser(dialect: str, text: str) -> None:
    turn = parser_for(dialect, SPECS).parse(text, reasoning_opened=True)
    assert isinstance(turn.content, str)
    for call in turn.tool_calls:
        assert isinstance(call.name, str) and isinstance(call.arguments, dict)
    assert all(isinstance(e, str) and e for e in turn.errors)


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=200), GARBLE), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_stream_splitter_loses_nothing_outside_calls(text: str, cuts: list[int]) -> None:
    """Whatever the chunking, reasoning + text equal the input minus the markers (for call-free text)."""
    text = text.replace("<tool_call>", "").replace("<function=", "")
    shown: list[tuple[str, str]] = []
    splitter = StreamSplitter(lambda t: shown.append(("t", t)), lambda t: shown.append(("r", t)), reasoning_opened=True)
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    for a, b in zip(points, points[1:]):
        splitter.feed(text[a:b])
    splitter.flush()
    reasoning = "".join(t for k, t in shown if k == "r")
    visible = "".join(t for k, t in shown if k == "t")
    if "</think>" in text:
        head, _, tail = text.partition("</think>")
        assert reasoning == head
        assert visible == tail.lstrip("\n")
    else:
        assert reasoning == text and visible == ""
