from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.core.approvals import ApprovalDecision
from tests.unit.helpers import ScriptedApprover, call, make_ctx


def test_write_creates_files_and_parent_folders(tmp_path: Path) -> None:
    out = call(make_ctx(tmp_path), "Write", file_path="pkg/new.py", content="print('hi')\n")
    assert out.startswith("Created pkg/new.py")
    assert (tmp_path / "pkg" / "new.py").read_text() == "print('hi')\n"


def test_replacing_an_unread_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    out = call(make_ctx(tmp_path), "Write", file_path="a.txt", content="new\n")
    assert out.startswith("Error:") and "has not been read" in out
    assert (tmp_path / "a.txt").read_text() == "old\n"


def test_a_file_modified_since_read_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old\n")
    ctx = make_ctx(tmp_path)
    call(ctx, "Read", file_path="a.txt")
    target.write_text("changed by the user\n")
    for name, args in (("Write", {"content": "x\n"}), ("Edit", {"old_string": "changed", "new_string": "y"})):
        out = call(ctx, name, file_path="a.txt", **args)
        assert out.startswith("Error:") and "modified since read" in out
    assert target.read_text() == "changed by the user\n"


def test_saved_reads_come_back_only_inside_the_root_and_only_as_they_were(tmp_path: Path) -> None:
    # What a saved session keeps of the read record (ReadState.saved) and what a resume takes back
    # (ReadState.adopt): paths that leave the root, or a .git, are dropped; the rest still has to match.
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    for name in ("a.txt", "b.txt"):
        (root / name).write_text("old\n")
    ctx = make_ctx(root)
    call(ctx, "Read", file_path="a.txt")
    call(ctx, "Read", file_path="b.txt")
    saved = ctx.read_state.saved(root)
    assert sorted(saved) == ["a.txt", "b.txt"]
    (root / "b.txt").write_text("changed between sessions\n")
    forged = {"../outside.txt": saved["a.txt"], str(tmp_path / "x"): saved["a.txt"], ".git/config": saved["a.txt"]}
    resumed = make_ctx(root)
    resumed.read_state.adopt(root, {**saved, **forged})
    assert sorted(resumed.read_state.saved(root)) == ["a.txt", "b.txt"]
    assert call(resumed, "Edit", file_path="a.txt", old_string="old", new_string="new").startswith("Edited")
    assert (root / "a.txt").read_text() == "new\n"
    out = call(resumed, "Edit", file_path="b.txt", old_string="changed", new_string="lost")
    assert out.startswith("Error:") and "modified since read" in out
    assert (root / "b.txt").read_text() == "changed between sessions\n"


def test_write_after_read_replaces_and_keeps_the_file_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_text("echo old\n")
    target.chmod(0o755)
    ctx = make_ctx(tmp_path)
    call(ctx, "Read", file_path="run.sh")
    assert call(ctx, "Write", file_path="run.sh", content="echo new\n").startswith("Replaced run.sh")
    assert target.read_text() == "echo new\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755
    # The agent's own write counts as read: a second write needs no re-read.
    assert call(ctx, "Write", file_path="run.sh", content="echo newer\n").startswith("Replaced")


