"""Hole 2: undo, review and apply never write through a link: not out of the repository, not into
`.git/`, whether the link is the file itself or any folder above it. Real sessions (replay model,
bubblewrap); outcomes checked on disk, outside the repository and in `.git/hooks`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent.fs import ApplyError, atomic_write
from agent.undo.journal import JournalError
from agent.session.review import ReviewSession
from tests.conftest import git, xml_call
from tests.safety.helpers import HookedReplay, Recorder, start, write_replay

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def outside() -> Path:
    """A folder outside the repository (and outside /tmp, which the sandbox replaces)."""
    folder = Path(tempfile.mkdtemp(prefix="ribbit-outside-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def ribbit_undo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture
def tracked_folders(repo: Path) -> Path:
    """The repository with two tracked folders the attack replaces by links."""
    (repo / "conf").mkdir()
    (repo / "conf" / "app.ini").write_text("[app]\nname = demo\n")
    (repo / "githooks").mkdir()
    (repo / "githooks" / "pre-commit").write_text("#!/bin/sh\necho checks\n")
    (repo / "githooks" / "pre-commit").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "folders")
    return repo


def plant_links(outside: Path) -> str:
    """The agent's Bash: hide two tracked folders with .gitignore and put links in their place."""
    return (
        "printf 'conf\\ngithooks\\n' >> .gitignore && rm -rf conf githooks && "
        f"ln -s {outside} conf && ln -s .git/hooks githooks && echo changed >> calc.py"
    )


@pytest.fixture
def links_not_journaled(monkeypatch: pytest.MonkeyPatch) -> None:
    """No room for ignored files in the journal: the links the agent hides with .gitignore are not recorded
    (within the budget they are, and undo simply removes them: see the test after these two)."""
    from agent.undo import ignored

    monkeypatch.setattr(ignored, "IGNORED_FILES_BUDGET", 0)


def test_ribbit_undo_refuses_to_restore_through_planted_links(
    tracked_folders: Path, outside: Path, tmp_path: Path, links_not_journaled: None,
) -> None:
    repo = tracked_folders
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=plant_links(outside)), "done"))
    try:
        workspace.session.run("go")
        sid = workspace.journal.session_id
    finally:
        workspace.close()
    assert (repo / "conf").is_symlink() and (repo / "githooks").is_symlink()
    refused = ribbit_undo(sid, "--repo", str(repo))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "conf is a link" in refused.stderr or "githooks is a link" in refused.stderr
    assert list(outside.iterdir()) == []  # nothing written outside the repository
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()  # no hook planted in .git/hooks
    assert (repo / "calc.py").read_text().endswith("changed\n")  # nothing at all was restored
    # Once the user takes the links away, the same undo goes through.
    (repo / "conf").unlink()
    (repo / "githooks").unlink()
    done = ribbit_undo(sid, "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    assert (repo / "conf" / "app.ini").read_text() == "[app]\nname = demo\n"
    assert (repo / "githooks" / "pre-commit").stat().st_mode & 0o111
    assert list(outside.iterdir()) == [] and not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_undo_last_refuses_the_same_links(
    tracked_folders: Path, outside: Path, tmp_path: Path, links_not_journaled: None,
) -> None:
    repo = tracked_folders
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=plant_links(outside)), "done"))
    try:
        workspace.session.run("go")
        with pytest.raises(JournalError, match="is a link now") as refused:
            workspace.undo_last()
    finally:
        workspace.close()
    assert "\n" not in str(refused.value)
    assert list(outside.iterdir()) == [] and not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_undo_removes_planted_links_it_journaled_and_puts_the_folders_back(
    tracked_folders: Path, outside: Path, tmp_path: Path,
) -> None:
    """The links are git-ignored files within the journal's budget: recorded, so undo takes them away
    (the links themselves, never what they point to) and writes the folders back, one folder at a time."""
    repo = tracked_folders
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=plant_links(outside)), "done"))
    try:
        workspace.session.run("go")
        undone = workspace.undo_last()
    finally:
        workspace.close()
    assert {"conf", "githooks"} <= set(undone.deleted)
    assert not (repo / "conf").is_symlink() and (repo / "conf" / "app.ini").read_text() == "[app]\nname = demo\n"
    assert (repo / "githooks" / "pre-commit").stat().st_mode & 0o111
    assert list(outside.iterdir()) == [] and not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_undo_replaces_a_link_the_agent_put_in_place_of_a_file_without_writing_through_it(
    repo: Path, outside: Path, tmp_path: Path,
) -> None:
    secret = outside / "secret.txt"
    secret.write_text("outside, not the repo's\n")
    command = f"rm calc.py && ln -s {secret} calc.py"
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        workspace.session.run("go")
        workspace.undo_last()
    finally:
        workspace.close()
    assert not (repo / "calc.py").is_symlink()
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert secret.read_text() == "outside, not the repo's\n"


