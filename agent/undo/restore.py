"""Undo's restore: check every path an undo touches against the disk, then put the earlier files back.

The journal (agent/undo/journal.py) reads the two states from git and hands them here with a `Place`:
where the work tree is, how paths are shown, how a blob's bytes are read. Nothing here runs git or
knows about refs. Every read and write goes one folder at a time without following links
(agent/fs.py), so nothing is read or written through a link or into `.git`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from agent.fs import (
    DIR_FLAGS, READ_FLAGS, ApplyError, WriteObserver, atomic_symlink, atomic_write, make_special, open_dir_confined,
    remove_empty_dir, remove_empty_folders, remove_file,
)
from agent.git import GitError, one_line, shown
from agent.undo.ignored import walk_folders
from agent.undo.worktree import Blocked, TreeEntry

# What is on disk at a path: a tree entry, nothing, a folder, something else, or no way there.
DiskState = TreeEntry | None | Blocked | str  # str: "folder" | "special"

_NO_ENTRY = TreeEntry("", "")
_AS_LEFT = TreeEntry("as the step left it", "")  # an unrecorded file the disk still shows unchanged


@dataclass(frozen=True)
class Special:
    """A FIFO or socket (git cannot store one: the snapshots' meta records it), by type and permission bits."""

    mode: int


def special_paths(before: dict[str, int], after: dict[str, int]) -> set[str]:
    """Top-relative paths whose FIFO or socket differs between two snapshots (made, removed, changed)."""
    return {p for p in set(before) | set(after) if before.get(p) != after.get(p)}


class RestoreError(Exception):
    """One line, user-facing: why nothing (or not everything) was restored."""


@dataclass(frozen=True)
class Place:
    """What a restore needs of the journal: paths below are relative to `top`."""

    top: Path  # the work tree
    root: Path  # the folder ribbit runs in: emptied folders are pruned up to it, never above
    object_format: str  # "sha1" or "sha256"
    display: Callable[[str], str]  # top-relative -> relative to the folder ribbit runs in
    in_scope: Callable[[str], bool]  # whether a top-relative path is below that folder
    read_blob: Callable[[str], bytes]  # a blob's bytes by its id


class Restored(NamedTuple):
    """What an undo did, paths relative to the folder ribbit runs in."""

    restored: list[str]
    deleted: list[str]
    kept: list[str]
    not_restored: list[tuple[str, str]]


def restore(
    place: Place, before: dict[str, TreeEntry], after: dict[str, TreeEntry], paths: list[str], *,
    unrecorded_target: dict[str, tuple[int, int]], unrecorded_latest: dict[str, tuple[int, int]],
    foreign: set[str], mixed: set[str], observer: WriteObserver | None = None, uncopied_target: AbstractSet[str] = frozenset(),
    specials_before: dict[str, int] | None = None, specials_after: dict[str, int] | None = None,
) -> Restored:
    """Go back from `after` (what the disk must still show) to `before` over the `paths` that differ.

    `foreign`: paths only someone else changed (kept as they are); `mixed`: paths both changed (refused);
    `unrecorded_*`: files too large to record, (size, mtime_ns) at the target and at the latest snapshot;
    `specials_*`: the FIFOs and sockets (path -> mode) at the target and at the latest snapshot.
    Raises RestoreError (nothing restored) when a file differs from what the undone step left."""
    # Files too large to record: the latest snapshot says what the disk must still show (an older step's
    # entry is superseded by what the latest holds); put back from the target where it has them,
    # removed where they did not exist then.
    unrecorded, lost, not_restored = too_large(
        place, unrecorded_target, unrecorded_latest, before, foreign, uncopied=uncopied_target,
    )
    specials_before, specials_after = specials_before or {}, specials_after or {}
    paths = sorted((set(paths) | special_paths(specials_before, specials_after)) - set(lost))
    candidates = sorted(set(paths) | set(unrecorded))
    environments = new_environments(before, after)
    if environments:
        # `mv .venv venv2`: the environment's old name was never journaled (environments are left
        # outside), so undo cannot bring it back; removing venv2 would leave the user with none.
        inside = {p for p in candidates if p not in before and any(p.startswith(e + "/") for e in environments)}
        candidates = [p for p in candidates if p not in inside]
        for p in inside:
            unrecorded.pop(p, None)
        not_restored += [(place.display(e) + "/", "a Python environment this step made (perhaps moved from a name "
                          "undo does not hold): left in place, remove it yourself if unwanted") for e in environments]
    plan = UndoPlan(
        place, before, after, [p for p in candidates if p not in foreign], observer, expected=unrecorded,
        specials_before=specials_before, specials_after=specials_after,
    )
    problem = plan.check(mixed)
    if problem:
        raise RestoreError(f"cannot undo: {problem}; nothing was restored")
    restored, deleted = plan.run()
    return Restored(
        [place.display(p) for p in restored], [place.display(p) for p in deleted],
        [place.display(p) for p in paths if p in foreign], not_restored,
    )


def too_large(
    place: Place, then: dict[str, tuple[int, int]], now: dict[str, tuple[int, int]], before: dict[str, TreeEntry],
    foreign: set[str], *, uncopied: AbstractSet[str] = frozenset(),
) -> tuple[dict[str, tuple[int, int]], list[str], list[tuple[str, str]]]:
    """For an undo back to a target whose files too large to record were `then`, given those files as the
    undone state has them (`now`: path -> (size, mtime_ns), what the disk must still show): those undo puts
    back or removes, those it leaves alone (too large already at the target and changed or gone since; or
    as the target had them still), and what the user is told of them. `uncopied`: of `then`, the files the
    target did not copy because a step made them (NEW_FILE_COPY_LIMIT) or past the write quota."""
    unrecorded = dict(now)
    lost: list[str] = []
    same: list[str] = []  # the disk still shows them as the target had them: nothing to put back
    for p, was in then.items():
        if p in foreign or not place.in_scope(p):
            continue
        if unrecorded.get(p) != was:
            (same if p not in unrecorded and stat_is(place.top, p, was) else lost).append(p)
        unrecorded.pop(p, None)
    not_restored = [
        (place.display(p), "a file a step made (over 1 MiB) or past the write quota: the journal kept no copy of "
         "this version" if p in uncopied else "too large to record; no earlier copy in the journal")
        for p in sorted(lost)
    ]
    if lost:
        # Its bytes may be in a file the step made (`mv data.csv x.csv`): such a file is left, not removed.
        for p in sorted(q for q in unrecorded if q not in before):
            del unrecorded[p]
            not_restored.append((place.display(p), "too large to record; left in place: it may hold what was lost"))
    for p in [q for q in unrecorded if q in foreign or not place.in_scope(q)]:
        del unrecorded[p]
    return unrecorded, lost + same, not_restored


def new_environments(before: dict[str, TreeEntry], after: dict[str, TreeEntry]) -> list[str]:
    """Folders that appeared whole between two snapshots as a Python virtualenv (pyvenv.cfg and an
    activate script). A folder that held anything before is not one: planting a pyvenv.cfg in the
    user's folder must not keep undo from putting it back."""
    found = [p.rpartition("/")[0] for p in after if p.endswith("/pyvenv.cfg") and p not in before]
    found = [e for e in found if f"{e}/bin/activate" in after or f"{e}/Scripts/activate" in after]
    return sorted(e for e in found if not any(p.startswith(e + "/") for p in before))


class UndoPlan:
    """Checks every path an undo touches against the disk first, then carries it out."""

    def __init__(
        self, place: Place, before: dict[str, TreeEntry], after: dict[str, TreeEntry], paths: list[str],
        observer: WriteObserver | None = None, expected: dict[str, tuple[int, int]] | None = None, *,
        specials_before: dict[str, int] | None = None, specials_after: dict[str, int] | None = None,
    ) -> None:
        self.place = place
        self.observer = observer
        # Paths a step could not record: the disk must still show them with this (size, mtime_ns).
        self.expected = expected or {}
        self.before = before  # the state undo goes back to
        self.after = after  # the state undo takes back (what the disk must still show)
        # The FIFOs and sockets (top-relative path -> mode) undo goes back to, and those the disk must still show.
        self.specials_before = specials_before or {}
        self.specials_after = specials_after or {}
        self.paths = [p for p in paths if before.get(p, _NO_ENTRY).mode != "160000" and after.get(p, _NO_ENTRY).mode != "160000"]
        self.removals: list[str] = []  # files and links the agent made, to delete
        self.folders: list[str] = []  # folders in the way of a file to put back (emptied first)
        self.writes: list[tuple[str, TreeEntry]] = []
        self.remakes: list[tuple[str, int]] = []  # FIFOs and sockets a step removed, to make again

    def check(self, mixed: set[str]) -> str | None:
        """The first reason the undo would lose someone's work (None: safe to go ahead)."""
        display, top = self.place.display, self.place.top
        conflicts = sorted(p for p in self.paths if p in mixed)
        states: dict[str, DiskState | Special] = {
            rel: (_AS_LEFT if stat_is(top, rel, self.expected[rel]) else "changed")
            if rel in self.expected else disk_state(top, rel, self.place.object_format)
            for rel in self.paths
        }
        for rel, now in states.items():
            if now == "special":  # a FIFO or socket is told apart by its type and bits (a device is not)
                mode = special_at(top, rel)
                states[rel] = Special(mode) if mode is not None else now
        for rel, now in states.items():
            if rel in self.expected:
                if now is not _AS_LEFT:
                    conflicts.append(rel)
                continue
            had: TreeEntry | Special | None = (
                Special(self.specials_after[rel]) if rel in self.specials_after else self.after.get(rel)
            )
            if isinstance(now, Blocked):
                now = None  # nothing of ours is at that path: through a link it is not in the tree
            if now != had and not (now == "folder" and had is None):
                conflicts.append(rel)
        if conflicts:
            conflicts = sorted(set(conflicts))
            names = ", ".join(shown(display(p)) for p in conflicts[:5]) + (" ..." if len(conflicts) > 5 else "")
            return f"{names} changed after the agent's change (by you or another program)"
        removable = {rel for rel in self.paths if rel not in self.before and states[rel] not in (None, "folder") and not isinstance(states[rel], Blocked)}
        for rel in sorted(self.paths):
            want, now, remake = self.before.get(rel), states[rel], self.specials_before.get(rel)
            if want is None and remake is None:
                if rel in removable:
                    self.removals.append(rel)
                continue
            if remake is not None and rel in removable:
                self.removals.append(rel)  # what the step put in its place goes first (a file over a folder stays)
            if isinstance(now, Blocked):
                if now.at not in removable:
                    return f"{shown(display(now.at))} is {now.kind} now, where undo must put back {shown(display(rel))}"
            elif now == "folder":
                inside = files_under(top, rel)
                if isinstance(inside, Blocked):
                    return f"cannot read {shown(display(inside.at))}, where undo must put back {shown(display(rel))}"
                strays = [p for p in inside if p not in removable]
                if strays:
                    return (
                        f"{shown(display(strays[0]))} is not the agent's (undo would have to remove the folder "
                        f"{shown(display(rel))} to put that file back)"
                    )
                self.folders.append(rel)
            if remake is not None:
                self.remakes.append((rel, remake))
            else:
                assert want is not None
                self.writes.append((rel, want))
        return None

    def run(self) -> tuple[list[str], list[str]]:
        """Delete what the agent made, clear folders in the way, write the earlier files back."""
        top = self.place.top
        restored: list[str] = []
        deleted: list[str] = []
        current = ""
        try:
            for rel in self.removals:
                current = rel
                remove_file(top / rel, self.observer)
                deleted.append(rel)
            for rel in sorted(self.folders, key=lambda p: -p.count("/")):
                current = rel
                remove_empty_tree(top / rel, self.observer)
            for rel in deleted:
                self._prune(top / rel)
            for rel, entry in self.writes:
                current = rel
                data = self.place.read_blob(entry.sha)
                if entry.mode == "120000":
                    atomic_symlink(top / rel, os.fsdecode(data))
                else:
                    atomic_write(top / rel, data, allow_binary=True, executable=entry.mode == "100755", observer=self.observer)
                restored.append(rel)
            for rel, mode in self.remakes:
                current = rel
                make_special(top / rel, mode, self.observer)
                restored.append(rel)
        except (OSError, GitError) as exc:
            what = exc.strerror if isinstance(exc, OSError) and not isinstance(exc, ApplyError) and exc.strerror else str(exc)
            done = f" (already restored: {', '.join(shown(self.place.display(p)) for p in restored + deleted)})" if restored or deleted else ""
            raise RestoreError(f"cannot restore {shown(self.place.display(current))}: {one_line(what)}{done}") from None
        put_back = set(restored)  # a FIFO replaced by what it was is restored, not removed
        return restored, [rel for rel in deleted if rel not in put_back]

    def _prune(self, path: Path) -> None:
        remove_empty_folders(path.parent, self.place.root, self.observer)


def remove_empty_tree(path: Path, observer: WriteObserver | None = None) -> None:
    """Remove a folder whose only content is empty folders (its files are already gone)."""
    for folder, dirs, files in os.walk(path, topdown=False, followlinks=False):
        if files:
            raise ApplyError(f"refusing to remove {folder}: it is not empty")
        for name in dirs:
            if not remove_empty_dir(Path(folder) / name, observer):
                raise ApplyError(f"refusing to remove {Path(folder) / name}: it is not empty")
    if not remove_empty_dir(path, observer):
        raise ApplyError(f"refusing to remove {path}: it is not empty")


# -- reading the disk without links ---------------------------------------------------------------


def disk_state(top: Path, rel: str, object_format: str) -> DiskState:
    """What is on disk at a top-relative path, reached one folder at a time without links."""
    parts = rel.split("/")
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return Blocked(".", "unreadable")
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                return Blocked("/".join(parts[: i + 1]), _blocking_kind(fd, part, exc))
            os.close(fd)
            fd = next_fd
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError:
            return Blocked(rel, "unreadable")
        if stat.S_ISLNK(st.st_mode):
            return TreeEntry("120000", blob_id(os.readlink(os.fsencode(name), dir_fd=fd), object_format))
        if stat.S_ISDIR(st.st_mode):
            return "folder"
        if not stat.S_ISREG(st.st_mode):
            return "special"
        try:
            handle = os.open(name, READ_FLAGS, dir_fd=fd)
        except OSError:
            return Blocked(rel, "unreadable")
        try:
            fst = os.fstat(handle)
            if not stat.S_ISREG(fst.st_mode):
                return "special"
            return TreeEntry("100755" if fst.st_mode & stat.S_IXUSR else "100644", object_id_of_fd(handle, fst.st_size, object_format))
        finally:
            os.close(handle)
    finally:
        os.close(fd)


def special_at(top: Path, rel: str) -> int | None:
    """The type and permission bits of the FIFO or socket at a top-relative path (lstat only, reached without
    links; never opened); None when something else or nothing is there."""
    st = _lstat_confined(top, rel)
    if st is None or not (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
        return None
    return stat.S_IFMT(st.st_mode) | stat.S_IMODE(st.st_mode)


def stat_is(top: Path, rel: str, expected: tuple[int, int]) -> bool:
    """Whether a top-relative path is a regular file with this (size, mtime_ns), reached without links."""
    st = _lstat_confined(top, rel)
    return st is not None and stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) == expected


def _lstat_confined(top: Path, rel: str) -> os.stat_result | None:
    """lstat of a top-relative path, its folders reached without following links; None when not there."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = open_dir_confined(top, parent) if parent else os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def files_under(top: Path, rel: str) -> list[str] | Blocked:
    """Every non-folder entry under a top-relative folder, found without following links."""
    try:
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return Blocked(rel, "unreadable")
    found: list[str] = []
    walk = walk_folders(top_fd, rel)
    try:
        for folder, entries, trouble in walk:
            if trouble is not None:
                return Blocked(trouble[0], "unreadable")
            found += [f"{folder}/{entry.name}" for entry in entries if not entry.is_dir]
    finally:
        walk.close()  # closes the folders still open
        os.close(top_fd)
    return found


def blob_id(data: bytes, object_format: str) -> str:
    """The object id git gives a blob holding `data` (sha1 or sha256, as the repository uses)."""
    digest = hashlib.new(object_format)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def object_id_of_fd(fd: int, size: int, object_format: str) -> str:
    """Streamed, so a huge file costs no memory; a file still growing gets an id nothing matches."""
    digest = hashlib.new(object_format)
    digest.update(b"blob %d\0" % size)
    total = 0
    while total <= size and (chunk := os.read(fd, 1 << 20)):
        digest.update(chunk)
        total += len(chunk)
    return digest.hexdigest() if total == size else "changing"


def _blocking_kind(fd: int, part: str, exc: OSError) -> str:
    try:
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    return "a file" if stat.S_ISREG(st.st_mode) else "not a folder"
