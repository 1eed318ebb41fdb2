"""One session record (issue 42): the session store lists every session a journal holds, saved or not;
the journal is given the session's ID and keeps only snapshots. Checked where it lands: files on disk,
what `ribbit undo` lists and undoes."""

from __future__ import annotations

from pathlib import Path

from agent.session.history import journaled_sessions, undo_session
from agent.session.store import SessionStore
from agent.undo.journal import Journal
from tests.conftest import tree_bytes, xml_call
from tests.safety.helpers import start, write_replay


def test_an_unsaved_session_is_listed_and_undone_through_the_store(repo: Path, tmp_path: Path) -> None:
    original = tree_bytes(repo)
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path="new.txt", content="n\n"), "done"), watch=False)
    try:
        workspace.run("go")
        session_id = workspace.session_id
    finally:
        workspace.close()
    assert SessionStore(repo).list() == []  # not saved: nothing to resume
    listed, _kind = journaled_sessions(repo)
    assert [(s.session_id, s.steps, s.files) for s in listed] == [(session_id, 1, ["new.txt"])]
    result = undo_session(repo)  # no ID: the latest listed one
    assert result.session_id == session_id and result.deleted == ["new.txt"]
    assert tree_bytes(repo) == original
    assert journaled_sessions(repo)[0][0].reverted


def test_a_journal_the_store_does_not_know_is_not_listed_but_undone_by_its_id(repo: Path) -> None:
    journal = Journal(repo, "20250101-000000-000abc")  # as an earlier ribbit left it: refs, no store entry
    journal.snapshot("start")
    (repo / "calc.py").write_text("changed\n")
    journal.snapshot("step 1")
    assert journaled_sessions(repo)[0] == []
    result = undo_session(repo, "20250101-000000-000abc")
    assert result.restored == ["calc.py"] and (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_a_resumed_session_keeps_its_id_and_its_journal(repo: Path, tmp_path: Path) -> None:
    from agent.session import RejectAll, open_workspace
    from models.backends import load_model

    first = write_replay(tmp_path / "a.jsonl", xml_call("Write", file_path="a.txt", content="a\n"), "done")
    workspace = open_workspace(load_model(f"replay:{first}"), repo, mode="full-auto", approver=RejectAll(), sink=lambda e: None,
                               watch=False, no_sandbox=True, save=True)
    try:
        workspace.run("first")
        session_id = workspace.session_id
    finally:
        workspace.close()
    second = write_replay(tmp_path / "b.jsonl", xml_call("Write", file_path="b.txt", content="b\n"), "done")
    resumed = open_workspace(load_model(f"replay:{second}"), repo, mode="full-auto", approver=RejectAll(), sink=lambda e: None,
                             watch=False, no_sandbox=True, resume=SessionStore(repo).latest())
    try:
        assert resumed.session_id == session_id
        resumed.run("second")
    finally:
        resumed.close()
    assert SessionStore(repo).session_ids() == [session_id]
    undo_session(repo, session_id)  # one journal: both tasks' files go
    assert not (repo / "a.txt").exists() and not (repo / "b.txt").exists()