def test_review_never_applies_through_a_link_in_the_live_checkout(repo: Path, outside: Path, tmp_path: Path) -> None:
    """The user's checkout has `shared -> /outside`; the agent's worktree makes shared/ a folder."""
    (repo / "shared").symlink_to(outside)
    git(repo, "add", "shared")
    git(repo, "commit", "-q", "-m", "a link the user keeps")
    turns = [xml_call("Bash", command="rm shared && mkdir shared && echo evil > shared/evil.txt && echo ok > fine.txt"), "done"]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=Recorder())
    try:
        review.run("go")
        proposal = review.proposal()
        assert {f.path for f in proposal.files} == {"shared/evil.txt", "fine.txt"}
        result = review.apply(proposal, proposal.all_items())
    finally:
        review.close()
    assert list(outside.iterdir()) == []
    assert "shared" in result.skipped["shared/evil.txt"] and "link" in result.skipped["shared/evil.txt"]
    assert result.applied == {"fine.txt": [0]} and (repo / "fine.txt").read_text() == "ok\n"
    assert (repo / "shared").is_symlink()


def test_review_never_applies_into_git_through_a_link(repo: Path, tmp_path: Path) -> None:
    (repo / "githooks").symlink_to(".git/hooks")  # left behind by an earlier session
    command = "rm githooks && mkdir githooks && printf '#!/bin/sh\\necho pwned\\n' > githooks/pre-commit"
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done")), repo, sink=Recorder())
    try:
        review.run("go")
        proposal = review.proposal()
        assert [f.path for f in proposal.files] == ["githooks/pre-commit"]
        result = review.apply(proposal, proposal.all_items())
    finally:
        review.close()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert result.applied == {} and "githooks is a link" in result.skipped["githooks/pre-commit"]


def test_review_refuses_a_file_the_user_replaced_by_a_link(repo: Path, outside: Path, tmp_path: Path) -> None:
    turns = [xml_call("Read", file_path="calc.py"), xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"), "done"]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=Recorder())
    try:
        review.run("go")
        proposal = review.proposal()
        target = outside / "calc.py"
        target.write_text("def add(a, b):\n    return a - b\n")  # same bytes, reached through a link
        (repo / "calc.py").unlink()
        (repo / "calc.py").symlink_to(target)
        result = review.apply(proposal, proposal.all_items())
    finally:
        review.close()
    assert result.applied == {} and "calc.py" in result.skipped
    assert target.read_text() == "def add(a, b):\n    return a - b\n"


def test_atomic_write_checks_every_folder_at_the_moment_of_writing(repo: Path, outside: Path) -> None:
    """A folder swapped for a link after any earlier check still stops the write (O_NOFOLLOW walk)."""
    (repo / "pkg").mkdir()
    checked = (repo / "pkg" / "mod.py").resolve()
    (repo / "pkg").rmdir()
    (repo / "pkg").symlink_to(outside)
    with pytest.raises(ApplyError, match="pkg: it is a link"):
        atomic_write(checked, b"x = 1\n")
    assert list(outside.iterdir()) == []
    for inside_git in (repo / ".git" / "hooks" / "pre-commit", repo / ".GIT" / "config", repo / "git~1" / "x"):
        with pytest.raises(ApplyError, match=".git"):
            atomic_write(inside_git, b"#!/bin/sh\n")
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
