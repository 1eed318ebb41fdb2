"""A folder someone else removes or moves out of the checkout (a file manager's trash: one event, the
folder's, none of its files'): the watcher names it `folder/` in Changes, the journal counts the files a
step finds gone under it as that someone's, and undo leaves them gone. What ribbit itself removes (an
applied overlay, undo's emptied folders) stays ribbit's. Real inotify watcher, real git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.fs import remove_empty_folders, remove_file
from agent.undo.journal import Journal
from agent.undo.watcher import RepoWatcher
from tests.conftest import git


@pytest.fixture
def package(repo: Path) -> Path:
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("A = 1\n")
    (repo / "pkg" / "other.py").write_text("B = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pkg")
    return repo / "pkg"


@pytest.fixture
def watcher(repo: Path) -> RepoWatcher:
    watching = RepoWatcher(repo, lambda change: None)
    watching.start()
    assert watching.method == "inotify"
    yield watching
    watching.stop()


def settled(watcher: RepoWatcher) -> None:
    assert watcher.sync() and watcher.wait_idle()


def test_a_folder_moved_to_the_trash_is_named_as_someone_elses(
    repo: Path, package: Path, watcher: RepoWatcher, tmp_path: Path,
) -> None:
    os.rename(package, tmp_path / "pkg")
    settled(watcher)
    changes = watcher.take_since_snapshot()
    assert "pkg/" in changes.foreign and not changes.uncertain


def test_a_folder_moved_away_while_a_command_writes_directly_is_uncertain(
    repo: Path, package: Path, watcher: RepoWatcher, tmp_path: Path,
) -> None:
    with watcher.agent_running():
        os.rename(package, tmp_path / "pkg")
    settled(watcher)
    changes = watcher.take_since_snapshot()
    assert "pkg/" in changes.uncertain and "pkg/" not in changes.foreign


def test_a_folder_ribbit_empties_and_removes_is_not_someone_elses(repo: Path, package: Path, watcher: RepoWatcher) -> None:
    for name in ("mod.py", "other.py"):
        remove_file(package / name, observer=watcher)  # (undo's way: each file told first, then the empty folders)
    remove_empty_folders(package, repo, observer=watcher)
    assert not package.exists()
    settled(watcher)
    changes = watcher.take_since_snapshot()
    assert not any(p.startswith("pkg") for p in changes.foreign | changes.uncertain)


def test_the_journal_keeps_what_a_removed_folder_took_and_nothing_made_there_after(
    repo: Path, package: Path, tmp_path: Path,
) -> None:
    journal = Journal(repo)
    journal.snapshot("start")
    os.rename(package, tmp_path / "pkg")  # the user's
    package.mkdir()
    (package / "new.py").write_text("NEW = 1\n")  # the agent's, in the same step
    journal.record_step("step 1", foreign=["pkg/"])
    assert journal.agent_paths() == {"pkg/new.py"}
    result = journal.undo_last()
    assert not (package / "new.py").exists() and not (package / "mod.py").exists()
    assert sorted(result.kept) == ["pkg/mod.py", "pkg/other.py"]


def test_a_step_the_journal_could_not_record_keeps_what_a_removed_folder_took(
    repo: Path, package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = Journal(repo)
    journal.snapshot("start")
    os.rename(package, tmp_path / "pkg")
    (repo / "out.txt").write_text("built\n")

    def disk_full(hints: object = ()) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal._worktree, "tree_now", disk_full)  # noqa: SLF001 (a full disk, every time)
    journal.record_step("step 1", foreign=["pkg/"])
    assert journal.has_pending()
    journal.undo_last()
    assert not (repo / "out.txt").exists() and not package.exists()
