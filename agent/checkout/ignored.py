"""Git-ignored files and the undo journal: which ones it records, which it leaves outside, and what
changed outside it.

Users keep what matters most in ignored files (`.env`, local settings) and code runs from ignored folders
(`.venv`, `node_modules`). The journal records ignored files like any other, within a budget: a folder
git reports as ignored as a whole is recorded when it fits in what is left of the budget, and left
outside the journal when it does not or when it is an installed environment (a virtualenv, site-packages,
node_modules: thousands of files, rebuilt by an install, and read by nothing the agent needs undone).
What is left outside is named (`outside`), never read again each step, and checked once at the end of a
task that ran a writable command: every file or folder there whose inode changed since the task began
(ctime, which no program can set back) is named to the user.

The budget, measured with `python -m bench.journal --ignored-files N` (docs/performance.md): recording an
ignored file costs its hashing once and an lstat each step, so the count bounds the per-step cost and the
bytes bound the one-time cost and the disk the journal's objects take.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from agent.fs import is_git_dir_name
from agent.checkout.runs_later import ENVIRONMENT_FOLDERS, is_environment_folder
from agent.fs import ALWAYS_UNSAFE, DIR_FLAGS, drop_bits, open_dir_confined

# Tools' caches: journaled like any ignored file (a planted .pyc runs like the source it stands for), but
# not named to the user as changed files: every test run rewrites them.
CACHE_FOLDERS = frozenset({
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".cache", ".coverage_cache",
    ".pyre", ".pytype", ".parcel-cache", ".eslintcache", ".turbo",
})

IGNORED_FILES_BUDGET = 2_000
IGNORED_BYTES_BUDGET = 64 * 1024 * 1024
# The end-of-task check of what was left outside looks at this many entries at most (~0.5 s).
OUTSIDE_WALK_LIMIT = 200_000


@dataclass
class IgnoredFiles:
    """The journal's record of ignored paths in one work tree (paths relative to its top)."""

    files_budget: int = field(default_factory=lambda: IGNORED_FILES_BUDGET)
    bytes_budget: int = field(default_factory=lambda: IGNORED_BYTES_BUDGET)
    admitted: set[str] = field(default_factory=set)  # ignored files the journal records
    outside: dict[str, str] = field(default_factory=dict)  # path (`dir/` for a folder) -> why it is not recorded
    pinned: set[str] = field(default_factory=set)  # touched by the agent's Write/Edit: recorded wherever they are
    files: int = 0
    bytes: int = 0

    def select(
        self, top_fd: int, listing: list[str], tracked: Container[str] = frozenset(),
    ) -> tuple[set[str], list[tuple[str, str]]]:
        """From git's list of ignored paths (files, and `dir/` for a folder ignored as a whole): the files
        the journal records now, and (path, why) for each one newly left outside. The user's tracked files
        are recorded as such, whatever .gitignore says: they are not counted here."""
        chosen: set[str] = set()
        problems: list[tuple[str, str]] = []
        for rel in listing:
            if rel in tracked:
                continue
            if rel in self.admitted:
                chosen.add(rel)
            elif rel in self.outside:
                continue
            elif rel.endswith("/"):
                found, why = self._folder(top_fd, rel.rstrip("/"), tracked)
                if why is None:
                    chosen.update(found)
                else:
                    self.outside[rel] = why
                    problems.append((rel, why))
            else:
                size = _size(top_fd, rel)
                if self._fits(1, size):
                    self._admit([rel], size)
                    chosen.add(rel)
                else:
                    why = self._budget_note()
                    self.outside[rel] = why
                    problems.append((rel, why))
        return chosen, problems

    def pin(self, rel: str) -> None:
        """A path the agent's own Write/Edit touched: recorded every step from now on, wherever it is."""
        self.pinned.add(rel)

    def is_outside(self, rel: str) -> bool:
        """Whether a path is left outside the journal (itself, or a folder above it)."""
        if rel in self.outside:
            return True
        parts = rel.split("/")
        return any("/".join(parts[:i]) + "/" in self.outside for i in range(1, len(parts)))

    def not_in_patch(self) -> set[str]:
        """The recorded paths git ignores: the files admitted here, and pinned ones outside."""
        return self.admitted | {p for p in self.pinned if self.is_outside(p)}

    def changed_outside(self, top: Path, since_ns: int) -> tuple[list[str], list[str]]:
        """Paths left outside the journal whose inode changed at or after `since_ns` (ctime), sorted: files,
        and folders where something was added, removed or renamed; and those of them whose setuid, setgid,
        sticky or world-write bits were taken off (no command may leave them, see agent.fs)."""
        changed: list[str] = []
        stripped: list[str] = []
        seen = 0
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return [], []
        try:
            for rel in sorted(self.outside):
                if not rel.endswith("/"):
                    try:
                        st = os.stat(rel, dir_fd=top_fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone: its folder's ctime names the change
                    if st.st_ctime_ns >= since_ns:
                        changed.append(rel)
                    continue
                seen = _changed_under(top_fd, rel.rstrip("/"), since_ns, changed, seen)
                if seen > OUTSIDE_WALK_LIMIT:
                    break
            for rel in changed:
                path = rel.rstrip("/") or "."
                try:
                    st = os.stat(path, dir_fd=top_fd, follow_symlinks=False)
                except OSError:
                    continue
                bits = stat.S_IMODE(st.st_mode) & ALWAYS_UNSAFE
                if bits and not stat.S_ISLNK(st.st_mode) and drop_bits(top_fd, path, st, bits) is not None:
                    stripped.append(rel)
        finally:
            os.close(top_fd)
        return sorted(set(changed)), stripped

    def _folder(self, top_fd: int, rel: str, tracked: Container[str]) -> tuple[list[str], str | None]:
        """The files of an ignored folder if it fits in the budget (None), else why it is left outside."""
        name = rel.rpartition("/")[2]
        if name in ENVIRONMENT_FOLDERS:
            return [], "an installed environment, not journaled"
        found: list[tuple[str, int]] = []
        total = 0
        room_files, room_bytes = self.files_budget - self.files, self.bytes_budget - self.bytes
        try:
            fd = open_dir_confined(top_fd, rel)
        except OSError:
            return [], "unreadable"
        stack = [(rel, fd)]
        try:
            while stack:
                folder, dir_fd = stack.pop()
                try:
                    entries = list(os.scandir(dir_fd))
                    if is_environment_folder(folder.rpartition("/")[2], {entry.name for entry in entries}):
                        return [], "an installed environment, not journaled"
                    for entry in entries:
                        if is_git_dir_name(entry.name):
                            continue
                        path = f"{folder}/{entry.name}"
                        st = entry.stat(follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            stack.append((path, os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)))
                            continue
                        if path in tracked:
                            continue
                        found.append((path, st.st_size))
                        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
                        if len(found) > room_files or total > room_bytes:
                            return [], self._budget_note()
                finally:
                    os.close(dir_fd)
        except OSError:
            return [], "unreadable"
        finally:
            for _folder, dir_fd in stack:
                os.close(dir_fd)
        self._admit([p for p, _ in found], total)
        return [p for p, _ in found], None

    def _fits(self, count: int, size: int) -> bool:
        return self.files + count <= self.files_budget and self.bytes + size <= self.bytes_budget

    def _admit(self, paths: list[str], size: int) -> None:
        self.admitted.update(paths)
        self.files += len(paths)
        self.bytes += size

    def _budget_note(self) -> str:
        return (
            f"git-ignored, past the journal's budget for ignored files ({self.files_budget:,} files, "
            f"{self.bytes_budget >> 20} MiB)"
        )


def _size(top_fd: int, rel: str) -> int:
    try:
        return os.stat(rel, dir_fd=top_fd, follow_symlinks=False).st_size
    except OSError:
        return 0


def _changed_under(top_fd: int, rel: str, since_ns: int, changed: list[str], seen: int) -> int:
    """Append what changed under a folder (itself included) to `changed`; returns the entries seen so far."""
    try:
        fd = open_dir_confined(top_fd, rel)
    except OSError:
        return seen
    stack = [(rel, fd)]
    try:
        while stack and seen <= OUTSIDE_WALK_LIMIT:
            folder, dir_fd = stack.pop()
            try:
                if os.fstat(dir_fd).st_ctime_ns >= since_ns:
                    changed.append(folder + "/")
                for entry in os.scandir(dir_fd):
                    seen += 1
                    st = entry.stat(follow_symlinks=False)
                    path = f"{folder}/{entry.name}"
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            stack.append((path, os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)))
                        except OSError:
                            continue
                    elif st.st_ctime_ns >= since_ns:
                        changed.append(path)
            except OSError:
                pass
            finally:
                os.close(dir_fd)
    finally:
        for _folder, dir_fd in stack:
            os.close(dir_fd)
    return seen


def is_cache(rel: str) -> bool:
    """Whether a path lies in a tool's cache folder (see CACHE_FOLDERS)."""
    return any(part in CACHE_FOLDERS for part in rel.split("/")[:-1])
