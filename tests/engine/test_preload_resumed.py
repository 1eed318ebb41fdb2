"""A resumed conversation whose saved state was not loaded (another model, an evicted state) is read while
the user types (issue 13, item 4), through its last assistant turn as if that turn had just been generated:
the next turn then reads only the turn's close and what follows, and the context holds exactly the tokens
a fresh read of the whole conversation would have put there."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.chat import ChatMessage, ToolCall
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.engine.conftest import SYSTEM, run_turn

pytestmark = pytest.mark.real_model

READ = ToolCall(id="c1", name="Read", arguments={"file_path": "notes.txt"})
ENDS_ANSWERED = [
    SYSTEM,
    ChatMessage(role="user", content="What is in notes.txt?"),
    ChatMessage(role="assistant", content="", tool_calls=[READ]),
    ChatMessage(role="tool", tool_call_id="c1", name="Read", content="1\tbuy milk\n2\t<|im_end|>\n"),
    ChatMessage(role="assistant", content="It says to buy milk."),
]
# A task stopped by the step limit: the conversation ends with a tool result the model has not read.
ENDS_ON_A_TOOL = ENDS_ANSWERED[:4]
# The same with a few words before the call. Gemma 4's template writes them after the call's result,
# not where the model wrote them: that conversation cannot be read as generated, and only the system
# prompt is preloaded (the next turn reads the rest, as without a preload).
SAYS_AND_CALLS = ENDS_ANSWERED[:2] + [ENDS_ANSWERED[2].model_copy(update={"content": "I will read it."}), ENDS_ANSWERED[3]]
FOLLOW_UP = ChatMessage(role="user", content="Anything else?")


@pytest.fixture(params=["embedded", "qwen35", "gemma4"])
def model_path(request, thinking_qwen35: Path, tiny_gemma4: Path) -> Path:  # type: ignore[no-untyped-def]
    return {"embedded": embedded_model_path(), "qwen35": thinking_qwen35, "gemma4": tiny_gemma4}[request.param]


def load(path: Path, tmp_path: Path, name: str) -> LlamaCppModel:
    return LlamaCppModel(path, n_ctx=4096, temperature=0.0, n_threads=2, draft="none",
                         state_dir=tmp_path / name, persist_states=False)


def text_of(model: LlamaCppModel, tokens: list[int]) -> str:
    return model.llm.detokenize(tokens, special=True).decode("utf-8", "replace")


# Qwen3.5's template writes an assistant turn after the last question with its think block, before it
# without: a live stream keeps the block the turn was generated with, a fresh read of a longer
# conversation drops it. The preloaded turn is as it was generated.
EMPTY_THINK = "<think>\n\n</think>\n\n"


@pytest.mark.parametrize("conversation", [ENDS_ANSWERED, ENDS_ON_A_TOOL, SAYS_AND_CALLS],
                         ids=["answered", "ends-on-a-tool", "says-and-calls"])
def test_a_preloaded_resumed_conversation_is_not_read_again_and_matches_a_fresh_read(
    model_path: Path, tmp_path: Path, conversation: list[ChatMessage],
) -> None:
    preloaded, fresh = load(model_path, tmp_path, "a"), load(model_path, tmp_path, "b")
    try:
        progress = list(preloaded.preload(conversation, []))
        held = preloaded.stream_tokens()
        assert progress and progress[-1].done == progress[-1].total == len(held) == preloaded.stats.evaluated
        read = text_of(preloaded, held)
        whole = not (model_path.name == "tiny-gemma4.gguf" and conversation is SAYS_AND_CALLS)
        assert ("What is in notes.txt?" in read) == whole  # the conversation, not only the system prompt
        assert ("It says to buy milk." in read) == (conversation is ENDS_ANSWERED)
        assert len(held) == len(preloaded._system_tokens or []) or whole  # noqa: SLF001 - else the system prompt
        nxt = conversation + [FOLLOW_UP]
        text, turn, _ = run_turn(preloaded, nxt)
        assert turn.usage.cached_tokens == len(held)  # nothing of the preloaded conversation read again
        assert turn.usage.evaluated_tokens == turn.usage.prompt_tokens - len(held)  # only what follows
        # The control reads the whole conversation at the turn: the same tokens (Qwen3.5: the same text
        # but for the think blocks), and then the same greedy answer.
        fresh_text, fresh_turn, _ = run_turn(fresh, nxt)
        assert fresh_turn.usage.cached_tokens == 0
        mine, theirs = preloaded.stream_tokens()[: turn.usage.prompt_tokens], fresh.stream_tokens()[: fresh_turn.usage.prompt_tokens]
        if model_path.name == "tiny-qwen35.gguf":
            assert EMPTY_THINK in read  # the last turn as generated
            assert text_of(preloaded, mine).replace(EMPTY_THINK, "") == text_of(fresh, theirs).replace(EMPTY_THINK, "")
        else:
            assert mine == theirs
            assert text == fresh_text
    finally:
        preloaded.close()
        fresh.close()


def test_a_conversation_already_in_the_context_is_left_alone(tmp_path: Path) -> None:
    model = load(embedded_model_path(), tmp_path, "a")
    try:
        text, _, _ = run_turn(model, [SYSTEM, ChatMessage(role="user", content="Hi.")])
        before, evaluated = model.stream_tokens(), model.stats.evaluated
        conversation = [SYSTEM, ChatMessage(role="user", content="Hi."), ChatMessage(role="assistant", content=text)]
        assert list(model.preload(conversation, [])) == []
        assert model.stream_tokens() == before and model.stats.evaluated == evaluated
    finally:
        model.close()
