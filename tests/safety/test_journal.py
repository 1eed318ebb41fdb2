"""Undo journal: snapshots never touch the user's git state; undo is byte-identical and refuses
to overwrite later user edits; Bash-made changes are journaled; non-git folders work too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.undo.journal import JournalError
from tests.conftest import git, tree_bytes, xml_call
from tests.safety.helpers import start, write_replay

ROOT = Path(__file__).resolve().parents[2]


def user_git_state(repo: Path) -> dict[str, object]:
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branches": git(repo, "for-each-ref", "refs/heads", "refs/tags", "refs/stash"),
        "stash": git(repo, "stash", "list"),
        "status": git(repo, "status", "--porcelain"),
        "index": (repo / ".git" / "index").read_bytes(),
    }


def ribbit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_session_snapshots_leave_index_head_branches_and_stash_alone(repo: Path, tmp_path: Path) -> None:
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b  # staged\n")
    git(repo, "add", "calc.py")
    (repo / "notes.txt").write_text("untracked, not ignored\n")
    git(repo, "stash", "push", "-q", "--keep-index", "-m", "keep me")
    before = user_git_state(repo)
    replay = write_replay(
        tmp_path / "r.jsonl", xml_call("Bash", command="echo made by bash > bash.txt && printf x >> notes.txt"),
    )
    workspace, _ = start(repo, replay, watch=False)
    workspace.session.run("go")
    patch = workspace.patch()
    assert "bash.txt" in patch and "notes.txt" in patch
    after = user_git_state(repo)
    assert after["head"] == before["head"] and after["branches"] == before["branches"]
    assert after["stash"] == before["stash"] and after["index"] == before["index"]
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/ribbit/")
    assert f"refs/ribbit/{workspace.journal.session_id}/0" in refs
    # The start snapshot holds the untracked, non-ignored file exactly as it was.
    start_tree = git(repo, "show", f"{workspace.journal.snapshots[0]}:notes.txt")
    assert start_tree == "untracked, not ignored\n"


def test_undo_last_restores_bytes_modes_and_bash_changes(repo: Path, tmp_path: Path) -> None:
    (repo / "data.bin").write_bytes(b"\x00\x01\xffbinary")
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    tool = repo / "tool.sh"
    tool.write_text("echo hi\n")
    tool.chmod(0o755)
    (repo / "build").mkdir()
    (repo / "build" / "cache.o").write_bytes(b"ignored")
    before = tree_bytes(repo)
    replay = write_replay(
        tmp_path / "r.jsonl",
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        xml_call(
            "Bash",
            command="printf 'new\\r\\n' > crlf.txt; head -c 3 /dev/urandom >> data.bin; chmod -x tool.sh; "
            "rm test_calc.py; mkdir -p pkg/sub && echo x > pkg/sub/new.py; echo junk > build/cache.o",
        ),
    )
    workspace, _ = start(repo, replay, watch=False)
    workspace.session.run("go")
    assert (repo / "pkg" / "sub" / "new.py").exists() and not (repo / "test_calc.py").exists()
    bash_undo = workspace.undo_last()
    assert sorted(bash_undo.deleted) == ["pkg/sub/new.py"]
    assert {"crlf.txt", "data.bin", "test_calc.py", "tool.sh", "build/cache.o"} <= set(bash_undo.restored)
    assert not (repo / "pkg").exists()  # folders the agent created are gone again
    assert tool.stat().st_mode & 0o111
    edit_undo = workspace.undo_last()
    assert edit_undo.restored == ["calc.py"]
    after = tree_bytes(repo)
    assert after == before  # the git-ignored build/cache.o too: it is within the journal's budget
    with pytest.raises(JournalError, match="nothing to undo"):
        workspace.undo_last()


def test_undo_refuses_to_overwrite_a_file_the_user_changed_afterwards(repo: Path, tmp_path: Path) -> None:
    replay = write_replay(
        tmp_path / "r.jsonl",
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    )
    workspace, _ = start(repo, replay, watch=False)
    workspace.session.run("go")
    user_text = "def add(a, b):\n    return a + b  # reviewed by me\n"
    (repo / "calc.py").write_text(user_text)
    with pytest.raises(JournalError) as refused:
        workspace.undo_last()
    message = str(refused.value)
    assert "calc.py" in message and "\n" not in message and "nothing was restored" in message
    assert (repo / "calc.py").read_text() == user_text
    # A user edit to some other file does not block the undo, and is left alone.
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "test_calc.py").write_text("# mine\n")
    result = workspace.undo_last()
    assert result.restored == ["calc.py"]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (repo / "test_calc.py").read_text() == "# mine\n"


def test_undo_keeps_a_users_change_made_during_the_step(repo: Path, tmp_path: Path) -> None:
    """The watcher tells the journal which files changed from outside while the agent worked."""
    replay = write_replay(
        tmp_path / "r.jsonl",
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    )
    hooks: dict[int, object] = {}
    workspace, _ = start(repo, replay, hooks=hooks)  # type: ignore[arg-type]

    def user_edits() -> None:
        (repo / "test_calc.py").write_text("# the user's own work\n")
        assert workspace.watcher is not None and workspace.watcher.wait_idle()

    hooks[1] = user_edits
    try:
        workspace.session.run("go")
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert result.restored == ["calc.py"] and result.kept == ["test_calc.py"]
    assert (repo / "test_calc.py").read_text() == "# the user's own work\n"


def test_ribbit_undo_cli_lists_undoes_and_refuses(repo: Path, tmp_path: Path, isolated_state: Path) -> None:
    original = tree_bytes(repo)
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="echo v2 > calc.py; echo n > new.txt"))
    workspace, _ = start(repo, replay, watch=False)
    workspace.session.run("go")
    sid = workspace.journal.session_id
    workspace.close()  # a session still open holds the checkout: `ribbit undo` would be refused (one writer)
    listed = ribbit("undo", "--list", "--repo", str(repo))
    assert listed.returncode == 0 and sid in listed.stdout and "calc.py" in listed.stdout
    (repo / "new.txt").write_text("user kept working\n")
    refused = ribbit("undo", sid, "--repo", str(repo))
    assert refused.returncode == 1 and "new.txt" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    (repo / "new.txt").write_text("n\n")
    done = ribbit("undo", sid, "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    assert tree_bytes(repo) == original
    again = ribbit("undo", sid, "--repo", str(repo))
    assert again.returncode == 1 and "already undone" in again.stderr
    unknown = ribbit("undo", "no-such-session", "--repo", str(repo))
    assert unknown.returncode == 1 and "no ribbit session" in unknown.stderr


def test_folder_that_is_not_a_git_repository_gets_a_private_journal(tmp_path: Path, isolated_state: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="echo two > a.txt; echo b > b.txt"))
    workspace, _ = start(folder, replay, watch=False)
    assert workspace.journal.private and str(isolated_state) in workspace.journal.kind
    assert not (folder / ".git").exists()
    workspace.session.run("go")
    assert "+two" in workspace.patch()
    workspace.undo_last()
    assert tree_bytes(folder) == {"a.txt": b"one\n"}
    doctor = ribbit("doctor", "--repo", str(folder))
    assert "private journal" in doctor.stdout
    doctor_git = ribbit("doctor", "--repo", str(tmp_path / "plain"))
    assert "undo journal" in doctor_git.stdout


def test_byte_identical_even_with_eol_conversion_attributes(repo: Path, tmp_path: Path) -> None:
    (repo / ".gitattributes").write_text("* text=auto\n")
    (repo / "win.txt").write_bytes(b"a\r\nb\r\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "attrs")
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="printf 'c\\r\\n' > win.txt"))
    workspace, _ = start(repo, replay, watch=False)
    assert workspace.journal.converting
    workspace.session.run("go")
    workspace.undo_last()
    assert (repo / "win.txt").read_bytes() == b"a\r\nb\r\n"



def test_a_step_is_journaled_even_when_git_takes_its_input_slowly(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent can make hashing slow (`truncate -s 3G pad.bin` in the same step as `rm notes.txt`):
    git then ran past the FIFO grace period (2 s) while ribbit fed it paths on stdin, and retrying
    Popen.communicate raised ValueError, so the step (and every later one while the big file
    stayed) was never recorded, and the user's untracked file it deleted could not come back.
    Scaled down: a 64 MiB file, and a grace period of 10 ms."""
    from agent import git as gitcmd

    monkeypatch.setattr(gitcmd, "FIFO_GRACE_S", 0.01)
    monkeypatch.setattr(gitcmd, "FIFO_POLL_S", 0.05)
    (repo / "notes.txt").write_text("the user's untracked notes\n")
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="truncate -s 64M pad.bin; rm notes.txt"))
    workspace, recorder = start(repo, replay, watch=False)
    workspace.session.run("go")
    assert not (repo / "notes.txt").exists()
    assert not [e for e in recorder.of_type("notice") if "not recorded" in e.text]  # type: ignore[attr-defined]
    workspace.journal.undo_last()
    assert (repo / "notes.txt").read_text() == "the user's untracked notes\n"
    assert not (repo / "pad.bin").exists()


