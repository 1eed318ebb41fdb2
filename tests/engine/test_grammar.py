"""The tool-call grammar: canonical calls of each dialect pass, malformed ones are cut off, and under the
grammar the real model's calls always parse and validate."""

from __future__ import annotations

import ctypes
import json
import math

import pytest

from models.dialects import parser_for
from agent.core.tools import default_tools
from models.base import GenerationRequest, TextChunk, TurnEnd
from models.chat import ChatMessage
from models.dialects import dialect_named, tool_call_grammar
from models.llama_backend import EngineStats, _GrammarWatcher
from tests.engine.conftest import SYSTEM, make_model

TOOLS = default_tools()
SPECS = [t.spec() for t in TOOLS.values()]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # No drafting: its batches follow verify costs timed on the machine, and batched logits round
    # differently, so sampled text (and whether a call closes within max_tokens) would vary with load.
    loaded = make_model(tmp_path_factory.mktemp("states"), persist_states=False, temperature=0.8, draft="none")
    yield loaded
    loaded.close()


def xml(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def accepts(model, gbnf: str, text: str) -> bool:
    """Walk `text` token by token through a llama.cpp grammar sampler, asking before accepting."""
    import llama_cpp

    vocab = model.llm._model.vocab
    grammar = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert grammar, "the grammar does not compile"
    try:
        tokens = model.llm.tokenize(text.encode(), add_bos=False, special=True) + [model.llm.token_eos()]
        for token in tokens:
            data = (llama_cpp.llama_token_data * 1)()
            data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
            array = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
            if math.isinf(data[0].logit):
                return False
            if token != model.llm.token_eos():
                llama_cpp.llama_sampler_accept(grammar, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(grammar)


GOOD = {
    "qwen3_coder": [
        xml("Read", file_path="calc.py"),
        xml("Read", file_path="src/a b.py", offset=3, limit=20),
        xml("Edit", file_path="x.html", old_string="<div>\n  a < b\n</div>", new_string="</p>", replace_all="true"),
        xml("Bash", command="pytest -q && echo '<done>'") + "\n" + xml("Glob", pattern="**/*.py"),
    ],
    "json": [
        json.dumps({"tool": "Read", "arguments": {"file_path": "calc.py"}}),
        json.dumps({"name": "Edit", "arguments": {"file_path": "a.py", "old_string": "a\n\"b\"", "new_string": "c", "replace_all": True}}),
        '{"tool": "Bash", "arguments": {"command": "ls", "timeout": 30}}\n```',
    ],
    "hermes": [
        "<tool_call>\n" + json.dumps({"name": "Glob", "arguments": {"pattern": "*.md", "path": "docs"}}) + "\n</tool_call>",
    ],
}
BAD = {
    "qwen3_coder": [
        xml("Read", path="calc.py"),  # wrong argument name
        xml("Read", file_path="calc.py", offset="three"),  # not an integer
        xml("Edit", file_path="a.py", new_string="b"),  # a required argument is missing
        xml("Delete", file_path="a.py"),  # no such tool
        "<tool_call>\n<function=Read>\n<parameter=file_path>\na</parameter>\n</function>\n</tool_call>",
        xml("Read", file_path="calc.py") + "\nand then some prose",
    ],
    "json": [
        json.dumps({"tool": "Read", "arguments": {"filepath": "calc.py"}}),
        json.dumps({"tool": "Read", "arguments": {"file_path": 3}}),
        json.dumps({"tool": "Bash", "arguments": {"command": "ls", "timeout": "30"}}),
        json.dumps({"tool": "Remove", "arguments": {}}),
        '{"tool": "Read", "arguments": {"file_path": "calc.py"}',
    ],
    "hermes": [
        "<tool_call>\n" + json.dumps({"name": "Glob", "arguments": {}}) + "\n</tool_call>",
    ],
}


@pytest.mark.parametrize("dialect", sorted(GOOD))
def test_canonical_calls_pass_and_parse(model, dialect):
    grammar = tool_call_grammar(dialect, SPECS)
    parser = parser_for(dialect, SPECS)
    for text in GOOD[dialect]:
        assert accepts(model, grammar.gbnf, text), text
        parsed = parser.parse(text)
        assert parsed.tool_calls and not parsed.errors, text
        for call in parsed.tool_calls:
            TOOLS[call.name].args_model.model_validate(call.arguments)


@pytest.mark.parametrize("dialect", sorted(BAD))
def test_malformed_calls_are_rejected(model, dialect):
    grammar = tool_call_grammar(dialect, SPECS)
    for text in BAD[dialect]:
        assert not accepts(model, grammar.gbnf, text), text


def test_reasoning_is_never_a_trigger():
    grammar = tool_call_grammar("qwen3_coder", SPECS, opens_reasoning=True)
    built: list[list[int]] = []
    watcher = _GrammarWatcher(
        dialect_named("qwen3_coder"), grammar, SPECS, True, lambda gbnf, seen: built.append(list(seen)) or "sampler",
        EngineStats(),
    )
    assert watcher.feed(1, b"thinking of <tool_call>\n<function=Read>\n") is None and not built
    assert watcher.feed(2, b"</think>\n") is None and not built
    assert watcher.feed(3, b"<tool_call>") == "sampler" and built == [[3]]
    assert tool_call_grammar("json", []) is None and tool_call_grammar("native", SPECS) is None


def sample_calls(model, seeds: range, max_tokens: int = 48) -> list[tuple[str, str]]:
    out = []
    messages = [SYSTEM, ChatMessage(role="user", content="Read the file calc.py.")]
    for seed in seeds:
        model.llm.set_seed(seed)
        text, finish = "", None
        for chunk in model.generate(GenerationRequest(messages=messages, tools=SPECS, max_tokens=max_tokens)):
            if isinstance(chunk, TextChunk):
                text += chunk.text
            elif isinstance(chunk, TurnEnd):
                finish = chunk.finish_reason
        out.append((text, finish))
    return out


def test_under_the_grammar_the_models_calls_parse(model):
    """The call opening is forced; what the model writes after it is sampled, under the grammar."""
    model.response_prefix = '{"tool": "'
    try:
        before = model.stats.grammar_triggers
        turns = sample_calls(model, range(3), max_tokens=96)
    finally:
        model.response_prefix = ""
    assert model.stats.grammar_triggers - before == len(turns)
    parser = parser_for("json", SPECS)
    finished = [text for text, finish in turns if finish == "stop"]
    assert finished, turns
    for text in finished:
        parsed = parser.parse(text)
        assert len(parsed.tool_calls) == 1 and not parsed.errors, text
        call = parsed.tool_calls[0]
        TOOLS[call.name].args_model.model_validate(call.arguments)


def test_free_text_stays_unconstrained(model):
    before = model.stats.grammar_triggers
    turns = sample_calls(model, range(1), max_tokens=12)
    assert model.stats.grammar_triggers == before
    assert turns[0][0]
