"""FIFOs and sockets in the undo journal: git cannot store or list them, so a snapshot looks for them where
ribbit wrote (the watcher's `written`) and where the previous snapshot had one, and records them in its meta;
undo removes the ones a step made (never opening them), makes again the ones a step removed, and keeps
someone else's. Real git, a real Journal; outcomes read on disk."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from agent.fs import special_mark
from agent.undo.journal import Journal, JournalError
from agent.undo.watcher import RepoWatcher


class Told:
    """A write observer that records what it is told (the watcher's part in an undo)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, bytes | None]] = []

    def expect_write(self, path: Path, data: bytes | None) -> None:
        self.told.append((path.name, data))


def is_fifo(path: Path) -> bool:
    return os.path.lexists(path) and stat.S_ISFIFO(os.lstat(path).st_mode)


def started(repo: Path) -> Journal:
    journal = Journal(repo)
    journal.snapshot("start")
    return journal


def test_a_fifo_a_step_made_is_removed_by_undo_and_named(repo: Path) -> None:
    journal = started(repo)
    os.mkfifo(repo / "pipe")  # as an applied overlay makes it (mknod), the watcher told first
    (repo / "out.txt").write_text("built\n")
    journal.snapshot("step 1", written=["pipe", "out.txt"])
    observer = Told()
    result = journal.undo_last(observer=observer)
    assert not os.path.lexists(repo / "pipe") and not (repo / "out.txt").exists()
    assert sorted(result.deleted) == ["out.txt", "pipe"]
    assert "pipe" in result.summary()
    assert ("pipe", None) in observer.told  # the watcher hears of the removal before it lands


def test_a_fifo_only_step_is_recorded_and_undone_by_a_later_process(repo: Path) -> None:
    journal = started(repo)
    os.mkfifo(repo / "pipe")
    journal.snapshot("step 1", written=["pipe"])
    assert len(journal.snapshots) == 2  # the tree is the same, the FIFO alone makes it a step
    later = Journal(repo)  # `ribbit undo` in another process: what it knows is read back from git
    result = later.undo_session(journal.session_id)
    assert not os.path.lexists(repo / "pipe") and result.deleted == ["pipe"]


def test_a_fifo_someone_else_made_is_kept(repo: Path) -> None:
    journal = started(repo)
    os.mkfifo(repo / "theirs")  # the user's, made while the step ran (the watcher: foreign)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    journal.snapshot("step 1", foreign=["theirs"], written=["theirs", "calc.py"])
    result = journal.undo_last()
    assert is_fifo(repo / "theirs")
    assert result.kept == ["theirs"] and "theirs" not in result.deleted
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_a_fifo_nobody_said_ribbit_wrote_is_never_looked_at(repo: Path) -> None:
    journal = started(repo)
    os.mkfifo(repo / "theirs")  # no hint: git does not list it, the journal never learns of it
    (repo / "notes.txt").write_text("x\n")
    journal.snapshot("step 1", written=["notes.txt"])
    result = journal.undo_last()
    assert is_fifo(repo / "theirs") and result.deleted == ["notes.txt"]


def test_a_fifo_a_step_removed_is_made_again_with_its_bits(repo: Path) -> None:
    os.mkfifo(repo / "pipe")
    os.chmod(repo / "pipe", 0o640)
    journal = Journal(repo)
    journal.snapshot("start", written=["pipe"])
    os.unlink(repo / "pipe")
    journal.snapshot("step 1", written=["pipe"])  # found gone where the last snapshot had it
    observer = Told()
    result = journal.undo_last(observer=observer)
    assert is_fifo(repo / "pipe") and stat.S_IMODE(os.lstat(repo / "pipe").st_mode) == 0o640
    assert result.restored == ["pipe"] and not result.not_restored
    assert ("pipe", special_mark(stat.S_IFIFO)) in observer.told


def test_a_file_a_step_replaced_by_a_fifo_comes_back(repo: Path) -> None:
    journal = started(repo)
    os.unlink(repo / "calc.py")
    os.mkfifo(repo / "calc.py")  # `rm calc.py && mkfifo calc.py`
    journal.snapshot("step 1", written=["calc.py"])
    result = journal.undo_last()
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert result.restored == ["calc.py"] and result.deleted == []


def test_a_socket_a_step_made_is_removed_and_rewind_takes_back_a_fifo_in_a_new_folder(repo: Path) -> None:
    journal = started(repo)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(repo / "sock"))
    finally:
        server.close()
    (repo / "deep").mkdir()
    os.mkfifo(repo / "deep" / "pipe")
    journal.snapshot("step 1", written=["sock"])
    journal.snapshot("step 2", written=["deep/pipe"])
    result = journal.rewind_to(0)
    assert not os.path.lexists(repo / "sock") and not os.path.lexists(repo / "deep")
    assert sorted(result.deleted) == ["deep/pipe", "sock"]


def test_a_fifo_replaced_after_the_step_is_not_undone(repo: Path) -> None:
    journal = started(repo)
    os.mkfifo(repo / "pipe")
    (repo / "out.txt").write_text("built\n")
    journal.snapshot("step 1", written=["pipe", "out.txt"])
    os.unlink(repo / "pipe")
    (repo / "pipe").write_text("the user's file now\n")
    with pytest.raises(JournalError, match="pipe"):
        journal.undo_last()
    assert (repo / "pipe").read_text() == "the user's file now\n" and (repo / "out.txt").exists()  # nothing restored


def test_the_watcher_hands_over_where_ribbit_wrote(repo: Path) -> None:
    watcher = RepoWatcher(repo, lambda change: None)  # not started: what it is told is enough here
    watcher.expect_write(repo / "pipe", special_mark(stat.S_IFIFO))
    watcher.expect_write(repo / "gone.txt", None)
    watcher.agent_wrote(repo / "calc.py")
    assert set(watcher.take_since_snapshot().written) == {"pipe", "gone.txt", "calc.py"}
    assert not watcher.take_since_snapshot().written  # each snapshot gets what came since the last one


def test_a_fifo_made_by_a_step_the_journal_could_not_record_is_still_undone(
    repo: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = started(repo)
    os.mkfifo(repo / "pipe")

    def disk_full(hints: object = ()) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal._worktree, "tree_now", disk_full)  # noqa: SLF001 (a full disk, every time)
    notices = journal.record_step("step 1", written=["pipe"])
    assert journal.has_pending() and any("could not be recorded" in n for n in notices)
    result = journal.undo_last()  # compared with the last recorded snapshot, nothing written to the journal
    assert not os.path.lexists(repo / "pipe") and result.deleted == ["pipe"]


def test_ribbit_undo_of_a_session_cut_short_removes_the_fifo_its_recorded_step_made(repo: Path) -> None:
    journal = started(repo)
    journal.task_began()  # the open mark stays: the task never ended (ribbit killed)
    os.mkfifo(repo / "pipe")
    journal.snapshot("step 1", written=["pipe"])
    result = Journal(repo).undo_session(journal.session_id)
    assert not os.path.lexists(repo / "pipe") and result.deleted == ["pipe"]
