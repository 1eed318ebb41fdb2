"""Compaction on real llama.cpp models: a recorded session that overflows a 4,096-token context finishes its
task, on the embedded SmolLM2 and on a tiny qwen35 (hybrid) GGUF, and nothing of the history is read twice:
between compactions, tokens evaluated / tokens appended stays at 1.00 (≤ 1.05 asked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.approvals import ApprovalDecision, ApprovalRequest
from agent.core.events import AgentEvent, CompactionEvent, SummaryEvent, UsageEvent
from agent.core.loop import Limits
from agent.session.workspace import open_workspace
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.conftest import xml_call
from tests.engine.forced import ForcedTurns, json_call, ratio

WINDOW = 4096
SUMMARY = "Files: big.txt is a log, nothing to change; calc.py has the bug. State: fix add() in calc.py next."


class Approve:
    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True)


def log_lines(count: int) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    return [f"{i} {words[i % 8]} {words[(i * 3) % 8]} ok\n" for i in range(count)]


def log_file(model: LlamaCppModel, repo: Path, base: int) -> None:
    """A log whose Read result brings the conversation to ~80 % of the window: past the point where a
    compaction is due, with room left for the summary (each model's tokenizer counts it differently)."""
    sample = "".join(f"{n + 1:>6}\t{line}" for n, line in enumerate(log_lines(100)))
    per_line = len(model._tokenize(sample)) / 100  # noqa: SLF001
    (repo / "big.txt").write_text("".join(log_lines(int((WINDOW * 0.8 - base) / per_line))))


def run_forced(model: LlamaCppModel, repo: Path, turns: list[str], reasoning: bool | None = None) -> tuple[ForcedTurns, list[AgentEvent]]:
    events: list[AgentEvent] = []
    forced = ForcedTurns(model, turns, final="Fixed: add() now adds.")
    workspace = open_workspace(
        forced, repo, mode="auto-edit", approver=Approve(), sink=events.append, no_sandbox=True, watch=False,
        limits=Limits(context=WINDOW, max_steps=20, tool_output_tokens=WINDOW), save=False, reasoning=reasoning,
    )
    try:
        workspace.session.run("fix the bug in calc.py")
    finally:
        workspace.close()
    return forced, events


def check_session(forced: ForcedTurns, events: list[AgentEvent], repo: Path) -> None:
    summary = [e for e in events if isinstance(e, SummaryEvent)][-1]
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert summary.stop_reason == "finished", summary.message
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"  # the task, done on disk
    assert len(compactions) == 1 and compactions[0].summary == SUMMARY
    assert compactions[0].after_tokens < compactions[0].before_tokens
    usage = [e for e in events if isinstance(e, UsageEvent)]
    assert max(u.prompt_tokens + u.completion_tokens for u in usage) < WINDOW  # never past the window
    segments = forced.segments()
    assert len(segments) == 2, forced.counts  # one restart: the compaction's, from the system prompt's state
    for segment in segments:
        assert ratio(segment) <= 1.05, segment
    assert ratio(forced.counts) <= 1.05, forced.counts
    # After the restart, the stream is the saved system prompt + what the compacted conversation adds.
    restart = segments[1][0]
    assert restart.restored and restart.stream < compactions[0].before_tokens


def test_embedded_model_finishes_a_session_through_compaction(tmp_path: Path, repo: Path) -> None:
    turns = [
        json_call("Read", file_path="big.txt"),
        SUMMARY,
        json_call("Read", file_path="calc.py"),
        json_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    ]
    model = LlamaCppModel(embedded_model_path(), n_ctx=WINDOW, temperature=0.0, n_threads=1,
                          state_dir=tmp_path / "states", persist_states=False, draft="none")
    try:
        log_file(model, repo, base=700)  # ribbit's system prompt in SmolLM2's tokens, with the tools in JSON
        forced, events = run_forced(model, repo, turns)
    finally:
        model.close()
    check_session(forced, events, repo)


@pytest.fixture(scope="module")
def compact_qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny qwen35 whose tokenizer knows ribbit's prompts (tests/engine/tiny_qwen35.py), so that a 4K
    window holds a session as it would on FrogNano."""
    from tests.engine.tiny_qwen35 import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("compact-qwen35"), rich_vocab=True)


def test_tiny_qwen35_finishes_a_session_through_compaction(tmp_path: Path, repo: Path, compact_qwen35: Path) -> None:
    turns = [
        xml_call("Read", file_path="big.txt"),
        SUMMARY,
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    ]
    model = LlamaCppModel(compact_qwen35, n_ctx=WINDOW, temperature=0.0, n_threads=1,
                          state_dir=tmp_path / "states", persist_states=False, draft="none")
    try:
        assert model.recurrent  # the hybrid path: a re-read would be the only way back without states
        log_file(model, repo, base=1300)  # ribbit's system prompt and tools in this tokenizer
        forced, events = run_forced(model, repo, turns, reasoning=False)  # calls outside <think>
    finally:
        model.close()
    check_session(forced, events, repo)
