"""Snapshots of the working tree as git commits under refs/ribbit/, built with a temporary index.

The user's index, HEAD, branches and stash are never touched: we only add objects and private refs.
A folder that is not a git repository gets a private git dir (under the user's state folder) whose
work tree is that folder, so the same code serves both.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

import git

RIBBIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ribbit", "GIT_AUTHOR_EMAIL": "ribbit@localhost",
    "GIT_COMMITTER_NAME": "ribbit", "GIT_COMMITTER_EMAIL": "ribbit@localhost",
}
GIT_ERRORS = (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, OSError)


class JournalError(Exception):
    """One-line, user-facing."""


def state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ribbit"


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()


class Journal:
    def __init__(self, root: Path, session_id: str | None = None) -> None:
        self.root = root.resolve()
        self.session_id = session_id or new_session_id()
        try:
            self.repo = git.Repo(self.root, search_parent_directories=True)
            self.private = False
            top = Path(self.repo.working_tree_dir or self.root).resolve()
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            self.repo = self._private_repo()
            self.private = True
            top = self.root
        self.top = top
        # A private git dir has no .git in the work tree: every command must be told both places.
        self.env = {**os.environ}
        if self.private:
            self.env.update(GIT_DIR=str(self.repo.git_dir), GIT_WORK_TREE=str(self.root))
        # Only the part of the work tree ribbit was started in belongs to this session.
        self.scope = "." if top == self.root else self.root.relative_to(top).as_posix()
        self.snapshots: list[str] = []

    @property
    def kind(self) -> str:
        return f"private journal in {self.repo.git_dir}" if self.private else f"git refs/ribbit/ in {self.repo.git_dir}"

    def ref(self, index: int) -> str:
        return f"refs/ribbit/{self.session_id}/{index}"

    def snapshot(self, label: str) -> str:
        """Commit the current working tree (tracked + untracked non-ignored files); returns its sha."""
        try:
            with self._temp_index() as env:
                self.repo.git.execute(["git", "add", "-A", "--", self.scope], env=env)
                tree = self.repo.git.execute(["git", "write-tree"], env=env).strip()
            parent = ["-p", self.snapshots[-1]] if self.snapshots else []
            commit = self.repo.git.execute(
                ["git", "commit-tree", tree, *parent, "-m", f"ribbit {self.session_id}: {label}"],
                env={**self.env, **RIBBIT_IDENTITY},
            ).strip()
            self.repo.git.execute(["git", "update-ref", self.ref(len(self.snapshots)), commit], env=self.env)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot snapshot the working tree: {_one_line(exc)}") from None
        self.snapshots.append(commit)
        return commit

    def patch(self, start: int = 0) -> str:
        """`git diff` from snapshot `start` to the working tree now (as a fresh snapshot's tree)."""
        if not self.snapshots:
            return ""
        current = self.snapshot("end")
        try:
            out = self.repo.git.execute(
                ["git", "diff", "--binary", "--no-color", "--no-ext-diff", self.snapshots[start], current,
                 "--", self.scope],
                strip_newline_in_stdout=False, env=self.env,
            )
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot compute the session's patch: {_one_line(exc)}") from None
        if self.scope != ".":
            # Paths in the patch should be relative to the folder ribbit runs in.
            out = out.replace(f" a/{self.scope}/", " a/").replace(f" b/{self.scope}/", " b/")
            out = out.replace(f"--- a/{self.scope}/", "--- a/").replace(f"+++ b/{self.scope}/", "+++ b/")
        return out

    # -- plumbing -------------------------------------------------------------------------------

    @contextmanager
    def _temp_index(self) -> Iterator[dict[str, str]]:
        """A throwaway index, seeded from the user's so unchanged files are not re-hashed."""
        folder = tempfile.mkdtemp(prefix="ribbit-index-")
        index = Path(folder) / "index"
        user_index = Path(self.repo.git_dir) / "index"
        if user_index.is_file() and not self.private:
            shutil.copyfile(user_index, index)
        try:
            yield {**self.env, "GIT_INDEX_FILE": str(index)}
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _private_repo(self) -> git.Repo:
        key = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        git_dir = state_home() / "journals" / f"{self.root.name}-{key}.git"
        try:
            if not git_dir.exists():
                git_dir.parent.mkdir(parents=True, exist_ok=True)
                repo = git.Repo.init(git_dir, bare=True)
                repo.git.config("core.bare", "false")
                repo.git.config("core.worktree", str(self.root))
            return git.Repo(git_dir)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot create the private journal in {git_dir}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip()
    return " ".join(text.split())[:300]