def test_files_too_large_to_hash_are_named_and_the_journal_goes_on(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sparse file costs no disk but all of its size to hash: `truncate -s 100G` made every later
    snapshot run into git's timeout, so nothing more was journaled. One file past the limit, and the
    largest files once a snapshot's total is spent, are left out and named; the rest is recorded.
    Scaled down: limits of 1 MiB a file and 3 MiB a snapshot."""
    from agent.undo import worktree as snapshot

    monkeypatch.setattr(snapshot, "FILE_HASH_LIMIT", 1 << 20)
    monkeypatch.setattr(snapshot, "SNAPSHOT_HASH_BUDGET", 3 << 20)
    (repo / "notes.txt").write_text("the user's untracked notes\n")
    command = "truncate -s 64M huge.bin; for i in 1 2 3 4; do truncate -s 1M part$i.bin; done; truncate -s 64M calc.py; rm notes.txt"
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command)), watch=False)
    try:
        workspace.session.run("go")
        patch = workspace.patch()
        workspace.journal.undo_last()
    finally:
        workspace.close()
    named = " ".join(e.text for e in recorder.of_type("notice") if "not recorded" in e.text)  # type: ignore[attr-defined]
    assert "huge.bin (larger than 1 MiB)" in named and "calc.py (larger than 1 MiB)" in named
    assert "part4.bin (past the 3 MiB one snapshot reads)" in named
    assert "part1.bin" in patch and "huge.bin" not in patch and "part4.bin" not in patch and "calc.py" not in patch
    # Undo takes back the whole step: what was recorded, and the files it could not record, which the
    # disk still shows as the step left them (the agent's new ones removed, calc.py's bytes from the start).
    assert (repo / "notes.txt").read_text() == "the user's untracked notes\n"
    assert not any((repo / f"part{i}.bin").exists() for i in (1, 2, 3, 4))
    assert not (repo / "huge.bin").exists()
    assert (repo / "calc.py").read_text() == git(repo, "show", "HEAD:calc.py")


def test_session_ids_sort_in_the_order_sessions_began_within_one_second() -> None:
    """Two `ribbit run`s begun in the same second: `ribbit undo` took the one whose random id sorted
    last, found the other's later change on its file, and refused."""
    import time

    from agent.paths import new_session_id

    ids = []
    for _ in range(40):
        ids.append(new_session_id())
        time.sleep(0.002)
    assert sorted(ids) == ids and len(set(ids)) == len(ids)
