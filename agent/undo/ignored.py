"""Git-ignored files and the undo journal: which ones it records, which it leaves outside, and what
changed outside it.

Users keep what matters most in ignored files (`.env`, local settings) and code runs from ignored folders
(`.venv`, `node_modules`). The journal records ignored files like any other, within a budget: a folder
git reports as ignored as a whole is recorded when it fits in what is left of the budget, and left
outside the journal when it does not or when it is an installed environment (a virtualenv, site-packages,
node_modules: thousands of files, rebuilt by an install, and read by nothing the agent needs undone).
What is left outside is named (`outside`), never read again each step, and checked once at the end of a
task that ran a writable command: every file or folder there whose inode changed since the task began
(ctime, which no program can set back), or that is gone, is named to the user, and so is every folder the
check could not look into (unreadable, too deep, past its entry limit). Folders count against the budget
as files do (git lists a folder holding no file at every snapshot), and a file that is gone gives its
share back.

The budget, measured with `python -m bench.journal --ignored-files N` (docs/performance.md): recording an
ignored file costs its hashing once and an lstat each step, so the count bounds the per-step cost and the
bytes bound the one-time cost and the disk the journal's objects take.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Container, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agent.fs import is_git_dir_name
from agent.undo.runs_later import ENVIRONMENT_FOLDERS, is_environment_folder
from agent.fs import ALWAYS_UNSAFE, DIR_FLAGS, drop_bits, open_dir_confined

# Tools' caches: journaled like any ignored file (a planted .pyc runs like the source it stands for), but
# not named to the user as changed files: every test run rewrites them.
CACHE_FOLDERS = frozenset({
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".cache", ".coverage_cache",
    ".pyre", ".pytype", ".parcel-cache", ".eslintcache", ".turbo",
})

# Compiled Python in a cache folder: imported instead of its source, so a change to one is always named.
COMPILED = (".pyc", ".pyo")

IGNORED_FILES_BUDGET = 2_000
IGNORED_BYTES_BUDGET = 64 * 1024 * 1024
# The end-of-task check of what was left outside looks at this many entries at most (~0.5 s).
OUTSIDE_WALK_LIMIT = 200_000
# Walks of ignored folders open one descriptor per level: deeper folders are named as not looked into.
MAX_WALK_DEPTH = 128


@dataclass
class IgnoredFiles:
    """The journal's record of ignored paths in one work tree (paths relative to its top)."""

    files_budget: int = field(default_factory=lambda: IGNORED_FILES_BUDGET)
    bytes_budget: int = field(default_factory=lambda: IGNORED_BYTES_BUDGET)
    admitted: set[str] = field(default_factory=set)  # ignored files the journal records
    outside: dict[str, str] = field(default_factory=dict)  # path (`dir/` for a folder) -> why it is not recorded
    pinned: set[str] = field(default_factory=set)  # touched by the agent's Write/Edit: recorded wherever they are
    # Admitted files that are gone since: they give their share of the budget back (or creating and deleting
    # 2,000 files would leave every later ignored file, the user's too, outside), and stay out of the patch.
    released: set[str] = field(default_factory=set)
    sizes: dict[str, int] = field(default_factory=dict)  # admitted path -> the size it was counted with
    # Paths left outside known to exist (since the task began, or since they were left outside): one of them
    # gone at the end of a task is named as changed.
    there: set[str] = field(default_factory=set)
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
                    self.there.add(rel)
                    problems.append((rel, why))
            else:
                size = _size(top_fd, rel)
                if self._fits(1, size):
                    self._admit([(rel, size)])
                    chosen.add(rel)
                else:
                    why = self._budget_note()
                    self.outside[rel] = why
                    self.there.add(rel)
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

    def release(self, gone: list[str]) -> None:
        """Admitted files no longer on disk: their count and bytes go back to the budget."""
        for rel in gone:
            if rel in self.admitted:
                self.admitted.discard(rel)
                self.released.add(rel)
                self.files -= 1
                self.bytes -= self.sizes.pop(rel, 0)

    def not_in_patch(self) -> set[str]:
        """The recorded paths git ignored: the files admitted here (gone ones too), and pinned ones outside."""
        return self.admitted | self.released | {p for p in self.pinned if self.is_outside(p)}

    def mark_present(self, top: Path) -> None:
        """At a task's start: which paths left outside exist (one of them gone at its end is named)."""
        found: set[str] = set()
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            for rel in list(self.outside):
                try:
                    os.stat(rel.rstrip("/"), dir_fd=top_fd, follow_symlinks=False)
                except OSError:
                    continue
                found.add(rel)
        finally:
            os.close(top_fd)
        self.there = found

    def changed_outside(self, top: Path, since_ns: int) -> OutsideChanges:
        """What changed among the paths left outside the journal at or after `since_ns` (ctime, which no
        program can set back): files, folders where something was added, removed, renamed or whose mode
        changed, and paths that were there (see `there`) and are gone; the setuid, setgid,
        sticky or world-write bits taken off them (no command may leave them, see agent.fs); and the
        folders the walk could not look into (unreadable, too deep, past OUTSIDE_WALK_LIMIT entries),
        so that what it did not see is said, never passed over."""
        report = OutsideChanges()
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return report
        walk = _Walk(top_fd, since_ns, report)
        try:
            for rel in sorted(self.outside):
                path = rel.rstrip("/")
                try:
                    st = os.stat(path, dir_fd=top_fd, follow_symlinks=False)
                except OSError:
                    if rel in self.there:
                        self.there.discard(rel)
                        report.changed.append(rel)  # removed (or moved away) during the task
                    continue
                if not rel.endswith("/") or not stat.S_ISDIR(st.st_mode):
                    if st.st_ctime_ns >= since_ns:
                        report.changed.append(rel)
                    continue
                if walk.seen > OUTSIDE_WALK_LIMIT:
                    report.unchecked.append((rel, f"past the {OUTSIDE_WALK_LIMIT:,} entries the check looks at"))
                    continue
                walk.folder(path, st)
            for rel in report.changed:
                path = rel.rstrip("/") or "."
                try:
                    st = os.stat(path, dir_fd=top_fd, follow_symlinks=False)
                except OSError:
                    continue
                bits = stat.S_IMODE(st.st_mode) & ALWAYS_UNSAFE
                if bits and not stat.S_ISLNK(st.st_mode) and drop_bits(top_fd, path, st, bits) is not None:
                    report.stripped.append(rel)
        finally:
            os.close(top_fd)
        report.changed = sorted(set(report.changed))
        return report

    def _folder(self, top_fd: int, rel: str, tracked: Container[str]) -> tuple[list[str], str | None]:
        """The files of an ignored folder if it fits in the budget (None), else why it is left outside."""
        name = rel.rpartition("/")[2]
        if name in ENVIRONMENT_FOLDERS:
            return [], "an installed environment, not journaled"
        found: list[tuple[str, int]] = []
        known: list[str] = []
        total = folders = 0
        room_files, room_bytes = self.files_budget - self.files, self.bytes_budget - self.bytes
        try:
            for folder, entries in iter_folder(top_fd, rel):
                if is_environment_folder(folder.rpartition("/")[2], {entry.name for entry in entries}):
                    return [], "an installed environment, not journaled"
                # Folders are bounded too: git lists a folder holding no file again at every snapshot, and
                # 500,000 empty folders (one `mkdir -p`) would be walked each time.
                folders += 1
                if folders > self.files_budget:
                    return [], self._budget_note()
                for entry in entries:
                    if is_git_dir_name(entry.name) or entry.is_dir:
                        continue
                    path = f"{folder}/{entry.name}"
                    if path in tracked:
                        continue
                    if path in self.admitted:  # listed again (a nested repository's folder): counted already
                        known.append(path)
                        continue
                    size = entry.st.st_size if stat.S_ISREG(entry.st.st_mode) else 0
                    found.append((path, size))
                    total += size
                    if len(found) > room_files or total > room_bytes:
                        return [], self._budget_note()
        except WalkError as exc:
            return [], exc.why
        self._admit(found)
        return [p for p, _ in found] + known, None

    def _fits(self, count: int, size: int) -> bool:
        return self.files + count <= self.files_budget and self.bytes + size <= self.bytes_budget

    def _admit(self, found: list[tuple[str, int]]) -> None:
        for rel, size in found:
            if rel not in self.admitted:
                self.admitted.add(rel)
                self.released.discard(rel)
                self.sizes[rel] = size
                self.files += 1
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


