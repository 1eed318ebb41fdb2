"""Hole 4 (and the undo half of 8): undo never destroys work done after the agent's change, names
the file when it refuses, restores nothing then, and stays usable after file/folder swaps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.undo.journal import JournalError
from tests.conftest import git, tree_bytes, xml_call
from tests.safety.helpers import start, write_replay

ROOT = Path(__file__).resolve().parents[2]


def ribbit_undo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def run_session(repo: Path, tmp_path: Path, *commands: str) -> str:
    turns = [xml_call("Bash", command=c) for c in commands]
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", *turns, "done"))
    try:
        summary = workspace.session.run("go")
        assert summary.stop_reason == "finished"
        return workspace.journal.session_id
    finally:
        workspace.close()


def test_file_turned_into_a_folder_where_the_user_then_added_a_file(repo: Path, tmp_path: Path) -> None:
    sid = run_session(repo, tmp_path, "rm calc.py && mkdir calc.py && echo 'x = 1' > calc.py/__init__.py")
    (repo / "calc.py" / "mine.py").write_text("my later work\n")
    refused = ribbit_undo(sid, "--repo", str(repo))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "calc.py/mine.py" in refused.stderr and "nothing was restored" in refused.stderr
    assert (repo / "calc.py" / "mine.py").read_text() == "my later work\n"
    assert (repo / "calc.py" / "__init__.py").exists()
    (repo / "calc.py" / "mine.py").unlink()  # the user moves their file away: the undo goes through
    done = ribbit_undo(sid, "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_an_ignored_file_in_the_folder_also_stops_the_undo(repo: Path, tmp_path: Path) -> None:
    sid = run_session(repo, tmp_path, "rm calc.py && mkdir calc.py && echo 'x = 1' > calc.py/__init__.py")
    (repo / "calc.py" / "debug.log").write_text("ignored, but someone's\n")  # *.log is ignored
    refused = ribbit_undo(sid, "--repo", str(repo))
    assert refused.returncode == 1 and "calc.py/debug.log" in refused.stderr
    assert (repo / "calc.py" / "debug.log").read_text() == "ignored, but someone's\n"


def test_folder_turned_into_a_file_and_back(repo: Path, tmp_path: Path) -> None:
    (repo / "docs").mkdir()
    (repo / "docs" / "a.md").write_text("# a\n")
    (repo / "docs" / "b.md").write_text("# b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs")
    before = tree_bytes(repo)
    sid = run_session(repo, tmp_path, "rm -r docs && echo 'now a file' > docs")
    (repo / "docs").write_text("the user edited the file afterwards\n")
    refused = ribbit_undo(sid, "--repo", str(repo))
    assert refused.returncode == 1 and "docs changed after" in refused.stderr
    (repo / "docs").write_text("now a file\n")
    done = ribbit_undo(sid, "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    assert tree_bytes(repo) == before


def test_a_file_the_agent_hid_with_gitignore_then_the_user_edited(repo: Path, tmp_path: Path) -> None:
    (repo / "notes.txt").write_text("v1\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    sid = run_session(repo, tmp_path, "echo v2-agent > notes.txt && echo notes.txt >> .gitignore")
    (repo / "notes.txt").write_text("v3, the user's\n")
    refused = ribbit_undo(sid, "--repo", str(repo))
    assert refused.returncode == 1 and "notes.txt" in refused.stderr
    assert (repo / "notes.txt").read_text() == "v3, the user's\n"
    assert (repo / ".gitignore").read_text().endswith("notes.txt\n")  # nothing restored at all


def test_an_untracked_file_the_agent_hid_is_still_journaled_and_undone(repo: Path, tmp_path: Path) -> None:
    (repo / "scratch.txt").write_text("mine\n")
    before = tree_bytes(repo)
    sid = run_session(repo, tmp_path, "echo agent > scratch.txt", "echo scratch.txt >> .gitignore && echo more >> scratch.txt")
    done = ribbit_undo(sid, "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    assert tree_bytes(repo) == before


def test_undo_last_of_a_path_that_became_a_folder(repo: Path, tmp_path: Path) -> None:
    """Was a GitCommandError traceback: undo of a path that became a tree."""
    workspace, _ = start(repo, write_replay(
        tmp_path / "r.jsonl", xml_call("Bash", command="rm test_calc.py && mkdir -p test_calc.py/deeper && echo 1 > test_calc.py/deeper/x"), "done",
    ))
    try:
        workspace.session.run("go")
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert result.restored == ["test_calc.py"] and result.deleted == ["test_calc.py/deeper/x"]
    assert (repo / "test_calc.py").read_text().startswith("from calc import add")


def test_refusal_restores_nothing_even_when_other_files_were_fine(repo: Path, tmp_path: Path) -> None:
    workspace, _ = start(repo, write_replay(
        tmp_path / "r.jsonl", xml_call("Bash", command="echo a >> calc.py && echo b >> test_calc.py && echo c > new.txt"), "done",
    ))
    try:
        workspace.session.run("go")
        (repo / "test_calc.py").write_text("# the user's rewrite\n")
        snapshot = tree_bytes(repo)
        with pytest.raises(JournalError, match="test_calc.py"):
            workspace.undo_last()
        assert tree_bytes(repo) == snapshot
    finally:
        workspace.close()
