"""Review mode: isolated worktree with the user's uncommitted work, hunk-level review, always cleaned up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.core.approvals import ApprovalDecision
from agent.session.history import journaled_sessions
from agent.undo.journal import Journal
from agent.session.review import ReviewSession, review_interactively
from tests.conftest import git, tree_bytes, xml_call
from tests.functional.helpers import ribbit_run
from tests.safety.helpers import HookedReplay, Recorder, write_replay

TWO_HUNKS = "def add(a, b):\n    return a - b\n" + "\n" * 8 + "def sub(a, b):\n    return a + b\n"


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


class Answers:
    def __init__(self, *answers: bool, check=None) -> None:  # type: ignore[no-untyped-def]
        self.answers = list(answers)
        self.requests: list[object] = []
        self.check = check

    def decide(self, request):  # type: ignore[no-untyped-def]
        if self.check:
            self.check()
        self.requests.append(request)
        return ApprovalDecision(approved=self.answers.pop(0) if self.answers else False)


def test_review_applies_only_approved_hunks_and_removes_the_worktree(repo: Path, tmp_path: Path) -> None:
    (repo / "calc.py").write_text(TWO_HUNKS)  # uncommitted
    (repo / "notes.txt").write_text("the user's untracked notes\n")
    before = tree_bytes(repo)
    turns = [
        xml_call("Bash", command="cat notes.txt && echo made > bash_made.txt"),
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        xml_call("Edit", file_path="calc.py", old_string="    return a + b\n\n\n\n", new_string="    return a + b  # add\n\n\n\n"),
        xml_call("Edit", file_path="calc.py", old_string="def sub(a, b):\n    return a + b", new_string="def sub(a, b):\n    return a - b"),
        "done",
    ]
    recorder = Recorder()
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=recorder)
    try:
        worktree = review.workspace.journal.root  # type: ignore[union-attr]
        assert worktree != repo and len(worktrees(repo)) == 2
        summary = review.run("fix")
        assert summary.stop_reason == "finished"
        outputs = [e.output for e in recorder.of_type("tool_result")]  # type: ignore[attr-defined]
        assert "the user's untracked notes" in outputs[0]  # the worktree has the uncommitted work
        assert tree_bytes(repo) == before  # nothing touched the live checkout yet
        proposal = review.proposal()
        by_path = {f.path: f for f in proposal.files}
        assert set(by_path) == {"calc.py", "bash_made.txt"}
        assert len(by_path["calc.py"].hunks) == 2 and by_path["bash_made.txt"].status == "added"

        def live_untouched() -> None:
            assert tree_bytes(repo) == before

        approver = Answers(False, True, False, check=live_untouched)  # bash_made.txt: no; calc hunk 1 yes, 2 no
        selection = review_interactively(proposal, approver)
        assert [r.kind for r in approver.requests] == ["patch_hunk"] * 3  # type: ignore[attr-defined]
        result = review.apply(proposal, selection)
    finally:
        review.close()
    assert not worktree.exists() and len(worktrees(repo)) == 1
    assert not git(repo, "for-each-ref", "refs/ribbit-review/")
    assert (repo / "calc.py").read_text() == TWO_HUNKS.replace("a - b\n", "a + b  # add\n", 1)
    assert not (repo / "bash_made.txt").exists()
    assert result.applied == {"calc.py": [0]} and "+    return a + b  # add" in result.patch
    assert "+    return a - b" not in result.patch  # the rejected hunk is not in the applied patch
    # The applied review is one journaled session: `ribbit undo` takes it back.
    journal = Journal(repo)
    session = journaled_sessions(repo)[0][-1]
    assert session.files == ["calc.py"]
    journal.undo_session(session.session_id)
    assert tree_bytes(repo) == before


@pytest.mark.parametrize("approve_mode", [False, True])
def test_an_executable_bit_is_its_own_reviewed_item(repo: Path, tmp_path: Path, approve_mode: bool) -> None:
    """`chmod +x` next to a one-line fix: approving the fix does not make the file executable unseen."""
    turns = [
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        xml_call("Bash", command="chmod +x calc.py"),
        "done",
    ]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=Recorder())
    try:
        assert review.run("fix").stop_reason == "finished"
        proposal = review.proposal()
        (calc,) = proposal.files
        approver = Answers(True, approve_mode)  # the text hunk yes; the mode as the parameter says
        selection = review_interactively(proposal, approver)
        result = review.apply(proposal, selection)
    finally:
        review.close()
    diffs = [r.diff for r in approver.requests]  # type: ignore[attr-defined]
    assert len(diffs) == 2 and all("old mode 100644\nnew mode 100755" in d for d in diffs)  # shown with every item
    assert "becomes executable" in diffs[1] and calc.item_count == 2
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert bool(os.stat(repo / "calc.py").st_mode & 0o111) is approve_mode
    assert ("new mode 100755" in result.patch) is approve_mode


@pytest.mark.parametrize("approve", [False, True])
def test_symbolic_links_are_reviewed_items_and_a_rejected_one_is_not_made(repo: Path, tmp_path: Path, approve: bool) -> None:
    """Issue 28, item 4: links were left out of the review without a word (not shown, not applied). A new
    link out of the checkout and a file turned into a link are now items of their own, targets shown."""
    original = (repo / "calc.py").read_bytes()
    turns = [xml_call("Bash", command="ln -s /etc/passwd leak && rm calc.py && ln -s /etc/hostname calc.py"), "done"]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=Recorder())
    try:
        assert review.run("go").stop_reason == "finished"
        proposal = review.proposal()
        approver = Answers(approve, approve)
        result = review.apply(proposal, review_interactively(proposal, approver))
    finally:
        review.close()
    diffs = {r.path: r.diff for r in approver.requests}  # type: ignore[attr-defined]
    assert sorted(diffs) == ["calc.py", "leak"]
    assert "new file mode 120000" in diffs["leak"] and "a symbolic link to '/etc/passwd'" in diffs["leak"]
    assert "old mode 100644\nnew mode 120000" in diffs["calc.py"] and "'/etc/hostname'" in diffs["calc.py"]
    if approve:
        assert os.readlink(repo / "leak") == "/etc/passwd" and os.readlink(repo / "calc.py") == "/etc/hostname"
        assert "new file mode 120000" in result.patch
    else:
        assert not os.path.lexists(repo / "leak") and not result.applied
        assert not (repo / "calc.py").is_symlink() and (repo / "calc.py").read_bytes() == original


def test_review_skips_a_file_the_user_changed_meanwhile(repo: Path, tmp_path: Path) -> None:
    turns = [xml_call("Read", file_path="calc.py"), xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), repo, sink=Recorder())
    try:
        review.run("fix")
        proposal = review.proposal()
        (repo / "calc.py").write_text("# the user rewrote it meanwhile\n")
        result = review.apply(proposal, proposal.all_items())
    finally:
        review.close()
    assert result.applied == {} and "changed in your checkout" in result.skipped["calc.py"]
    assert (repo / "calc.py").read_text() == "# the user rewrote it meanwhile\n"


class CrashingModel(HookedReplay):
    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(path)
        self.error = error

    def generate(self, request):  # type: ignore[no-untyped-def]
        raise self.error


def test_worktree_is_removed_when_the_run_crashes(repo: Path, tmp_path: Path) -> None:
    # A bug in the backend ends the run as an error (one line, a summary), and one that escapes
    # the loop entirely (an interrupt) still takes the worktree away.
    for error in (RuntimeError("the backend crashed"), KeyboardInterrupt()):
        model = CrashingModel(write_replay(tmp_path / "r.jsonl", "x"), error)
        review = ReviewSession(model, repo, sink=Recorder())
        worktree = review.workspace.journal.root  # type: ignore[union-attr]
        assert worktree.exists()
        if isinstance(error, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                with review:
                    review.run("go")
        else:
            with review:
                summary = review.run("go")
            assert summary.stop_reason == "error" and "the backend crashed" in (summary.message or "")
        assert not worktree.exists() and len(worktrees(repo)) == 1


def test_ribbit_run_review_mode_end_to_end(capsys, tmp_path: Path, repo: Path) -> None:  # type: ignore[no-untyped-def]
    turns = [
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        xml_call("Write", file_path="extra.py", content="x = 1\n"),
        "done",
    ]
    result = ribbit_run(capsys, tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "review", stdin="y\nn\n")
    assert result.code == 0, result.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert not (repo / "extra.py").exists()
    assert "+    return a + b" in result.patch and "extra.py" not in result.patch
    assert "? Review calc.py" in result.stderr and len(worktrees(repo)) == 1


def test_review_in_a_folder_that_is_not_a_git_repository(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    turns = [xml_call("Bash", command="echo two > a.txt")]
    review = ReviewSession(HookedReplay(write_replay(tmp_path / "r.jsonl", *turns)), folder, sink=Recorder())
    try:
        review.run("go")
        proposal = review.proposal()
        assert (folder / "a.txt").read_text() == "one\n"
        result = review.apply(proposal, proposal.all_items())
    finally:
        review.close()
    assert result.applied == {"a.txt": [0]} and (folder / "a.txt").read_text() == "two\n"
    assert not (folder / ".git").exists()
