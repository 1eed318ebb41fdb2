"""Saved states: a new task, /clear or an undo restores a snapshot; a second launch loads it from disk."""

from __future__ import annotations

from models.chat import ChatMessage
from tests.engine.conftest import SYSTEM, assert_same_logits, fresh_logits, make_model, prefill_only, run_turn


def system_length(model) -> int:
    assert model._system_tokens is not None
    return len(model._system_tokens)


def test_new_task_restores_the_system_snapshot(state_dir):
    model = make_model(state_dir, persist_states=False)
    try:
        messages = [SYSTEM, ChatMessage(role="user", content="Name a fruit.")]
        text, _, _ = run_turn(model, messages)
        run_turn(model, messages + [ChatMessage(role="assistant", content=text), ChatMessage(role="user", content="More.")])
        evaluated = model.stats.evaluated
        # /clear: a new conversation with the same system prompt.
        end = prefill_only(model, [SYSTEM, ChatMessage(role="user", content="Name a colour.")])
        assert model.stats.snapshot_restores == 1
        assert end.usage.cached_tokens == system_length(model) > 0
        assert model.stats.evaluated - evaluated == end.usage.evaluated_tokens
        assert_same_logits(model.last_logits(), fresh_logits(model.stream_tokens()))
    finally:
        model.close()


def test_restore_system_snapshot_for_clear(state_dir):
    model = make_model(state_dir, persist_states=False)
    try:
        assert model.restore_system_snapshot() is False  # nothing evaluated yet
        run_turn(model, [SYSTEM, ChatMessage(role="user", content="Hi.")])
        assert model.restore_system_snapshot() is True
        assert model.context_used() == system_length(model)
        end = prefill_only(model, [SYSTEM, ChatMessage(role="user", content="Bye.")])
        assert end.usage.cached_tokens == system_length(model)
    finally:
        model.close()


def test_undo_that_rewinds_restores_the_task_snapshot(state_dir):
    model = make_model(state_dir, persist_states=False)
    try:
        first = [SYSTEM, ChatMessage(role="user", content="Name a fruit.")]
        text, _, _ = run_turn(model, first)
        done_first = first + [ChatMessage(role="assistant", content=text)]
        second = done_first + [ChatMessage(role="user", content="Name a tree.")]
        prefill_only(model, second)
        at_second_task = model.stats.snapshot_restores
        # Undo the second task: the conversation goes back to the end of the first one, then a new ask.
        rewound = done_first + [ChatMessage(role="user", content="Name a bird.")]
        end = prefill_only(model, rewound)
        assert model.stats.snapshot_restores == at_second_task + 1
        assert end.usage.cached_tokens > system_length(model)
        assert_same_logits(model.last_logits(), fresh_logits(model.stream_tokens()))
    finally:
        model.close()


def test_second_launch_loads_the_system_prompt_from_disk(state_dir):
    messages = [SYSTEM, ChatMessage(role="user", content="Name a fruit.")]
    first = make_model(state_dir)
    try:
        cold = prefill_only(first, messages)
        cold_logits = first.last_logits()
        assert cold.usage.cached_tokens == 0
    finally:
        first.close()
    assert len(list(state_dir.glob("*.state"))) == 1
    second = make_model(state_dir)
    try:
        warm = prefill_only(second, messages)
        assert second.stats.disk_loads == 1
        assert warm.usage.cached_tokens == system_length(second)
        assert warm.usage.evaluated_tokens == cold.usage.evaluated_tokens - warm.usage.cached_tokens
        assert second.stats.evaluated == warm.usage.evaluated_tokens
        assert_same_logits(second.last_logits(), cold_logits)
    finally:
        second.close()


def test_a_corrupt_state_file_is_ignored(state_dir):
    messages = [SYSTEM, ChatMessage(role="user", content="Hi.")]
    first = make_model(state_dir)
    try:
        prefill_only(first, messages)
    finally:
        first.close()
    for path in state_dir.glob("*.state"):
        path.write_bytes(b"not a llama state" * 10)
    second = make_model(state_dir)
    try:
        end = prefill_only(second, messages)
        assert second.stats.disk_loads == 0
        assert end.usage.cached_tokens == 0
        assert_same_logits(second.last_logits(), fresh_logits(second.stream_tokens()))
    finally:
        second.close()


def test_a_different_system_prompt_misses_the_disk_cache(state_dir):
    first = make_model(state_dir)
    try:
        prefill_only(first, [SYSTEM, ChatMessage(role="user", content="Hi.")])
    finally:
        first.close()
    second = make_model(state_dir)
    try:
        other = ChatMessage(role="system", content="You are a verbose assistant.")
        end = prefill_only(second, [other, ChatMessage(role="user", content="Hi.")])
        assert second.stats.disk_loads == 0 and end.usage.cached_tokens == 0
    finally:
        second.close()


def test_preload_evaluates_the_system_prompt_ahead_of_the_task(state_dir):
    model = make_model(state_dir, persist_states=False)
    try:
        progress = list(model.preload([SYSTEM], []))
        assert progress and progress[-1].done == progress[-1].total == system_length(model)
        end = prefill_only(model, [SYSTEM, ChatMessage(role="user", content="Hi.")])
        assert end.usage.cached_tokens == system_length(model)
        assert model.stats.evaluated == len(model.stream_tokens())
    finally:
        model.close()


def test_snapshots_over_the_budget_are_not_taken(state_dir):
    model = make_model(state_dir, persist_states=False, snapshot_budget=1024)
    try:
        run_turn(model, [SYSTEM, ChatMessage(role="user", content="Hi.")], max_tokens=2)
        assert model.snapshots.items == []
        assert model.restore_system_snapshot() is False
    finally:
        model.close()


def test_a_captured_state_lives_in_its_own_mapping_and_restores_exactly(state_dir):
    import mmap

    from models.llama_state import capture as capture_state
    from models.llama_state import restore as restore_state

    model = make_model(state_dir, persist_states=False)
    try:
        prefill_only(model, [SYSTEM, ChatMessage(role="user", content="Name a fruit.")])
        tokens = model.stream_tokens()
        data = capture_state(model.llm)
        # Not a Python copy: a view of the anonymous mapping llama.cpp wrote into (no GIL-held memcpy).
        assert isinstance(data, memoryview) and isinstance(data.obj, mmap.mmap) and len(data) > 0
        model.llm.reset()
        prefill_only(model, [SYSTEM, ChatMessage(role="user", content="Something else entirely, please.")])
        next_token = model.llm.tokenize(b" apple", add_bos=False)[0]
        for state in (data, bytes(data)):  # the mapping, and a plain bytes copy of it
            assert restore_state(model.llm, state, tokens)
            assert model.stream_tokens() == tokens
            model.llm.eval([next_token])  # the restored context goes on exactly as the original would
            assert_same_logits(model.last_logits(), fresh_logits(tokens + [next_token]))
    finally:
        model.close()
