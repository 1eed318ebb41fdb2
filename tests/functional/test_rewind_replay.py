"""Rewind through the Workspace API with the replay model: past a compaction and a /clear, files only or
conversation only, and a one-line refusal (nothing changed) when the state saved at that prompt is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.approvals import ApprovalDecision, ApprovalRequest
from agent.session.store import SessionError, SessionStore
from agent.session.workspace import Workspace, open_workspace
from models.replay import ReplayModel
from tests.conftest import xml_call


class Approve:
    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True)


def workspace(repo: Path, replay: Path) -> Workspace:
    return open_workspace(ReplayModel(replay), repo, mode="auto-edit", approver=Approve(), sink=lambda e: None,
                          no_sandbox=True, watch=False, save=True)


TURNS = [
    xml_call("Write", file_path="notes.txt", content="one\n"), "Wrote one.",
    "Summary: notes.txt holds one.",  # the /compact between the tasks
    xml_call("Read", file_path="notes.txt"),
    xml_call("Edit", file_path="notes.txt", old_string="one", new_string="two"), "Now two.",
]


def test_rewind_past_a_compaction_and_a_clear(repo: Path, replay_file) -> None:
    ws = workspace(repo, replay_file(*TURNS))
    try:
        ws.session.run("write one")
        first_conversation = list(ws.session.messages)
        ws.compact()
        ws.session.run("make it two")
        del ws.session.messages[1:]  # the TUI's /clear
        ws.session.run("anything else?")
        assert ws.prompts() == ["write one", "make it two", "anything else?"]
        line = ws.rewind(1)  # back to before "make it two": the compacted conversation, the files as then
        assert (repo / "notes.txt").read_text() == "one\n"
        assert [m.role for m in ws.session.messages] == ["system", "user"]
        assert "Summary: notes.txt holds one." in ws.session.messages[1].content
        assert "conversation back to before prompt 2" in line
        ws.rewind(0, files=False)  # the conversation alone: to before the first prompt
        assert ws.session.messages == first_conversation[:1]
        assert (repo / "notes.txt").read_text() == "one\n"  # files untouched
    finally:
        ws.close()
    saved = SessionStore(repo).latest()  # what is on disk reads back, rewinds included
    assert saved.tasks == [] and len(saved.epochs) >= 1


def test_a_conversation_rewind_without_its_saved_state_is_refused_and_changes_nothing(repo: Path, replay_file) -> None:
    ws = workspace(repo, replay_file(*TURNS[:2], *TURNS[3:]))
    try:
        ws.session.run("write one")
        ws.session.run("make it two")
        assert ws.saved is not None
        task = ws.saved.recorder.record.tasks[1]
        assert task.state is not None
        ws.saved.recorder.state_path(task.state).with_suffix(".json").unlink()  # evicted
        messages = list(ws.session.messages)
        with pytest.raises(SessionError) as refused:
            ws.rewind(1)
        assert "cannot rewind the conversation" in str(refused.value) and "\n" not in str(refused.value)
        assert ws.session.messages == messages and (repo / "notes.txt").read_text() == "two\n"
        ws.rewind(1, conversation=False)  # the files alone can still go back
        assert (repo / "notes.txt").read_text() == "one\n" and ws.session.messages == messages
    finally:
        ws.close()
