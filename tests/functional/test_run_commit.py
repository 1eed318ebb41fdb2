"""`ribbit run --commit`: the session's files committed headless with the model's drafted message."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, xml_call
from tests.functional.helpers import ribbit_run

FIX = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")


def porcelain(root: Path) -> list[str]:
    return sorted(subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True,
                                 check=True).stdout.splitlines())


def test_run_commit_commits_only_the_session_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, repo: Path,
                                                   replay_file) -> None:  # type: ignore[no-untyped-def]
    (repo / "mine.txt").write_text("the user's, staged\n")
    git(repo, "add", "mine.txt")
    model = replay_file(xml_call("Read", file_path="calc.py"), FIX, "Fixed.", "```\nFix add: add, not subtract\n```")
    result = ribbit_run(capsys, tmp_path, repo, model, "--mode", "auto-edit", "--commit")
    assert result.code == 0, result.stderr
    assert git(repo, "log", "-1", "--format=%s").strip() == "Fix add: add, not subtract"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["calc.py"]
    head = git(repo, "rev-parse", "--short=12", "HEAD").strip()
    assert f"ribbit: committed {head} 'Fix add: add, not subtract': calc.py" in result.stderr
    assert porcelain(repo) == ["A  mine.txt"]
    # The draft request and the reply are in the conversation like any turn.
    users = [e["message"]["content"] for e in result.of_type("message") if e["message"]["role"] == "user"]
    assert users[-1].startswith("ribbit: the user is committing") and "- init" in users[-1]


def test_run_commit_refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, repo: Path,
                             replay_file) -> None:  # type: ignore[no-untyped-def]
    before = git(repo, "rev-parse", "HEAD")
    result = ribbit_run(capsys, tmp_path, repo, replay_file("Nothing to do."), "--commit")
    assert result.code == 0
    assert "ribbit: not committed: nothing to commit" in result.stderr
    result = ribbit_run(capsys, tmp_path, repo, replay_file("Planned."), "--mode", "plan", "--commit")
    assert result.code == 2 and "--commit: plan mode cannot commit" in result.stderr
    assert git(repo, "rev-parse", "HEAD") == before


def test_run_commit_after_continue_commits_the_earlier_runs_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, repo: Path, replay_file,  # type: ignore[no-untyped-def]
) -> None:
    first = replay_file(xml_call("Read", file_path="calc.py"), FIX, "Fixed.", name="first.jsonl")
    assert ribbit_run(capsys, tmp_path, repo, first, "--mode", "auto-edit").code == 0
    (repo / "mine.txt").write_text("the user's, between the runs\n")
    second = replay_file("Nothing more to do.", "Fix add", name="second.jsonl")
    result = ribbit_run(capsys, tmp_path, repo, second, "--mode", "auto-edit", "--continue", "--commit",
                        task="commit it")
    assert result.code == 0, result.stderr
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == ["Fix", "add", "calc.py"]
    assert porcelain(repo) == ["?? mine.txt"]
