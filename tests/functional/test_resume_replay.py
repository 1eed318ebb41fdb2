"""Saved sessions through `ribbit run` with the replay model: `--continue` goes on with the conversation, the
replay position and the undo journal; a corrupt, foreign or tampered file is one line, never a crash; the
agent's sandbox cannot see or change them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.session.history import journaled_sessions
from agent.undo.journal import Journal
from agent.paths import state_home
from agent.session.store import SESSION_FILE, SessionStore
from tests.conftest import xml_call
from tests.functional.helpers import ribbit_run

FIRST = [
    xml_call("Read", file_path="calc.py"),
    xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    "Fixed: add() now adds.",
]
SECOND = [
    xml_call("Write", file_path="NOTES.md", content="add() fixed\n"),
    "Noted.",
]


def session_id(stderr: str) -> str:
    found = re.search(r"ribbit: session (\S+) ", stderr)
    assert found, stderr
    return found.group(1)


def test_continue_goes_on_with_the_conversation_replay_and_journal(capsys, tmp_path, repo, replay_file):
    replay = replay_file(*FIRST, *SECOND)
    first = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit")
    assert first.code == 0, first.stderr
    old_tokens = first.of_type("usage")[-1]["prompt_tokens"]
    second = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit", "--continue", task="write a note")
    assert second.code == 0, second.stderr
    assert session_id(second.stderr) == session_id(first.stderr)  # the same session, the same journal
    assert (repo / "NOTES.md").read_text() == "add() fixed\n"  # the replay went on from where it was
    # The second task changed one file: the resumed journal's fresh index does not count the others.
    assert second.of_type("summary")[-1]["files_changed"] == ["NOTES.md"]
    usage = second.of_type("usage")
    # Nothing of the old conversation is evaluated again: only the new prompt (a few tokens).
    assert usage[0]["cached_tokens"] >= old_tokens and usage[0]["evaluated_tokens"] < 20, usage[0]
    # The conversation the model continues is the old one plus the new task.
    sessions = SessionStore(repo).list()
    assert len(sessions) == 1
    contents = [m.content for m in sessions[0].messages]
    assert "fix the bug" in contents and "write a note" in contents and "Noted." in contents
    assert [t.prompt for t in sessions[0].tasks] == ["fix the bug", "write a note"]
    # One journal: undo of the whole session takes back both tasks' files.
    journal = Journal(repo)
    assert [s.session_id for s in journaled_sessions(repo)[0]] == [session_id(first.stderr)]
    journal.undo_session(session_id(first.stderr))
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n" and not (repo / "NOTES.md").exists()


def test_resume_with_another_model_reads_the_conversation_again_once(capsys, tmp_path, repo, replay_file):
    first = ribbit_run(capsys, tmp_path, repo, replay_file(*FIRST), "--mode", "auto-edit")
    other = replay_file(*SECOND, xml_call("Read", file_path="NOTES.md"), "Done.", name="other.jsonl")
    sid = session_id(first.stderr)
    second = ribbit_run(capsys, tmp_path, repo, other, "--mode", "auto-edit", "--resume", sid, task="write a note")
    assert second.code == 0, second.stderr
    assert "read again once" in second.stderr
    usage = second.of_type("usage")
    assert usage[0]["cached_tokens"] == 0 and usage[0]["evaluated_tokens"] > first.of_type("usage")[-1]["prompt_tokens"]
    assert all(u["cached_tokens"] > 0 for u in usage[1:])  # once: the turns after it extend what was read


def test_a_saved_state_that_was_evicted_or_tampered_with_costs_one_re_read(capsys, tmp_path, repo, replay_file):
    replay = replay_file(*FIRST, *SECOND)
    first = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit")
    folder = SessionStore(repo).folder / session_id(first.stderr)
    (folder / "latest.json").write_text('{"version": 1, "identity": "someone else", "n_tokens": 5, "consumed": ["x"]}')
    second = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit", "--continue", task="write a note")
    assert second.code == 0 and "another model" in second.stderr, second.stderr
    assert second.of_type("usage")[0]["cached_tokens"] == 0


def test_corrupt_foreign_and_bad_ids_are_one_line_errors(capsys, tmp_path, repo, replay_file):
    replay = replay_file(*FIRST)
    nothing = ribbit_run(capsys, tmp_path, repo, replay, "--continue")
    assert nothing.code == 1 and "no saved session" in nothing.stderr and "Traceback" not in nothing.stderr
    first = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit")
    sid = session_id(first.stderr)
    path = SessionStore(repo).folder / sid / SESSION_FILE
    saved = path.read_text()
    for bad in ["{not json", json.dumps({"version": 1, "session_id": sid}), "[" * 100_000,
                saved.replace('"role":"system"', '"role":"wizard"'), saved.replace(str(repo.resolve()), "/elsewhere")]:
        path.write_text(bad)
        result = ribbit_run(capsys, tmp_path, repo, replay, "--resume", sid)
        assert result.code == 1, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("ribbit: error: saved session") and "Traceback" not in result.stderr, result.stderr
    for bad_id in ["../../etc", "a/b", "-x", "x" * 200, "\x1b[2J"]:
        result = ribbit_run(capsys, tmp_path, repo, replay, f"--resume={bad_id}")
        assert result.code == 1 and "Traceback" not in result.stderr
        assert "is not a session ID" in result.stderr and "\x1b" not in result.stderr, result.stderr


def test_the_sandbox_hides_saved_sessions_from_the_agent(capsys, tmp_path, repo, replay_file):
    first = ribbit_run(capsys, tmp_path, repo, replay_file(*FIRST), "--mode", "auto-edit")
    path = SessionStore(repo).folder / session_id(first.stderr) / SESSION_FILE
    saved = path.read_bytes()
    snoop = xml_call("Bash", command=f"cat '{path}'; echo overwritten > '{path}'; ls -A '{state_home()}'")
    second = ribbit_run(capsys, tmp_path, repo, replay_file(snoop, "Done.", name="snoop.jsonl"),
                        "--mode", "full-auto", task="look around")
    assert second.code == 0, second.stderr
    output = second.tool_results()[0]
    assert "fix the bug" not in output and '"session_id"' not in output  # nothing of it readable
    assert path.read_bytes() == saved  # nor writable


def test_a_session_is_saved_as_it_goes(capsys, tmp_path, repo, replay_file):
    """Interrupted or not, what happened so far is on disk (here: the run ends at its step limit)."""
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*FIRST), "--mode", "auto-edit", "--max-steps", "2")
    assert result.code == 3
    saved = SessionStore(repo).latest()
    assert [m.role for m in saved.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert saved.state == "latest.state" and (SessionStore(repo).folder / saved.session_id / saved.state).is_file()
    assert Path(saved.root) == repo.resolve()


def test_a_resumed_session_edits_what_it_read_before_unless_the_file_changed_since(capsys, tmp_path, repo, replay_file):
    # Like Claude Code's read-before-edit rule, across a resume: the conversation still holds the file as
    # it was read, so an Edit needs no new Read while the file on disk is exactly that.
    first = ribbit_run(capsys, tmp_path, repo, replay_file(*FIRST), "--mode", "auto-edit")
    assert first.code == 0, first.stderr
    edit = xml_call("Edit", file_path="calc.py", old_string="a + b", new_string="b + a")
    second = ribbit_run(capsys, tmp_path, repo, replay_file(edit, "Done.", name="edit.jsonl"),
                        "--mode", "auto-edit", "--continue", task="swap them")
    assert second.code == 0, second.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return b + a\n", second.tool_results()
    # Someone changes the file between sessions: the saved read no longer holds.
    (repo / "calc.py").write_text("def add(a, b):\n    return b + a  # mine\n")
    third = ribbit_run(capsys, tmp_path, repo, replay_file(
        xml_call("Edit", file_path="calc.py", old_string="b + a", new_string="a + b"), "Done.", name="again.jsonl"),
        "--mode", "auto-edit", "--continue", task="swap back")
    assert third.code == 0, third.stderr
    assert "modified since read" in third.tool_results()[0]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return b + a  # mine\n"


def test_reads_in_a_tampered_session_file_grant_nothing_outside_the_repository(capsys, tmp_path, repo, replay_file):
    first = ribbit_run(capsys, tmp_path, repo, replay_file(*FIRST), "--mode", "auto-edit")
    path = SessionStore(repo).folder / session_id(first.stderr) / SESSION_FILE
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    saved = json.loads(path.read_text())
    stamp = dict(saved["reads"]["calc.py"])
    for name, target in [(str(outside), outside), ("../outside.txt", outside)]:
        info = target.stat()
        saved["reads"][name] = {**stamp, "mtime_ns": info.st_mtime_ns, "size": info.st_size}
    path.write_text(json.dumps(saved))
    calls = [xml_call("Edit", file_path=name, old_string="keep", new_string="lost")
             for name in (str(outside), "../outside.txt")]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*calls, "Done.", name="tamper.jsonl"),
                        "--mode", "auto-edit", "--continue", task="edit")
    assert result.code == 0, result.stderr
    assert all("outside the repository" in output for output in result.tool_results()), result.tool_results()
    assert outside.read_text() == "keep\n"
