"""Gemma 4 in-process: a tiny random `gemma4` GGUF (built here, tests/engine/tiny_gemma4.py) loads and runs in
llama.cpp; its token stream is append-only across tool calls; the `gemma4` grammar passes exactly
well-formed calls; and an agent session with the grammar on makes no malformed call on the seeds where,
with it off, the same model writes malformed ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.core.approvals import RejectAll
from agent.core.events import NoticeEvent
from agent.core.loop import Limits
from models.dialects import parser_for
from agent.core.tools import default_tools
from agent.session.workspace import open_workspace
from models.base import GenerationRequest, PrefillProgress, TextChunk, TurnEnd
from models.chat import ChatMessage, ToolCall
from models.dialects import gemma4
from models.dialects import tool_call_grammar
from models.llama_backend import LlamaCppModel
from tests.conftest import tree_bytes
from tests.engine.conftest import assert_same_logits
from tests.engine.test_grammar import accepts

pytestmark = pytest.mark.real_model

TOOLS = default_tools()
SPECS = [t.spec() for t in TOOLS.values()]
SYSTEM = ChatMessage(role="system", content="You are ribbit, a coding agent.")
EMPTY_THOUGHT = "<|channel>thought\n<channel|>"


def load(path: Path, state_dir: Path, **options: object) -> LlamaCppModel:
    # No drafting: which drafts are verified follows verify costs timed on the machine, so a seeded sample's
    # text would depend on the load (the output distribution does not; test_drafting covers drafting).
    settings: dict[str, object] = dict(n_ctx=4096, temperature=0.8, prefill_chunk=64, state_dir=state_dir, draft="none")
    settings.update(options)
    return LlamaCppModel(path, **settings)  # type: ignore[arg-type]


def turn(model: LlamaCppModel, messages: list[ChatMessage], max_tokens: int, stop_after_prefill: bool = False) -> tuple[str, TurnEnd]:
    state = {"prefilled": False}
    request = GenerationRequest(messages=messages, tools=SPECS, max_tokens=max_tokens, should_stop=lambda: state["prefilled"])
    text, end = "", None
    for chunk in model.generate(request):
        if isinstance(chunk, TextChunk):
            text += chunk.text
        elif isinstance(chunk, PrefillProgress) and stop_after_prefill and chunk.done == chunk.total:
            state["prefilled"] = True
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None
    return text, end


def call_text(name: str, **arguments: object) -> str:
    body = ",".join(f"{k}:" + (f'<|"|>{v}<|"|>' if isinstance(v, str) else str(v).lower()) for k, v in sorted(arguments.items()))
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


@pytest.fixture(scope="module")
def model(tiny_gemma4: Path, tmp_path_factory: pytest.TempPathFactory):
    loaded = load(tiny_gemma4, tmp_path_factory.mktemp("states"), persist_states=False)
    yield loaded
    loaded.close()


def test_the_tiny_gemma4_runs_in_llama_cpp_with_gemma_4s_markers_as_single_tokens(model: LlamaCppModel) -> None:
    assert model.info.architecture == "gemma4" and model.info.dialect == "gemma4"
    assert not model.info.opens_reasoning and not model.recurrent
    markers = ["<|turn>", "<turn|>", "<|think|>", "<|tool>", "<tool|>", gemma4.CALL_OPEN, gemma4.CALL_CLOSE,
               gemma4.RESPONSE_OPEN, "<tool_response|>", gemma4.QUOTE, gemma4.THOUGHT_OPEN, gemma4.THOUGHT_CLOSE]
    for marker in markers:
        tokens = model._tokenize(marker)
        assert len(tokens) == 1 and model._token_text(tokens[0]) == marker, marker
    import llama_cpp

    vocab = model.llm._model.vocab
    # The model stops after calls at <|tool_response>, after an answer at <turn|>: both end generation.
    assert all(llama_cpp.llama_vocab_is_eog(vocab, model._tokenize(m)[0]) for m in ("<|tool_response>", "<turn|>", "<eos>"))
    text, end = turn(model, [SYSTEM, ChatMessage(role="user", content="Hello")], max_tokens=8)
    assert end.usage.completion_tokens > 0 and end.usage.evaluated_tokens > 50


GOOD = [
    call_text("Read", file_path="calc.py"),
    call_text("Read", file_path="src/a b.py", limit=20, offset=3),
    call_text("Edit", file_path="x.html", new_string="</p><tool_call|>", old_string="<div>\n  a < b\n</div>", replace_all=True),
    call_text("Write", content='{"a": [1, 2]} <|" only half a quote', file_path="data.json"),
    call_text("Bash", command="pytest -q && echo '<done>'") + call_text("Glob", pattern="**/*.py"),
]
BAD = [
    call_text("Read", path="calc.py"),  # no such argument
    call_text("Read", file_path="calc.py", offset="three"),  # not an integer
    call_text("Edit", file_path="a.py", new_string="b"),  # a required argument is missing
    call_text("Delete", file_path="a.py"),  # no such tool
    '<|tool_call>call:Read{file_path:calc.py}<tool_call|>',  # a string must be quoted
    '<|tool_call>call:Read{file_path:<|"|>calc.py}<tool_call|>',  # the string is not closed
    '<|tool_call>call:Read{limit:5,file_path:<|"|>a<|"|>}<tool_call|>',  # not in the order the template teaches
    call_text("Read", file_path="calc.py") + "and then some prose",
]


def test_the_grammar_passes_well_formed_calls_and_stops_malformed_ones(model: LlamaCppModel) -> None:
    grammar = tool_call_grammar("gemma4", SPECS)
    assert grammar is not None and grammar.dialect == "gemma4"
    parser = parser_for("gemma4", SPECS)
    for text in GOOD:
        assert accepts(model, grammar.gbnf, text), text
        parsed = parser.parse(text)
        assert parsed.tool_calls and not parsed.errors, text
        for call in parsed.tool_calls:
            TOOLS[call.name].args_model.model_validate(call.arguments)
    for text in BAD:
        assert not accepts(model, grammar.gbnf, text), text


def test_the_token_stream_is_append_only_and_a_full_render_but_for_the_prompts_empty_thoughts(tiny_gemma4, tmp_path) -> None:
    """Turns forced to known calls: what is evaluated is exactly the stream, once, and the stream is what the
    template renders for the conversation (bar the history the template rewrites)."""
    model = load(tiny_gemma4, tmp_path / "states", persist_states=False)
    messages = [SYSTEM, ChatMessage(role="user", content="Fix the bug in calc.py")]
    forced = [
        (call_text("Read", file_path="calc.py"), [ToolCall(id="c1", name="Read", arguments={"file_path": "calc.py"})]),
        (call_text("Bash", command="pytest -q") + call_text("Glob", pattern="*.py"),
         [ToolCall(id="c2", name="Bash", arguments={"command": "pytest -q"}), ToolCall(id="c3", name="Glob", arguments={"pattern": "*.py"})]),
        ("Fixed it.", []),
    ]
    previous = 0
    try:
        for text, calls in forced:
            model.response_prefix = text
            generated, end = turn(model, messages, max_tokens=len(model._tokenize(text)))
            assert generated == text and end.finish_reason == "length"
            assert end.usage.cached_tokens == previous  # everything before is reused, nothing read twice
            previous = end.usage.prompt_tokens + end.usage.completion_tokens
            messages.append(ChatMessage(role="assistant", content="" if calls else text, tool_calls=calls or None))
            messages += [ChatMessage(role="tool", content=f"output of {c.name}\n     1\tdef add(a, b):", tool_call_id=c.id,
                                     name=c.name) for c in calls]
        messages.append(ChatMessage(role="user", content="Thanks. Now add a docstring."))
        model.response_prefix = ""
        turn(model, messages, max_tokens=1, stop_after_prefill=True)
        assert model.stats.evaluated == model.llm.n_tokens  # every token of the stream evaluated once
        stream = model.llm.detokenize(model.stream_tokens(), special=True).decode()
        full = model.template.render_conversation(messages, SPECS)
    finally:
        model.close()

    def no_prompt_thoughts(text: str) -> str:
        return text.replace("<|turn>model\n" + EMPTY_THOUGHT, "<|turn>model\n")

    assert no_prompt_thoughts(stream) == no_prompt_thoughts(full)
    assert stream.count("<|tool_response>response:") == 3 and stream.count("<|turn>model\n") == 2


def test_a_new_task_restores_the_saved_system_prompt_with_the_logits_of_a_fresh_run(model: LlamaCppModel, tiny_gemma4: Path) -> None:
    """Sliding-window attention layers too: the restored state answers exactly as a fresh evaluation."""
    model.reset()
    first = [SYSTEM, ChatMessage(role="user", content="Read calc.py")]
    turn(model, first, max_tokens=4)
    second = [SYSTEM, ChatMessage(role="user", content="A different task, long enough to pass the sliding window " * 3)]
    _, end = turn(model, second, max_tokens=1, stop_after_prefill=True)
    assert end.usage.cached_tokens > 100 and end.usage.evaluated_tokens < end.usage.prompt_tokens / 2
    from models.llama_runtime import open_llama

    fresh = open_llama(model_path=str(tiny_gemma4), n_ctx=4096, n_batch=512, n_threads=2, verbose=False)
    try:
        fresh.eval(model.stream_tokens())
        expected = np.ctypeslib.as_array(fresh._ctx.get_logits_ith(-1), shape=(fresh.n_vocab(),)).copy()
    finally:
        fresh.close()
    assert_same_logits(model.last_logits(), expected, probability_gap=0.02)


SEEDS = range(3)


def sessions(path: Path, tmp_path: Path, repo: Path, grammar: bool) -> list[tuple[list[str], list[ChatMessage]]]:
    """An agent session per seed, every turn's call opening forced; (malformed-call notices, messages)."""
    out = []
    for seed in SEEDS:
        model = load(path, tmp_path / "states", persist_states=False, grammar=grammar, seed=seed)
        model.response_prefix = gemma4.CALL_PREFIX
        events: list[object] = []
        workspace = open_workspace(model, repo, mode="ask", approver=RejectAll(), sink=events.append, watch=False,
                                   limits=Limits(max_steps=2, turn_tokens=320, context=4096))
        try:
            workspace.session.run("Fix the bug in calc.py.")
            notices = [e.text for e in events if isinstance(e, NoticeEvent) and e.text.startswith("malformed tool call")]
            out.append((notices, list(workspace.session.messages)))
        finally:
            workspace.close()
            model.close()
    return out


