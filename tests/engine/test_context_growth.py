"""A context that grows with the conversation: a session starts with a small context and, when the next turn
would not fit, moves its state into a larger one (models.llama_runtime.LlamaRuntime.resize) — nothing is read
again, and the tokens are the ones a session with the largest context from the start produces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.core.approvals import ApprovalDecision, ApprovalRequest
from agent.core.events import AgentEvent, UsageEvent
from agent.core.loop import Limits
from agent.session.transcript import TranscriptWriter
from agent.session.workspace import open_workspace
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from models.memory import plan_memory

START, LARGEST = 4096, 8192  # the tiny qwen35 spends ~3,300 tokens on ribbit's system prompt: it starts at 4,096
SMALL_START, SMALL_LARGEST = 2048, 4096  # SmolLM2 spends ~750: 2,048 holds the first task, and half the tokens to read
TURN_TOKENS = 24


class Approve:
    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True)


def load(path: Path, start: int, tmp_path: Path, draft: str = "none", temperature: float = 0.8,
         largest: int = LARGEST) -> LlamaCppModel:
    plan = plan_memory(path, largest, start_context=start, rollback_tokens=8 if draft != "none" else 0)
    return LlamaCppModel(path, plan=plan, temperature=temperature, seed=7, n_threads=2, draft=draft,  # type: ignore[arg-type]
                         persist_states=False, state_dir=tmp_path / "states")


def long_task(model: LlamaCppModel, tokens: int) -> str:
    """A task of about `tokens` tokens in this model's tokenizer."""
    line = "Also check that function_{i} in module_{i}.py returns the value it was given.\n"
    text = "Please review these functions.\n"
    while model.count_tokens(text) < tokens:
        text += "".join(line.format(i=i) for i in range(len(text.splitlines()), len(text.splitlines()) + 20))
    return text


def two_tasks(model: LlamaCppModel, repo: Path, second: str | None, transcript: Path,
              start: int = START, largest: int = LARGEST) -> tuple[list[AgentEvent], str]:
    """Two tasks in one session; the second (None: one that brings the conversation ~300 tokens past `start`)
    is returned. The events of the first task come before a marker usage event of step -1."""
    events: list[AgentEvent] = []
    writer = TranscriptWriter(transcript)

    def sink(event: AgentEvent) -> None:
        events.append(event)
        writer(event)

    workspace = open_workspace(
        model, repo, mode="auto-edit", approver=Approve(), sink=sink, no_sandbox=True, watch=False,
        limits=Limits(context=largest, max_steps=1, turn_tokens=TURN_TOKENS), save=False,
    )
    try:
        workspace.session.run("Say hi.")
        events.append(UsageEvent(step=-1, prompt_tokens=0, cached_tokens=0, evaluated_tokens=0, completion_tokens=0,
                                 prefill_s=0, decode_s=0))
        second = second or long_task(model, start - model.context_used() + 300)
        workspace.session.run(second)
    finally:
        workspace.close()
        writer.close()
    return events, second


@pytest.fixture(params=["embedded", "qwen35"])
def sized_model(request: pytest.FixtureRequest) -> tuple[Path, int, int]:
    """(GGUF, the context it starts with, the largest it may grow to)."""
    if request.param == "embedded":
        return embedded_model_path(), SMALL_START, SMALL_LARGEST
    return request.getfixturevalue("thinking_qwen35"), START, LARGEST  # the hybrid path: its recurrent state moves too


