"""`/commit`'s git side on real repositories: exactly the session's files, the user's index and work kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.git import GitError, changed_from_head, commit_only, find_repository
from tests.conftest import git


def status(root: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "status", "--porcelain=v1", "-uall"], check=True,
                         capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if line)


def test_commits_only_the_named_paths_and_leaves_the_index_right(repo: Path) -> None:
    (repo / "README.md").write_text("readme\n")
    (repo / "gone.txt").write_text("to delete\n")
    git(repo, "add", "README.md", "gone.txt")
    git(repo, "commit", "-q", "-m", "more")
    # The user's own work: one file staged, one changed and not staged.
    (repo / "README.md").write_text("readme, staged by the user\n")
    git(repo, "add", "README.md")
    (repo / "test_calc.py").write_text("# the user's unstaged edit\n")
    # The session's: an edit, a new file, a deletion.
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "new.py").write_text("NEW = 1\n")
    (repo / "gone.txt").unlink()
    gitrepo = find_repository(repo)
    assert gitrepo is not None
    paths = ["calc.py", "gone.txt", "new.py", "untouched.py"]
    assert changed_from_head(gitrepo, paths) == ["calc.py", "gone.txt", "new.py"]
    before = git(repo, "rev-parse", "HEAD").strip()
    commit = commit_only(gitrepo, ["calc.py", "gone.txt", "new.py"], "Fix add\n\nIt subtracted.\n")
    assert git(repo, "rev-parse", "HEAD").strip() == commit
    assert git(repo, "rev-parse", "HEAD~1").strip() == before
    assert git(repo, "log", "-1", "--format=%B").strip() == "Fix add\n\nIt subtracted."
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Test <test@example.com>"
    assert sorted(git(repo, "show", "--name-status", "--format=", "HEAD").split("\n")) == [
        "", "A\tnew.py", "D\tgone.txt", "M\tcalc.py"]
    # The user's staged file stays staged (and out of the commit), the unstaged one unstaged; the
    # session's files are clean.
    assert status(repo) == [" M test_calc.py", "M  README.md"]
    assert git(repo, "show", ":README.md") == "readme, staged by the user\n"


def test_refuses_when_head_moved_or_nothing_changed(repo: Path) -> None:
    gitrepo = find_repository(repo)
    assert gitrepo is not None
    with pytest.raises(GitError, match="nothing to commit"):
        commit_only(gitrepo, ["calc.py"], "nothing\n")
    assert changed_from_head(gitrepo, ["calc.py"]) == []


def test_first_commit_on_an_unborn_branch(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "u@example.com")
    git(root, "config", "user.name", "U")
    (root / "a.py").write_text("a = 1\n")
    (root / "b.py").write_text("b = 1\n")
    gitrepo = find_repository(root)
    assert gitrepo is not None
    commit_only(gitrepo, ["a.py"], "Add a\n")
    assert git(root, "log", "--format=%s").strip() == "Add a"
    assert status(root) == ["?? b.py"]


def test_a_head_that_moved_meanwhile_is_not_overwritten(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.git as gitmodule

    built = gitmodule._tree_with

    def and_someone_commits(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = built(*args, **kwargs)
        git(repo, "commit", "-q", "--allow-empty", "-m", "the user's commit, meanwhile")
        return found

    monkeypatch.setattr(gitmodule, "_tree_with", and_someone_commits)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    gitrepo = find_repository(repo)
    assert gitrepo is not None
    with pytest.raises(GitError, match="update-ref"):
        commit_only(gitrepo, ["calc.py"], "Fix add\n")
    assert git(repo, "log", "-1", "--format=%s").strip() == "the user's commit, meanwhile"


def test_odd_names_links_and_modes(repo: Path) -> None:
    odd = "new\nline name.txt"
    (repo / odd).write_text("odd\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("calc.py")
    gitrepo = find_repository(repo)
    assert gitrepo is not None
    commit_only(gitrepo, [odd, "run.sh", "link"], "Odd ones\n")
    listed = git(repo, "ls-tree", "-z", "HEAD").split("\0")
    assert f"100644 blob {git(repo, 'rev-parse', 'HEAD:' + odd).strip()}\t{odd}" in listed
    assert any(e.startswith("100755 ") and e.endswith("\trun.sh") for e in listed)
    assert any(e.startswith("120000 ") and e.endswith("\tlink") for e in listed)
    assert git(repo, "show", "HEAD:link") == "calc.py"
    assert status(repo) == []