def test_with_the_grammar_a_session_makes_no_malformed_call_where_without_it_the_model_does(tiny_gemma4, tmp_path, repo):
    before = tree_bytes(repo)
    without = sessions(tiny_gemma4, tmp_path, repo, grammar=False)
    assert all(notices for notices, _ in without), [n for n, _ in without]
    with_grammar = sessions(tiny_gemma4, tmp_path, repo, grammar=True)
    for notices, messages in with_grammar:
        assert notices == []
        calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls or []]
        results = [m for m in messages if m.role == "tool"]
        assert len(calls) >= 2 and len(results) == len(calls)  # two steps, each with a call that was run
        for call in calls:
            TOOLS[call.name].args_model.model_validate(call.arguments)
        assert all(result.content.strip() for result in results)  # each an observation for the model
    assert tree_bytes(repo) == before  # the approver refused every change and command: nothing touched the repo


def test_loading_gemma4_prints_nothing_on_stderr(tiny_gemma4: Path, tmp_path: Path) -> None:
    """llama.cpp's warnings (Gemma's SWA cache notice) stay off stderr, where the TUI draws; its errors
    still reach it. llama-cpp-python's own log callback reads ggml's levels one off."""
    import subprocess
    import sys

    script = (
        "import sys; from pathlib import Path; from models.llama_backend import LlamaCppModel\n"
        "m = LlamaCppModel(Path(sys.argv[1]), n_ctx=512, temperature=0.0, state_dir=Path(sys.argv[2]), n_threads=1, draft='none')\n"
        "m.close(); print('loaded')\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script, str(tiny_gemma4), str(tmp_path)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "loaded", done.stderr
    assert done.stderr == ""