def test_a_second_task_that_outgrows_the_start_grows_the_context_without_reading_again(
    sized_model: tuple[Path, int, int], repo: Path, tmp_path: Path
) -> None:
    model_path, start, largest = sized_model
    growing = load(model_path, start, tmp_path, largest=largest)
    try:
        assert growing.info.context_allocated == start and growing.info.context_length == largest
        events, second = two_tasks(growing, repo, None, tmp_path / "growing.jsonl", start, largest)
        grown_stream, grown_stats = growing.stream_tokens(), growing.stats
        assert growing.info.context_allocated is not None and growing.info.context_allocated > start
    finally:
        growing.close()
    fixed = load(model_path, largest, tmp_path, largest=largest)
    try:
        assert fixed.info.context_allocated == largest
        two_tasks(fixed, repo, second, tmp_path / "fixed.jsonl", start, largest)
        fixed_stream, fixed_stats = fixed.stream_tokens(), fixed.stats
    finally:
        fixed.close()

    marker = next(i for i, e in enumerate(events) if isinstance(e, UsageEvent) and e.step == -1)
    records = [json.loads(line) for line in (tmp_path / "growing.jsonl").read_text().splitlines()]
    growths = [r for r in records if r["type"] == "context"]
    assert growths and growths[0]["from"] == start and growths[-1]["to"] > start and growths[0]["seconds"] >= 0
    assert not [e for e in events[:marker] if e.type == "context"]  # the first task fitted the start
    assert [e for e in events[marker:] if e.type == "context"]  # the second outgrew it
    assert not [r for r in (json.loads(x) for x in (tmp_path / "fixed.jsonl").read_text().splitlines()) if r["type"] == "context"]
    assert len(grown_stream) > start
    # Nothing read twice: every token of the stream was evaluated once, the same as with the largest context.
    assert grown_stats.evaluated == len(grown_stream) == fixed_stats.evaluated
    assert grown_stats.restored == 0
    usage = [r for r in records if r["type"] == "usage"]
    # A turn that ended at its end-of-turn token (fewer than TURN_TOKENS) counts that token as a completion
    # token, but it enters the stream with the turn's close, read with the next message (or never, after
    # the last turn): one token per such turn is counted and not (yet) evaluated as part of that turn.
    stopped = sum(1 for u in usage if 0 < u["completion_tokens"] < TURN_TOKENS)
    assert sum(u["evaluated_tokens"] + u["completion_tokens"] for u in usage) - stopped == len(grown_stream)
    assert grown_stream == fixed_stream  # the same tokens, sampled at temperature 0.8


def test_a_turn_that_outgrows_the_context_grows_it_while_decoding(
    tmp_path: Path, thinking_qwen35: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long turn grows the context between two decodes, and samples what the largest context would."""
    import models.llama_backend as backend
    from models.base import ContextGrown, GenerationRequest, TextChunk
    from models.chat import ChatMessage

    monkeypatch.setattr(backend, "TURN_ROOM", 16)  # the turn starts in the small context and outgrows it
    messages = [ChatMessage(role="system", content="You write."), ChatMessage(role="user", content="Write a long story.")]
    outputs = []
    for start in (512, LARGEST):
        model = load(thinking_qwen35, start, tmp_path)
        monkeypatch.setattr(model, "_is_stop", lambda token: False)  # a random model would stop at random
        try:
            chunks = list(model.generate(GenerationRequest(messages=messages, tools=[], max_tokens=700)))
            grown = [c for c in chunks if isinstance(c, ContextGrown)]
            text = "".join(c.text for c in chunks if isinstance(c, TextChunk))
            outputs.append((text, model.stream_tokens(), grown, model.stats.evaluated))
        finally:
            model.close()
    (text, stream, grown, evaluated), (fixed_text, fixed_stream, fixed_grown, _) = outputs
    assert not fixed_grown
    assert grown and grown[0].before == 512 and len(stream) > 512 + 100
    assert evaluated == len(stream)
    assert stream == fixed_stream and text == fixed_text


def test_growing_keeps_drafting_and_the_mtp_head_working(
    tmp_path: Path, tiny_qwen35: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With lookup drafts, their rollback snapshots and the MTP head's own context, a growth in the middle of
    a turn moves every state over: the turn goes on, each kept token evaluated once."""
    from models.base import ContextGrown, GenerationRequest
    from models.chat import ChatMessage

    import models.llama_backend as backend

    monkeypatch.setattr(backend, "TURN_ROOM", 16)
    model = load(tiny_qwen35, 512, tmp_path, draft="auto", temperature=0.0)
    monkeypatch.setattr(model, "_is_stop", lambda token: False)
    try:
        assert model.drafting.mtp and model.llm.mtp is not None
        line = "the same line of text again and again\n"
        messages = [ChatMessage(role="user", content="Repeat: " + line * 5)]
        prompt = model.prompt_tokens(messages, [])
        chunks = list(model.generate(GenerationRequest(messages=messages, tools=[], max_tokens=900)))
        grown = [c for c in chunks if isinstance(c, ContextGrown)]
        assert prompt + 16 < 512 and grown and grown[0].before == 512  # grown while decoding
        assert model.llm.n_ctx() > 512 and model.llm.mtp is not None and model.llm.mtp.n_tokens == model.llm.n_tokens
        assert model.stats.evaluated == len(model.stream_tokens()) > 512
        assert model.stats.lookup.proposals + model.stats.mtp.proposals > 0
    finally:
        model.close()
