"""Rewind on a real hybrid model (a tiny qwen35 GGUF with the Qwen3.5 template): the files come back byte for
byte from the journal, the conversation from the state saved on disk at that prompt, and the next turn's
prompt is token for token the one it was — without reading the conversation again."""

from __future__ import annotations

from pathlib import Path

from agent.core.approvals import ApprovalDecision, ApprovalRequest
from agent.core.events import AgentEvent, UsageEvent
from agent.core.loop import Limits
from agent.session.workspace import open_workspace
from models.llama_backend import LlamaCppModel
from tests.conftest import xml_call
from tests.engine.forced import ForcedTurns

SECOND = [
    xml_call("Read", file_path="notes.txt"),
    xml_call("Edit", file_path="notes.txt", old_string="one", new_string="two"),
    "Now two.",
]


class Approve:
    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True)


def test_rewind_restores_files_and_the_token_stream_without_a_re_read(tmp_path: Path, repo: Path, thinking_qwen35: Path) -> None:
    model = LlamaCppModel(thinking_qwen35, n_ctx=8192, temperature=0.0, n_threads=1, draft="none",
                          state_dir=tmp_path / "states")
    forced = ForcedTurns(model, [xml_call("Write", file_path="notes.txt", content="one\n"), "Wrote one.", *SECOND])
    usage: list[UsageEvent] = []

    def sink(event: AgentEvent) -> None:
        if isinstance(event, UsageEvent):
            usage.append(event)

    workspace = open_workspace(forced, repo, mode="auto-edit", approver=Approve(), sink=sink, no_sandbox=True,
                               watch=False, limits=Limits(context=8192), reasoning=False, save=True)
    try:
        assert model.recurrent
        workspace.session.run("write one")
        after_first = (repo / "notes.txt").read_bytes()
        first_turns = len(usage)
        workspace.session.run("make it two")
        prompt = usage[first_turns].prompt_tokens
        stream_then = model.stream_tokens()[:prompt]  # the second task's first prompt, token for token
        assert (repo / "notes.txt").read_text() == "two\n"

        model.snapshots.clear()  # no help from memory: the state saved on disk at that prompt must do
        line = workspace.rewind(1)
        assert "restored notes.txt" in line and "conversation back to before prompt 2" in line
        assert (repo / "notes.txt").read_bytes() == after_first  # byte for byte
        evaluated_before = model.stats.evaluated

        forced.turns += SECOND  # the same task again, the same answers
        workspace.session.run("make it two")
        again = usage[-len(SECOND)]
        assert again.prompt_tokens == prompt and model.stream_tokens()[:prompt] == stream_then
        # Only the new prompt was read: what the stream held at the rewind point came from the saved state.
        assert again.cached_tokens == len(stream_then) - again.evaluated_tokens
        assert again.evaluated_tokens < 40
        assert model.stats.evaluated - evaluated_before == sum(u.evaluated_tokens + u.completion_tokens for u in usage[-len(SECOND):])
        assert (repo / "notes.txt").read_text() == "two\n"
    finally:
        workspace.close()
        model.close()
