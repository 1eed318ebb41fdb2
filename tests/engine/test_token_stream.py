"""The append-only token stream: nothing is evaluated twice, and reuse gives the same logits as a fresh run."""

from __future__ import annotations

from models.chat import ChatMessage
from tests.engine.conftest import SYSTEM, assert_same_logits, fresh_logits, make_model, prefill_only, run_turn


def tool_result(text: str, name: str = "Read") -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id="call_1", name=name)


def test_reused_stream_gives_the_logits_of_a_fresh_evaluation(state_dir):
    model = make_model(state_dir)
    try:
        messages = [SYSTEM, ChatMessage(role="user", content="Name a fruit.")]
        text, first, _ = run_turn(model, messages)
        after_first = model.stream_tokens()
        messages += [ChatMessage(role="assistant", content=text), tool_result("apple\nbanana")]
        end = prefill_only(model, messages)
        stream = model.stream_tokens()
        # Append-only: the first turn's tokens (prompt and sampled ones) are a prefix, reused as they are.
        assert stream[: len(after_first)] == after_first
        assert end.usage.cached_tokens == len(after_first)
        assert end.usage.evaluated_tokens == len(stream) - len(after_first)
        assert end.usage.prompt_tokens == end.usage.cached_tokens + end.usage.evaluated_tokens
        # Every decoded token is in the stream exactly once.
        assert model.stats.evaluated == len(stream)
        assert_same_logits(model.last_logits(), fresh_logits(stream))
    finally:
        model.close()


def test_sampled_tokens_are_kept_not_retokenised(state_dir):
    model = make_model(state_dir)
    try:
        messages = [SYSTEM, ChatMessage(role="user", content="Say hello.")]
        before = len(model.stream_tokens())
        text, end, _ = run_turn(model, messages, max_tokens=5)
        stream = model.stream_tokens()
        generated = stream[end.usage.prompt_tokens :]
        assert before == 0 and len(generated) == end.usage.completion_tokens - (end.finish_reason == "stop")
        assert model.llm.detokenize(generated, special=True).decode("utf-8", "replace") == text
    finally:
        model.close()


def test_abort_mid_prefill_keeps_the_stream_exact(state_dir):
    """Stopping after two prompt batches, then going on, gives the stream an uninterrupted run has."""
    aborted, reference = make_model(state_dir / "a"), make_model(state_dir / "b", persist_states=False)
    try:
        task = [SYSTEM, ChatMessage(role="user", content="Count to three.")]
        seen = []

        def stop_after_two() -> bool:
            return len(seen) >= 2

        end = None
        from models.base import GenerationRequest, PrefillProgress, TurnEnd

        for chunk in aborted.generate(GenerationRequest(messages=task, tools=[], max_tokens=4, should_stop=stop_after_two)):
            if isinstance(chunk, PrefillProgress):
                seen.append(chunk)
            elif isinstance(chunk, TurnEnd):
                end = chunk
        assert end is not None and end.finish_reason == "cancelled"
        assert end.usage.evaluated_tokens == seen[-1].done == len(aborted.stream_tokens()) < seen[-1].total
        assert end.usage.completion_tokens == 0
        # The loop records the cancelled turn as an empty assistant message, then the user goes on.
        follow = task + [ChatMessage(role="assistant", content=""), ChatMessage(role="user", content="Go on.")]
        prefill_only(aborted, follow)
        prefill_only(reference, task)  # an empty assistant turn, stopped before its first token
        prefill_only(reference, follow)
        assert aborted.stream_tokens() == reference.stream_tokens()
        assert aborted.stats.evaluated == len(aborted.stream_tokens())
        assert_same_logits(aborted.last_logits(), reference.last_logits())
    finally:
        aborted.close()
        reference.close()


def test_abort_mid_generation_keeps_what_was_sampled(state_dir):
    model = make_model(state_dir)
    try:
        messages = [SYSTEM, ChatMessage(role="user", content="Write a long story about a frog.")]
        chunks = []

        def stop() -> bool:
            return len(chunks) >= 3

        from models.base import GenerationRequest, TextChunk, TurnEnd

        end = None
        for chunk in model.generate(GenerationRequest(messages=messages, tools=[], max_tokens=40, should_stop=stop)):
            if isinstance(chunk, TextChunk):
                chunks.append(chunk.text)
            elif isinstance(chunk, TurnEnd):
                end = chunk
        assert end is not None and end.finish_reason == "cancelled"
        assert end.usage.completion_tokens == 3
        after = model.stream_tokens()
        assert len(after) == end.usage.prompt_tokens + 3
        messages += [ChatMessage(role="assistant", content="".join(chunks)), ChatMessage(role="user", content="Shorter.")]
        nxt = prefill_only(model, messages)
        assert nxt.usage.cached_tokens == len(after)
        assert model.stream_tokens()[: len(after)] == after
        assert_same_logits(model.last_logits(), fresh_logits(model.stream_tokens()))
    finally:
        model.close()


def test_prefill_reports_progress_up_to_the_total(state_dir):
    model = make_model(state_dir)
    try:
        _, end, progress = run_turn(model, [SYSTEM, ChatMessage(role="user", content="Hi.")], max_tokens=1)
        assert len(progress) >= 2
        assert [p.done for p in progress] == sorted(p.done for p in progress)
        assert progress[-1].done == progress[-1].total == end.usage.evaluated_tokens
    finally:
        model.close()