def test_edit_replaces_a_unique_string_and_shows_the_region(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    ctx = make_ctx(tmp_path)
    call(ctx, "Read", file_path="calc.py")
    out = call(ctx, "Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
    assert (tmp_path / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert "     2\t    return a + b" in out


def test_edit_errors_identical_not_found_and_ambiguous(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\ny = 1\nvalue = compute(1)\n")
    ctx = make_ctx(tmp_path)
    call(ctx, "Read", file_path="m.py")
    same = call(ctx, "Edit", file_path="m.py", old_string="x", new_string="x")
    assert same.startswith("Error:") and "identical" in same
    missing = call(ctx, "Edit", file_path="m.py", old_string="value = compute(2)", new_string="v")
    assert missing.startswith("Error:") and "not found" in missing
    assert "     3\tvalue = compute(1)" in missing  # the closest region, numbered
    twice = call(ctx, "Edit", file_path="m.py", old_string=" = 1", new_string=" = 2")
    assert twice.startswith("Error:") and "2 times" in twice and "lines 1, 2" in twice
    assert (tmp_path / "m.py").read_text() == "x = 1\ny = 1\nvalue = compute(1)\n"
    call(ctx, "Edit", file_path="m.py", old_string=" = 1", new_string=" = 2", replace_all=True)
    assert (tmp_path / "m.py").read_text() == "x = 2\ny = 2\nvalue = compute(1)\n"


def test_crlf_files_match_as_lf_and_keep_crlf(tmp_path: Path) -> None:
    target = tmp_path / "win.txt"
    target.write_bytes(b"first line\r\nsecond line\r\n")
    ctx = make_ctx(tmp_path)
    call(ctx, "Read", file_path="win.txt")
    call(ctx, "Edit", file_path="win.txt", old_string="first line\nsecond", new_string="1st line\n2nd")
    assert target.read_bytes() == b"1st line\r\n2nd line\r\n"


def test_rejected_change_leaves_no_trace_and_returns_the_reason(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("a = 1\n")
    approver = ScriptedApprover(ApprovalDecision(approved=False, reason="use a constant"))
    ctx = make_ctx(tmp_path, mode="ask", approver=approver)
    call(ctx, "Read", file_path="a.py")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = call(ctx, "Edit", file_path="a.py", old_string="a = 1", new_string="a = 2")
    assert "rejected" in out and "use a constant" in out
    assert (tmp_path / "a.py").read_text() == "a = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert len(approver.requests) == 1 and "-a = 1" in approver.requests[0].diff


def test_partial_hunk_approval_applies_only_chosen_hunks(tmp_path: Path) -> None:
    original = "".join(f"line {i}\n" for i in range(1, 21))
    (tmp_path / "f.txt").write_text(original)
    approver = ScriptedApprover(ApprovalDecision(approved=True, hunks=[1]))
    ctx = make_ctx(tmp_path, mode="ask", approver=approver)
    call(ctx, "Read", file_path="f.txt")
    new = original.replace("line 2\n", "LINE 2\n").replace("line 19\n", "LINE 19\n")
    out = call(ctx, "Write", file_path="f.txt", content=new)
    assert "hunk(s) 2 of 2" in out
    assert (tmp_path / "f.txt").read_text() == original.replace("line 19\n", "LINE 19\n")


def test_write_refuses_git_internals_and_escapes(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / ".git").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "out").symlink_to(outside)
    ctx = make_ctx(root)
    for path in (".git/config", "../evil.txt", "out/evil.txt", str(outside / "x.txt")):
        assert call(ctx, "Write", file_path=path, content="x").startswith("Error:"), path
    assert not (root / ".git" / "config").exists() and list(outside.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()


class EditorSaves:
    """An approver during whose question the user's editor saves the file (as in issue 40)."""

    def __init__(self, path: Path, *changes: bytes, answer: bool = True) -> None:
        self.path = path
        self.changes = list(changes)
        self.answer = answer
        self.requests: list[object] = []

    def decide(self, request):  # type: ignore[no-untyped-def]
        from agent.core.approvals import ApprovalDecision

        self.requests.append(request)
        if self.changes:
            self.path.write_bytes(self.changes.pop(0))
        return ApprovalDecision(approved=self.answer)


def test_an_approved_edit_is_made_again_on_what_the_user_saved_meanwhile_and_asked_again(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("alpha\nbeta\n")
    approver = EditorSaves(target, b"alpha\nbeta\nthe user's line\n")
    ctx = make_ctx(tmp_path, mode="ask", approver=approver)  # type: ignore[arg-type]
    call(ctx, "Read", file_path="notes.txt")
    out = call(ctx, "Edit", file_path="notes.txt", old_string="beta", new_string="BETA")
    assert target.read_text() == "alpha\nBETA\nthe user's line\n"
    assert "changed while the change waited" in out
    assert len(approver.requests) == 2  # the new diff was shown again
    assert "the user's line" in approver.requests[1].diff  # type: ignore[attr-defined]


def test_an_edit_that_no_longer_applies_or_a_write_is_refused_and_the_users_file_kept(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("alpha\nbeta\n")
    users = b"alpha\nrewritten by the user\n"
    ctx = make_ctx(tmp_path, mode="ask", approver=EditorSaves(target, users))  # type: ignore[arg-type]
    call(ctx, "Read", file_path="notes.txt")
    out = call(ctx, "Edit", file_path="notes.txt", old_string="beta", new_string="BETA")
    assert out.startswith("Error:") and "changed while the change waited for approval" in out
    assert target.read_bytes() == users
    # The next change needs a new Read.
    assert call(ctx, "Write", file_path="notes.txt", content="x\n").startswith("Error:")

    second = tmp_path / "other.txt"
    second.write_text("one\n")
    users = b"one\ntwo by the user\n"
    ctx = make_ctx(tmp_path, mode="ask", approver=EditorSaves(second, users))  # type: ignore[arg-type]
    call(ctx, "Read", file_path="other.txt")
    out = call(ctx, "Write", file_path="other.txt", content="replaced\n")
    assert out.startswith("Error:") and "Read it again" in out
    assert second.read_bytes() == users

    created = tmp_path / "new.txt"  # a file the user made while the agent's new file waited
    ctx = make_ctx(tmp_path, mode="ask", approver=EditorSaves(created, b"mine\n"))  # type: ignore[arg-type]
    assert call(ctx, "Write", file_path="new.txt", content="agent's\n").startswith("Error:")
    assert created.read_bytes() == b"mine\n"