@dataclass
class OutsideChanges:
    """The end-of-task check of what is left outside the journal (top-relative paths, `dir/` for folders)."""

    changed: list[str] = field(default_factory=list)
    stripped: list[str] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (folder, why it was not looked into)


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool
    st: os.stat_result


class WalkError(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def iter_folder(top_fd: int, rel: str, max_depth: int = MAX_WALK_DEPTH) -> Iterator[tuple[str, list[Entry]]]:
    """(folder, its entries, lstat'ed) for a top-relative folder and every folder under it, depth first,
    without following links. Only the folders on the current path are open (a folder with 5,000
    subfolders costs no more descriptors than one); WalkError when a folder cannot be read or lies
    deeper than `max_depth` below `rel`."""
    for folder, entries, trouble in walk_folders(top_fd, rel, max_depth):
        if trouble is not None:
            raise WalkError(trouble[1])
        yield folder, entries


def walk_folders(top_fd: int, rel: str, max_depth: int = MAX_WALK_DEPTH) -> Generator[tuple[str, list[Entry], tuple[str, str] | None], None, None]:
    """The one walk of a top-relative folder without links (iter_folder's, undo's): a folder it cannot look
    into comes as (folder, [], (folder, why))."""
    try:
        fd = open_dir_confined(top_fd, rel)
    except OSError as exc:
        yield rel, [], (rel, exc.strerror or "unreadable")
        return
    stack: list[tuple[str, int, list[Entry]]] = []
    try:
        current: tuple[str, int] | None = (rel, fd)
        while current is not None or stack:
            if current is not None:
                folder, dir_fd = current
                current = None
                try:
                    entries = []
                    for item in os.scandir(dir_fd):
                        st = item.stat(follow_symlinks=False)
                        entries.append(Entry(item.name, stat.S_ISDIR(st.st_mode), st))
                except OSError as exc:
                    os.close(dir_fd)
                    yield folder, [], (folder, exc.strerror or "unreadable")
                    continue
                stack.append((folder, dir_fd, [e for e in entries if e.is_dir]))  # closed by `finally` if the caller stops
                yield folder, entries, None
                continue
            folder, dir_fd, subfolders = stack[-1]
            if not subfolders:
                os.close(dir_fd)
                stack.pop()
                continue
            sub = subfolders.pop()
            path = f"{folder}/{sub.name}"
            if len(stack) > max_depth:
                yield path, [], (path, f"more than {max_depth} folders deep")
                continue
            try:
                current = (path, os.open(sub.name, DIR_FLAGS, dir_fd=dir_fd))
            except OSError as exc:
                yield path, [], (path, exc.strerror or "unreadable")
    finally:
        for _folder, dir_fd, _subs in stack:
            os.close(dir_fd)


class _Walk:
    """The end-of-task walk of folders left outside, sharing one entry count across them."""

    def __init__(self, top_fd: int, since_ns: int, report: OutsideChanges) -> None:
        self.top_fd = top_fd
        self.since_ns = since_ns
        self.report = report
        self.seen = 0

    def folder(self, rel: str, st: os.stat_result) -> None:
        changed, since = self.report.changed, self.since_ns
        if st.st_ctime_ns >= since:
            changed.append(rel + "/")
        for folder, entries, trouble in walk_folders(self.top_fd, rel, MAX_WALK_DEPTH):
            if trouble is not None:
                self.report.unchecked.append((trouble[0] + "/", trouble[1]))
                continue
            for entry in entries:
                # A folder's own ctime (chmod, entries added or removed) is read here, before it is opened:
                # one made unreadable by a command is still named.
                if entry.st.st_ctime_ns >= since:
                    changed.append(f"{folder}/{entry.name}" + ("/" if entry.is_dir else ""))
            self.seen += len(entries)
            if self.seen > OUTSIDE_WALK_LIMIT:
                self.report.unchecked.append((rel + "/", f"past the {OUTSIDE_WALK_LIMIT:,} entries the check looks at"))
                return


def is_cache(rel: str) -> bool:
    """Whether a path lies in a tool's cache folder (see CACHE_FOLDERS)."""
    return any(part in CACHE_FOLDERS for part in rel.split("/")[:-1])
