"""The undo journal: snapshots of the working tree as git commits under refs/ribbit/.

Snapshots never touch the user's index, HEAD, branches or stash: the journal keeps its own index
(a temporary file) and only adds objects and private refs. A folder that is not a git repository
gets a private git dir (under the user's state folder) whose work tree is that folder, so the
same code serves both. Every git call goes through agent/git.py (nothing a config names runs).
How the work tree becomes a tree object (exact bytes, no filters, nested repositories and
unstorable paths handled, never failing on a path the agent made): agent/undo/worktree.py.

Refs: `refs/ribbit/<session>/<n>` is snapshot n of a session (0 = its start);
`refs/ribbit/<session>/undone/<n>` keeps a step that /undo took back (so it is never lost);
`refs/ribbit/<session>/reverted` marks a session that `ribbit undo SESSION` rolled back.

Undo restores exact bytes and modes. It first compares every file it would touch, on disk and
through no link, with the snapshot it takes back, and refuses (naming the file, restoring
nothing) if it differs: changed by the user afterwards, hidden by .gitignore and then edited, a
folder the user put files in, a link planted where a folder was. Writes walk folders one at a
time with O_NOFOLLOW (agent/fs.py), so nothing is written through a link or into `.git`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

from agent.fs import (
    TEMP_SUFFIX, ApplyError, WriteObserver, atomic_symlink, atomic_write, remove_empty_dir, remove_empty_folders, remove_file,
)
from agent.git import (
    GitError,
    GitRepo,
    find_repository,
    init_private_repository,
    one_line,
    remember_session_repo,
    shown,
)
from agent.undo.ignored import OutsideChanges
from agent.undo.worktree import Blocked, TreeEntry, WorkTreeIndex
from agent.fs import DIR_FLAGS, READ_FLAGS, open_dir_confined
from agent.paths import new_session_id, private_git_dir

RIBBIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ribbit", "GIT_AUTHOR_EMAIL": "ribbit@localhost",
    "GIT_COMMITTER_NAME": "ribbit", "GIT_COMMITTER_EMAIL": "ribbit@localhost",
}
GIT_ERRORS = (GitError, OSError, ValueError)
NAMESPACE = "refs/ribbit"
NOTICE_NAMES = 3
PATCH_PATHS = 1_000  # paths named on one `git diff` command line
META_PREFIX = "ribbit-meta: "


class JournalError(Exception):
    """One-line, user-facing."""


class UndoResult(BaseModel):
    """What an undo did, paths relative to the folder ribbit runs in."""

    session_id: str
    undone: str  # "step 3" or "session"
    restored: list[str]  # written back with their earlier bytes
    deleted: list[str]  # files the agent had created, removed again
    kept: list[str] = []  # changed only by the user during the step: left as the user has them
    # Changed by the undone steps but with no earlier bytes in the journal (path, why): left as they are.
    not_restored: list[tuple[str, str]] = []

    def summary(self) -> str:
        parts = [f"undid session {self.session_id}" if self.undone == "session" else f"undid {self.undone} of session {self.session_id}"]
        if self.restored:
            parts.append("restored " + ", ".join(map(shown, self.restored)))
        if self.deleted:
            parts.append("removed " + ", ".join(map(shown, self.deleted)))
        if self.kept:
            parts.append("kept your changes to " + ", ".join(map(shown, self.kept)))
        if self.not_restored:
            parts.append("NOT restored: " + ", ".join(f"{shown(p)} ({why})" for p, why in self.not_restored))
        if not self.restored and not self.deleted and not self.not_restored:
            parts.append("no files needed restoring")
        return "; ".join(parts)


class SessionInfo(BaseModel):
    session_id: str
    started: float  # unix time of the start snapshot
    steps: int  # snapshots after the start (steps that changed files)
    files: list[str]  # paths that differ between the session's start and its last snapshot
    reverted: bool


# What is on disk at a path: a tree entry, nothing, a folder, something else, or no way there.
DiskState = TreeEntry | None | Blocked | str  # str: "folder" | "special"


def journal_kind(root: Path) -> str:
    """What `ribbit doctor` reports, without creating anything."""
    try:
        repo = find_repository(root.resolve())
    except GitError as exc:
        return f"unavailable: {exc}"
    if repo is not None:
        return f"git refs/ribbit/ in {repo.git_dir}"
    return f"not a git repository: private journal in {private_git_dir(root)}"


class Journal:
    def __init__(self, root: Path, session_id: str | None = None, namespace: str = NAMESPACE, *,
                 private: bool | None = None) -> None:
        """`private`: None = the repository `root` is in if any, else the private journal;
        True = the private journal (`ribbit undo` looks there too)."""
        self.root = root.resolve()
        self.session_id = session_id or new_session_id()
        self.namespace = namespace
        self._index_dir = Path(tempfile.mkdtemp(prefix="ribbit-index-"))
        weakref.finalize(self, shutil.rmtree, self._index_dir, True)
        try:
            found = None if private else find_repository(self.root)
            self.private = found is None
            self.git = found if found is not None else self._private_repo()
            # Object and ref work never needs the agent's files: an empty work tree, so git reads
            # no .gitattributes (a FIFO there would hang it; attributes could change the patch).
            self._objects = self.git.objects_only(self._index_dir / "empty")
            self.top = self.git.work_tree
            self.git_dir = self.git.git_dir
            # Only the part of the work tree ribbit was started in belongs to this session.
            self.scope = "." if self.top == self.root else self.root.relative_to(self.top).as_posix()
            self._worktree = WorkTreeIndex(
                self.git, self._objects, self._index_dir / "index", scope=self.scope, private=self.private,
            )
        except GitError as exc:
            raise JournalError(f"cannot open the journal: {exc}") from None
        self.object_format = self._worktree.object_format
        remember_session_repo(self.root, self.git)
        self.snapshots: list[str] = []
        self._lock = threading.RLock()
        self._trees: dict[str, str] = {}  # commit -> tree
        self._entries_cache: dict[str, dict[str, TreeEntry]] = {}
        self._commit_texts: dict[str, str] = {}
        self._metas: dict[str, dict] = {}  # type: ignore[type-arg]  # the meta of commits made here
        self._notices: list[str] = []
        # A step the journal could not record (a full disk): (label, foreign, mixed); undo still takes it back,
        # and what others changed since (see others_changed) counts as theirs.
        self._pending: tuple[str, list[str], list[str]] | None = None
        # Root-relative paths the agent's steps changed (someone else's changes left out): "files changed".
        self.agent_changed: set[str] = set()

    @property
    def converting(self) -> bool:
        """Whether the user's `git add` converts bytes here (their index ids then cannot be reused)."""
        return self._worktree.converting

    @property
    def kind(self) -> str:
        if self.private:
            return f"not a git repository: private journal in {self.git_dir}"
        return f"git refs/ribbit/ in {self.git_dir}"

    def ref(self, index: int) -> str:
        return f"{self.namespace}/{self.session_id}/{index}"

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self, label: str, foreign: Iterable[str] = (), mixed: Iterable[str] = ()) -> str:
        """Commit the working tree (tracked + untracked non-ignored files); returns its sha.

        `foreign`: paths only someone else changed since the previous snapshot (kept on undo);
        `mixed`: paths both the agent and someone else changed (undo refuses them).
        A snapshot identical to the previous one is not recorded again.
        """
        with self._lock:
            try:
                tree = self.tree_now()
                index = self._worktree
                unrecorded = {self._display(p): list(st) for p, st in index.unrecorded.items()}
                modes = [[self._display(p), f"{old:o}", f"{new:o}"] for p, old, new in index.stripped]
                self._note_stripped(index.stripped)
                if (
                    self.snapshots and label != "start" and tree == self._tree_of(self.snapshots[-1])
                    and not modes and unrecorded == self._meta(self.snapshots[-1]).get("unrecorded", {})
                ):
                    return self.snapshots[-1]
                meta: dict[str, object] = {
                    "scope": self.scope, "label": label, "foreign": sorted(set(foreign)), "mixed": sorted(set(mixed)),
                }
                if unrecorded:
                    meta["unrecorded"] = unrecorded
                if modes:
                    meta["modes"] = modes
                parent = ["-p", self.snapshots[-1]] if self.snapshots else []
                commit = self._commit(tree, parent, label, meta)
                self._objects.run("update-ref", self.ref(len(self.snapshots)), commit)
                touched = index.take_changed()
                if self.snapshots:
                    others = set(foreign) | set(mixed)
                    changed = {self._display(p) for p in touched} | set(unrecorded)
                    self.agent_changed |= {p for p in changed if p not in others or p in set(mixed)}
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot snapshot the working tree: {_one_line(exc)}") from None
            self._trees[commit] = tree
            self.snapshots.append(commit)
            self._pending = None
            return commit

    def _commit(self, tree: str, parent: list[str], label: str, meta: dict[str, object]) -> str:
        commit = self._objects.text(
            "commit-tree", "--no-gpg-sign", tree, *parent,
            "-m", f"ribbit {self.session_id}: {label}\n\n{META_PREFIX}{json.dumps(meta)}", env=RIBBIT_IDENTITY,
        ).strip()
        self._metas[commit] = json.loads(json.dumps(meta))  # as _meta would read it back
        return commit

    def _note_stripped(self, stripped: list[tuple[str, int, int]]) -> None:
        if stripped:
            named = ", ".join(f"{shown(self._display(p))} ({old:o} -> {new:o})" for p, old, new in stripped[:NOTICE_NAMES])
            more = f" and {len(stripped) - NOTICE_NAMES} more" if len(stripped) > NOTICE_NAMES else ""
            self._notices.append(
                f"journal: took off setuid/setgid/sticky or group/world-write bits a command set: {named}{more}"
            )

    def record_step(self, label: str, foreign: Iterable[str] = (), mixed: Iterable[str] = ()) -> list[str]:
        """Snapshot after a step; never raises. Returns notices for the user (one line each).

        A step that cannot be recorded (a full disk) is remembered: undo then compares the files with the
        last snapshot that was recorded and puts back what differs, writing nothing to the journal."""
        foreign, mixed = list(foreign), list(mixed)
        if self._pending is not None:  # the earlier unrecorded step's others still count
            foreign, mixed = foreign + self._pending[1], mixed + self._pending[2]
        try:
            self.snapshot(label, foreign, mixed)
        except JournalError as exc:
            self._pending = (label, foreign, mixed)
            self._notices.append(
                f"journal: {label} could not be recorded ({exc}); undo compares the files with the last recorded "
                "snapshot instead"
            )
        return self.take_notices()

    def has_pending(self) -> bool:
        """Whether the last step could not be recorded (see record_step)."""
        return self._pending is not None

    def others_changed(self, foreign: Iterable[str], mixed: Iterable[str]) -> bool:
        """Changes someone else made since a step the journal could not record (a full disk): they join that
        step's, so its undo keeps them. False (nothing taken) when no step is waiting to be recorded."""
        with self._lock:
            if self._pending is None:
                return False
            label, had_foreign, had_mixed = self._pending
            self._pending = (label, had_foreign + list(foreign), had_mixed + list(mixed))
            return True

    def guard_write(self, path: Path) -> None:
        """Before the agent's Write/Edit lands on `path`: a file the journal does not record (in an ignored
        folder left outside, an environment) is added as it is now to the last snapshot, so undo can put it
        back; from then on the journal records that path every step, wherever it is."""
        try:
            rel = path.resolve(strict=False).relative_to(self.top).as_posix()
        except (ValueError, OSError):
            return
        with self._lock:
            index = self._worktree
            if rel in index._known or rel in index.ignored.pinned:
                return
            index.ignored.pin(rel)
            found = self._disk_state(rel)
            if not self.snapshots or not isinstance(found, TreeEntry):
                return  # nothing there yet: undo removes what the write makes
            tip = self.snapshots[-1]
            try:
                self._hash_into_store(rel)
                tree = self._tree_with(tip, rel, found)
                parents = [w for line in self._commit_text(tip).splitlines() if line.startswith("parent ") for w in ("-p", line.split()[1])]
                meta = self._meta(tip)
                commit = self._commit(tree, parents, str(meta.get("label", "step")), meta)
                self._objects.run("update-ref", self.ref(len(self.snapshots) - 1), commit)
            except GIT_ERRORS as exc:
                self._notices.append(f"journal: could not record {shown(self._display(rel))} before the change ({_one_line(exc)})")
                return
            self._trees[commit] = tree
            self.snapshots[-1] = commit

    def _hash_into_store(self, rel: str) -> None:
        """Write a file's exact bytes to the object store (its id is what `_disk_state` computed)."""
        parent, _, name = rel.rpartition("/")
        dir_fd = open_dir_confined(self.top, parent) if parent else os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            self._objects.run("hash-object", "-w", "--no-filters", "--stdin-paths", input=f"/dev/fd/{fd}\n".encode(), pass_fds=[fd])
        finally:
            os.close(fd)

    def _tree_with(self, commit: str, rel: str, entry: TreeEntry) -> str:
        """A commit's tree with one more entry (through a temporary index; the journal's own is untouched)."""
        env = {"GIT_INDEX_FILE": str(self._index_dir / "amend-index")}
        try:
            self._objects.run("read-tree", commit, env=env)
            self._objects.run("update-index", "-z", "--index-info", input=f"{entry.mode} {entry.sha}\t".encode() + os.fsencode(rel) + b"\0", env=env)
            return self._objects.text("write-tree", env=env).strip()
        finally:
            (self._index_dir / "amend-index").unlink(missing_ok=True)

    def mark_outside_present(self) -> None:
        """At a task's start: note which paths left outside the journal exist (see `changed_outside`)."""
        with self._lock:
            self._worktree.ignored.mark_present(self.top)

    def changed_outside(self, since_ns: int) -> OutsideChanges:
        """What changed among the paths the journal leaves outside at or after `since_ns` (a file, or a
        folder `dir/` where something was removed or added; one that was there and is gone), the paths whose
        unsafe bits were taken off, and the folders that could not be checked; root-relative."""
        with self._lock:
            found = self._worktree.ignored.changed_outside(self.top, since_ns)
        def shown_here(paths: list[str]) -> list[str]:
            return [self._display(p) for p in paths if self._in_scope(p)]

        return OutsideChanges(
            changed=shown_here(found.changed), stripped=shown_here(found.stripped),
            unchecked=[(self._display(p), why) for p, why in found.unchecked if self._in_scope(p)],
        )

    def ignored_paths(self) -> set[str]:
        """Root-relative paths recorded although git ignores them (not part of the patch). Git is asked
        again: a file recorded while ignored whose rule is gone since (a `sub/.gitignore` the agent made,
        then removed) is an ordinary file that `git add -A` takes, so the patch must show it."""
        recorded = sorted(self._display(p) for p in self._worktree.ignored.not_in_patch() if self._in_scope(p))
        return self.ignored(recorded)

    def use_ignored_hint(self, quiet: Callable[[], bool]) -> None:
        """`quiet()`: True when no git-ignored path the journal may record changed since it was last asked
        (the watcher knows, with inotify): the step's snapshot then skips git's listing of ignored paths."""
        self._worktree.ignored_quiet = quiet

    def left_outside(self, rels: list[str]) -> set[str]:
        """Which of these root-relative paths the journal leaves outside (an environment, past the budget)."""
        outside = self._worktree.ignored
        return {rel for rel in rels if outside.is_outside(self._from_root(rel))}

    def nested_repositories(self) -> set[str]:
        """Folders holding their own `.git` (other repositories, not submodules) at the last snapshot,
        relative to the root."""
        return {self._worktree._display(rel) for rel in self._worktree.nested if self._worktree._in_scope(rel)}

    def check_untracked_folders(self) -> list[str]:
        """Take unsafe bits off the folders no snapshot goes through (empty ones); the folders changed."""
        with self._lock:
            try:
                stripped = self._worktree.check_untracked_folders()
            except GIT_ERRORS:
                return []
            self._note_stripped(stripped)
            return [self._display(p) + "/" for p, _old, _new in stripped]

    def take_notices(self) -> list[str]:
        """One-line notices for the user since the last call (paths left out, steps not recorded)."""
        notices, self._notices = self._worktree.take_notices() + self._notices, []
        return notices

    def tree_now(self) -> str:
        """The tree object of the working tree as it is now (scope only; the rest as in the user's index)."""
        with self._lock:
            return self._worktree.tree_now()

    def patch(self, start: int = 0) -> str:
        """`git diff` from snapshot `start` to the working tree now (as a fresh snapshot's tree), without
        the git-ignored files the journal records (they are undoable, and named, but not the patch's)."""
        if not self.snapshots:
            return ""
        current = self.snapshot("end")
        ignored = self.ignored_paths()
        if not ignored:
            return self.diff(self.snapshots[start], current)
        paths = [p for p in self.changed_between(self.snapshots[start], current) if p not in ignored]
        return "".join(self.diff(self.snapshots[start], current, paths[i:i + PATCH_PATHS]) for i in range(0, len(paths), PATCH_PATHS))

    def diff(self, a: str, b: str, paths: Iterable[str] | None = None) -> str:
        """`git diff --binary` between two journal commits, paths relative to the folder ribbit runs in.

        Text keeps undecodable bytes as surrogates (os.fsdecode), so it encodes back exactly."""
        limit = [self._from_root(p) for p in paths] if paths is not None else [self.scope]
        if not limit:
            return ""
        try:
            out = self._objects.text(
                "-c", "core.quotePath=off", "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                "--no-renames", a, b, "--", *limit, env={"GIT_LITERAL_PATHSPECS": "1"},
            )
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot compute the session's patch: {_one_line(exc)}") from None
        if self.scope != ".":
            # Paths in the patch should be relative to the folder ribbit runs in.
            out = out.replace(f" a/{self.scope}/", " a/").replace(f" b/{self.scope}/", " b/")
            out = out.replace(f"--- a/{self.scope}/", "--- a/").replace(f"+++ b/{self.scope}/", "+++ b/")
        return out

    def read_blob(self, commit: str, rel: str) -> tuple[bytes, str] | None:
        """(bytes, git mode) of a root-relative path in a journal commit, or None if absent."""
        try:
            entry = self._entries(commit).get(self._from_root(rel))
            return (self._blob(entry.sha), entry.mode) if entry else None
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read {shown(rel)} from the journal: {_one_line(exc)}") from None

    def changed_between(self, a: str, b: str) -> list[str]:
        """Root-relative paths that differ between two journal commits."""
        try:
            return [self._display(p) for p in self._changed(a, b)]
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None

    def changed_since_start(self) -> list[str]:
        """Root-relative paths that differ between the session's start and the working tree now."""
        if not self.snapshots:
            return []
        try:
            now = self.tree_now()
            return [self._display(p) for p in self._changed(self.snapshots[0], now)]
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None

    def disk_state(self, rel: str) -> DiskState:
        """What is on disk at a root-relative path, reached without following links."""
        return self._disk_state(self._from_root(rel))

    def sweep_temp_files(self) -> list[str]:
        """Remove `*.ribbit-tmp` files a killed ribbit left behind; returns their paths."""
        try:
            others, _problems = self._worktree.list_others(index=False)
        except GIT_ERRORS:
            return []
        removed = []
        for rel in others:
            if rel.endswith(TEMP_SUFFIX) and not rel.endswith("/"):
                try:
                    remove_file(self.top / rel)
                    removed.append(self._display(rel))
                except OSError:
                    pass
        return removed

    def ignored(self, rels: list[str]) -> set[str]:
        """Which of these root-relative paths git ignores (tracked files never are)."""
        if not rels:
            return set()
        data = b"".join(os.fsencode(self.root / rel) + b"\0" for rel in rels)
        try:
            out = self.git.out("check-ignore", "-z", "--stdin", input=data, check=False)
        except GIT_ERRORS:
            return set()
        found = set()
        # git echoes each path as it was given: taken back lexically (resolving would follow an ignored
        # link `build/x -> ../calc.py` and call calc.py ignored).
        for path in filter(None, out.split(b"\0")):
            try:
                found.add(Path(os.fsdecode(path)).relative_to(self.root).as_posix())
            except ValueError:
                continue
        return found

    # -- undo -----------------------------------------------------------------------------------

    def undo_last(self, observer: WriteObserver | None = None) -> UndoResult:
        """Put the files back as they were before the last step that changed them.

        Raises JournalError (one line) when there is nothing to undo or a file it would overwrite
        was changed after that step by someone other than ribbit. `observer` (the watcher) is told of
        each write before it lands.
        """
        with self._lock:
            if self._pending is not None:
                label, foreign, mixed = self._pending
                try:
                    self.snapshot(label, foreign, mixed)  # the disk may have room again
                except JournalError:
                    return self._undo_unrecorded(observer)
            if len(self.snapshots) < 2:
                raise JournalError("nothing to undo: the agent has not changed any file in this session")
            latest, previous = self.snapshots[-1], self.snapshots[-2]
            step = self._meta(latest).get("label", f"step {len(self.snapshots) - 1}")
            result = self._restore(previous, latest, [latest], undone=str(step), observer=observer)
            try:
                n = len(self.snapshots) - 1
                self._objects.run("update-ref", f"{self.namespace}/{self.session_id}/undone/{n}", latest)
                self._objects.run("update-ref", "-d", self.ref(n))
            except GIT_ERRORS as exc:
                raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
            self.snapshots.pop()
            return result

    def _undo_unrecorded(self, observer: WriteObserver | None) -> UndoResult:
        """Undo a step the journal could not record: every file that differs from the last recorded
        snapshot goes back to it (what someone else changed meanwhile is kept), computed without writing
        anything to the journal (the disk may still be full)."""
        assert self._pending is not None
        label, foreign, mixed = self._pending
        target = self.snapshots[-1]
        try:
            before = self._entries(target)
            now = self._worktree.state_now()
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the files to undo {label}: {_one_line(exc)}") from None
        others = {self._from_root(p) for p in foreign}
        # Files too large to hash keep their earlier entry in `now`: the scan's own list names them.
        unrecorded, lost, not_restored = self._too_large(target, dict(self._worktree.unrecorded), before, others)
        paths = sorted(
            p for p in set(before) | set(now) | set(unrecorded)
            if self._in_scope(p) and (before.get(p) != now.get(p) or p in unrecorded) and p not in others and p not in lost
        )
        plan = _UndoPlan(self, before, now, paths, observer, expected=unrecorded)
        problem = plan.check({self._from_root(p) for p in mixed})
        if problem:
            raise JournalError(f"cannot undo: {problem}; nothing was restored")
        restored, deleted = plan.run()
        self._pending = None
        return UndoResult(
            session_id=self.session_id, undone=label,
            restored=[self._display(p) for p in restored], deleted=[self._display(p) for p in deleted],
            kept=sorted(self._display(p) for p in others if self._in_scope(p)), not_restored=not_restored,
        )

    def rewind_to(self, index: int) -> UndoResult:
        """`/rewind`: put the files back as they were at snapshot `index` (a task's start) and forget the
        later snapshots. Refuses (JournalError, nothing restored) where undo_last would: a file changed
        since by someone other than ribbit."""
        with self._lock:
            if not 0 <= index < len(self.snapshots):
                raise JournalError("that point is no longer in this session's journal (undone since?)")
            if index == len(self.snapshots) - 1:
                return UndoResult(session_id=self.session_id, undone="nothing", restored=[], deleted=[])
            latest = self.snapshots[-1]
            result = self._restore(self.snapshots[index], latest, self.snapshots[index + 1 :], undone=f"the steps after snapshot {index}")
            try:
                for n in range(len(self.snapshots) - 1, index, -1):
                    self._objects.run("update-ref", f"{self.namespace}/{self.session_id}/undone/{n}", self.snapshots[n])
                    self._objects.run("update-ref", "-d", self.ref(n))
            except GIT_ERRORS as exc:
                raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
            del self.snapshots[index + 1 :]
            return result

    def adopt(self, session_id: str) -> None:
        """Go on with an earlier session's journal (`ribbit --continue`): its snapshots, then one of the
        files as they are now, where what changed while ribbit was closed counts as someone else's
        (undo keeps it)."""
        snapshots = self.session_snapshots(session_id)
        if not snapshots:
            raise JournalError(f"session {shown(session_id)} has no journal here")
        if self._ref_exists(f"{self.namespace}/{session_id}/reverted"):
            raise JournalError(f"session {session_id} was undone with `ribbit undo`; start a new one")
        with self._lock:
            self.session_id = session_id
            self.snapshots = snapshots
            try:
                changed = [self._display(p) for p in self._changed(snapshots[-1], self.tree_now())]
                # A fresh index saw every path as new: what the agent changes counts from here on.
                self._worktree.take_changed()
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
            if changed:
                self.snapshot("resumed", foreign=changed)

    def undo_session(self, session_id: str) -> UndoResult:
        """`ribbit undo SESSION`: every file the session changed goes back to its start state."""
        snapshots = self.session_snapshots(session_id)
        if not snapshots:
            known = ", ".join(s.session_id for s in self.sessions()[-3:]) or "none"
            raise JournalError(f"no ribbit session {shown(session_id)!r} in {self.kind} (recent: {known})")
        if self._ref_exists(f"{self.namespace}/{session_id}/reverted"):
            raise JournalError(f"session {session_id} was already undone")
        if len(snapshots) < 2:
            raise JournalError(f"nothing to undo: session {session_id} changed no files")
        scope = self._meta(snapshots[0]).get("scope", ".")
        if scope != self.scope:
            raise JournalError(f"session {session_id} ran in {self.top / scope}; run ribbit undo there")
        result = self._restore(snapshots[0], snapshots[-1], snapshots[1:], undone="session", session_id=session_id)
        try:
            self._objects.run("update-ref", f"{self.namespace}/{session_id}/reverted", snapshots[-1])
        except GIT_ERRORS as exc:
            raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
        return result

    # -- listing --------------------------------------------------------------------------------

    def session_snapshots(self, session_id: str) -> list[str]:
        steps = self._refs().get(session_id, {})
        return [steps[n] for n in sorted(steps)]

    def sessions(self) -> list[SessionInfo]:
        """Every session journaled in this repository, oldest first."""
        infos = []
        reverted = self._reverted()
        for sid, steps in self._refs().items():
            ordered = [steps[n] for n in sorted(steps)]
            try:
                started = self._commit_time(ordered[0])
                files = self._changed(ordered[0], ordered[-1]) if len(ordered) > 1 else []
            except GIT_ERRORS:
                continue
            infos.append(SessionInfo(
                session_id=sid, started=started, steps=len(ordered) - 1,
                files=[self._display(p) for p in files], reverted=sid in reverted,
            ))
        infos.sort(key=lambda s: (s.started, s.session_id))
        return infos


    def _restore(
        self, target: str, latest: str, covered: list[str], *, undone: str, session_id: str | None = None,
        observer: WriteObserver | None = None,
    ) -> UndoResult:
        try:
            before, after = self._entries(target), self._entries(latest)
            paths = self._changed(target, latest)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
        foreign: set[str] = set()
        mixed: set[str] = set()
        for commit in covered:
            meta = self._meta(commit)
            foreign |= {self._from_root(p) for p in meta.get("foreign", [])}
            mixed |= {self._from_root(p) for p in meta.get("mixed", [])}
        # Files too large to record: the latest snapshot says what the disk must still show (an older step's
        # entry is superseded by what the latest holds); put back from the target where it has them,
        # removed where they did not exist then.
        unrecorded, lost, not_restored = self._too_large(target, self._unrecorded(latest), before, foreign)
        paths = [p for p in paths if p not in lost]
        candidates = sorted(set(paths) | set(unrecorded))
        environments = _new_environments(before, after)
        if environments:
            # `mv .venv venv2`: the environment's old name was never journaled (environments are left
            # outside), so undo cannot bring it back; removing venv2 would leave the user with none.
            inside = {p for p in candidates if p not in before and any(p.startswith(e + "/") for e in environments)}
            candidates = [p for p in candidates if p not in inside]
            for p in inside:
                unrecorded.pop(p, None)
            not_restored += [(self._display(e) + "/", "a Python environment this step made (perhaps moved from a name "
                              "undo does not hold): left in place, remove it yourself if unwanted") for e in environments]
        plan = _UndoPlan(self, before, after, [p for p in candidates if p not in foreign], observer, expected=unrecorded)
        problem = plan.check(mixed)
        if problem:
            raise JournalError(f"cannot undo: {problem}; nothing was restored")
        restored, deleted = plan.run()
        kept = [self._display(p) for p in paths if p in foreign]
        return UndoResult(
            session_id=session_id or self.session_id, undone=undone,
            restored=[self._display(p) for p in restored], deleted=[self._display(p) for p in deleted], kept=kept,
            not_restored=not_restored,
        )

    def _too_large(
        self, target: str, now: dict[str, tuple[int, int]], before: dict[str, TreeEntry], foreign: set[str],
    ) -> tuple[dict[str, tuple[int, int]], list[str], list[tuple[str, str]]]:
        """For an undo back to `target`, given the files too large to record as the undone state has them
        (`now`: path -> (size, mtime_ns), what the disk must still show): those undo puts back or removes,
        those it cannot put back (too large already at the target and changed or gone since), and what
        the user is told of them."""
        unrecorded = dict(now)
        lost: list[str] = []
        for p, then in self._unrecorded(target).items():
            if p in foreign or not self._in_scope(p):
                continue
            if unrecorded.get(p) != then:
                lost.append(p)
            unrecorded.pop(p, None)
        not_restored = [(self._display(p), "too large to record; no earlier copy in the journal") for p in sorted(lost)]
        if lost:
            # Its bytes may be in a file the step made (`mv data.csv x.csv`): such a file is left, not removed.
            for p in sorted(q for q in unrecorded if q not in before):
                del unrecorded[p]
                not_restored.append((self._display(p), "too large to record; left in place: it may hold what was lost"))
        for p in [q for q in unrecorded if q in foreign or not self._in_scope(q)]:
            del unrecorded[p]
        return unrecorded, lost, not_restored

    def _unrecorded(self, commit: str) -> dict[str, tuple[int, int]]:
        """The top-relative files a snapshot could not record, with (size, mtime_ns) as they were."""
        found: dict[str, tuple[int, int]] = {}
        for p, st in (self._meta(commit).get("unrecorded") or {}).items():
            if isinstance(st, list) and len(st) == 2:
                found[self._from_root(p)] = (int(st[0]), int(st[1]))
        return found

    def _disk_state(self, rel: str) -> DiskState:
        """What is on disk at a top-relative path, reached one folder at a time without links."""
        parts = rel.split("/")
        try:
            fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
                return TreeEntry("120000", self.blob_id(os.readlink(os.fsencode(name), dir_fd=fd)))
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
                return TreeEntry("100755" if fst.st_mode & stat.S_IXUSR else "100644", self._object_id_of_fd(handle, fst.st_size))
            finally:
                os.close(handle)
        finally:
            os.close(fd)

    def _stat_is(self, rel: str, expected: tuple[int, int]) -> bool:
        """Whether a top-relative path is a regular file with this (size, mtime_ns), reached without links."""
        parent, _, name = rel.rpartition("/")
        try:
            fd = open_dir_confined(self.top, parent) if parent else os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        finally:
            os.close(fd)
        return stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) == expected

    def _files_under(self, rel: str) -> list[str] | Blocked:
        """Every non-folder entry under a top-relative folder, found without following links."""
        found: list[str] = []
        try:
            fd = open_dir_confined(self.top, rel)
        except OSError:
            return Blocked(rel, "unreadable")
        stack = [(rel, fd)]
        try:
            while stack:
                folder, dir_fd = stack.pop()
                try:
                    entries = list(os.scandir(dir_fd))
                    for entry in entries:
                        path = f"{folder}/{entry.name}"
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((path, os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)))
                        else:
                            found.append(path)
                except OSError:
                    return Blocked(folder, "unreadable")
                finally:
                    os.close(dir_fd)
        finally:
            for _folder, dir_fd in stack:
                os.close(dir_fd)
        return found

    def blob_id(self, data: bytes) -> str:
        """The object id git gives a blob holding `data` (sha1 or sha256, as the repository uses)."""
        digest = hashlib.new(self.object_format)
        digest.update(b"blob %d\0" % len(data))
        digest.update(data)
        return digest.hexdigest()

    def _object_id_of_fd(self, fd: int, size: int) -> str:
        """Streamed, so a huge file costs no memory; a file still growing gets an id nothing matches."""
        digest = hashlib.new(self.object_format)
        digest.update(b"blob %d\0" % size)
        total = 0
        while total <= size and (chunk := os.read(fd, 1 << 20)):
            digest.update(chunk)
            total += len(chunk)
        return digest.hexdigest() if total == size else "changing"

    # -- git plumbing ---------------------------------------------------------------------------

    def _changed(self, a: str, b: str) -> list[str]:
        out = self._objects.out(
            "diff", "--name-only", "--no-renames", "--no-ext-diff", "--no-textconv", "-z", a, b, "--", self.scope,
            env={"GIT_LITERAL_PATHSPECS": "1"},
        )
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    def _entries(self, commit: str) -> dict[str, TreeEntry]:
        """Every blob (and gitlink) in a journal commit's tree, by top-relative path."""
        cached = self._entries_cache.get(commit)
        if cached is None:
            out = self._objects.out("ls-tree", "-r", "-z", "--full-tree", commit)
            cached = {}
            for record in filter(None, out.split(b"\0")):
                info, _, name = record.partition(b"\t")
                mode, _kind, sha = info.decode().split()
                cached[os.fsdecode(name)] = TreeEntry(mode, sha)
            if len(self._entries_cache) > 8:
                self._entries_cache.clear()
            self._entries_cache[commit] = cached
        return cached

    def _tree_of(self, commit: str) -> str:
        if commit not in self._trees:
            self._trees[commit] = self._objects.text("rev-parse", f"{commit}^{{tree}}").strip()
        return self._trees[commit]

    def _commit_text(self, commit: str) -> str:
        """A commit's text (commits never change: read once)."""
        text = self._commit_texts.get(commit)
        if text is None:
            text = self._objects.text("cat-file", "commit", commit)
            if len(self._commit_texts) > 64:
                self._commit_texts.clear()
            self._commit_texts[commit] = text
        return text

    def _commit_time(self, commit: str) -> float:
        for line in self._commit_text(commit).splitlines():
            if line.startswith("committer "):
                return float(line.split()[-2])
            if not line:
                break
        return 0.0

    def _meta(self, commit: str) -> dict:  # type: ignore[type-arg]
        if commit in self._metas:
            return self._metas[commit]
        try:
            body = self._commit_text(commit).partition("\n\n")[2]
        except GIT_ERRORS:
            return {}
        for line in body.splitlines():
            if line.startswith(META_PREFIX):
                try:
                    value = json.loads(line[len(META_PREFIX):])
                    return value if isinstance(value, dict) else {}
                except ValueError:
                    return {}
        return {}

    def _refs(self) -> dict[str, dict[int, str]]:
        out = self._objects.text("for-each-ref", "--format=%(refname) %(objectname)", self.namespace + "/")
        sessions: dict[str, dict[int, str]] = {}
        for line in out.splitlines():
            name, _, sha = line.partition(" ")
            parts = name[len(self.namespace) + 1:].split("/")
            if len(parts) == 2 and parts[1].isdigit():
                sessions.setdefault(parts[0], {})[int(parts[1])] = sha
        return sessions

    def _reverted(self) -> set[str]:
        out = self._objects.text("for-each-ref", "--format=%(refname)", self.namespace + "/")
        return {
            line[len(self.namespace) + 1:].split("/")[0]
            for line in out.splitlines() if line.endswith("/reverted")
        }

    def _ref_exists(self, ref: str) -> bool:
        return bool(self._objects.text("for-each-ref", "--format=%(refname)", ref).strip())

    def _blob(self, sha: str) -> bytes:
        return self._objects.out("cat-file", "blob", sha)

    def _display(self, rel: str) -> str:
        """Top-relative git path -> path relative to the folder ribbit runs in."""
        if self.scope != "." and rel.startswith(self.scope + "/"):
            return rel[len(self.scope) + 1:]
        return rel

    def _from_root(self, rel: str) -> str:
        return rel if self.scope == "." else f"{self.scope}/{rel}"

    def _in_scope(self, rel: str) -> bool:
        return self.scope == "." or rel.startswith(self.scope + "/")

    def _private_repo(self) -> GitRepo:
        git_dir = private_git_dir(self.root)
        try:
            if not (git_dir / "HEAD").exists():
                return init_private_repository(git_dir, self.root)
            return GitRepo(git_dir=git_dir.resolve(), work_tree=self.root)
        except (GitError, OSError) as exc:
            raise JournalError(f"cannot create the private journal in {git_dir}: {_one_line(exc)}") from None


def open_journals(root: Path) -> list[Journal]:
    """The journals `ribbit undo` looks in: the repository's (or the private one), then the private
    one as well when the folder became a repository after sessions were journaled privately."""
    first = Journal(root)
    journals = [first]
    if not first.private and (private_git_dir(root) / "HEAD").exists():
        journals.append(Journal(root, private=True))
    return journals


def _new_environments(before: dict[str, TreeEntry], after: dict[str, TreeEntry]) -> list[str]:
    """Folders that appeared whole between two snapshots as a Python virtualenv (pyvenv.cfg and an
    activate script). A folder that held anything before is not one: planting a pyvenv.cfg in the
    user's folder must not keep undo from putting it back."""
    found = [p.rpartition("/")[0] for p in after if p.endswith("/pyvenv.cfg") and p not in before]
    found = [e for e in found if f"{e}/bin/activate" in after or f"{e}/Scripts/activate" in after]
    return sorted(e for e in found if not any(p.startswith(e + "/") for p in before))


class _UndoPlan:
    """Checks every path an undo touches against the disk first, then carries it out."""

    def __init__(
        self, journal: Journal, before: dict[str, TreeEntry], after: dict[str, TreeEntry], paths: list[str],
        observer: WriteObserver | None = None, expected: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        self.journal = journal
        self.observer = observer
        # Paths a step could not record: the disk must still show them with this (size, mtime_ns).
        self.expected = expected or {}
        self.before = before  # the state undo goes back to
        self.after = after  # the state undo takes back (what the disk must still show)
        self.paths = [p for p in paths if before.get(p, _NO_ENTRY).mode != "160000" and after.get(p, _NO_ENTRY).mode != "160000"]
        self.removals: list[str] = []  # files and links the agent made, to delete
        self.folders: list[str] = []  # folders in the way of a file to put back (emptied first)
        self.writes: list[tuple[str, TreeEntry]] = []

    def check(self, mixed: set[str]) -> str | None:
        """The first reason the undo would lose someone's work (None: safe to go ahead)."""
        display = self.journal._display
        conflicts = sorted(p for p in self.paths if p in mixed)
        states = {
            rel: (_AS_LEFT if self.journal._stat_is(rel, self.expected[rel]) else "changed")
            if rel in self.expected else self.journal._disk_state(rel)
            for rel in self.paths
        }
        for rel, now in states.items():
            if rel in self.expected:
                if now is not _AS_LEFT:
                    conflicts.append(rel)
                continue
            had = self.after.get(rel)
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
            want, now = self.before.get(rel), states[rel]
            if want is None:
                if rel in removable:
                    self.removals.append(rel)
                continue
            if isinstance(now, Blocked):
                if now.at not in removable:
                    return f"{shown(display(now.at))} is {now.kind} now, where undo must put back {shown(display(rel))}"
            elif now == "folder":
                inside = self.journal._files_under(rel)
                if isinstance(inside, Blocked):
                    return f"cannot read {shown(display(inside.at))}, where undo must put back {shown(display(rel))}"
                strays = [p for p in inside if p not in removable]
                if strays:
                    return (
                        f"{shown(display(strays[0]))} is not the agent's (undo would have to remove the folder "
                        f"{shown(display(rel))} to put that file back)"
                    )
                self.folders.append(rel)
            self.writes.append((rel, want))
        return None

    def run(self) -> tuple[list[str], list[str]]:
        """Delete what the agent made, clear folders in the way, write the earlier files back."""
        top = self.journal.top
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
                _remove_empty_tree(top / rel)
            for rel in deleted:
                self._prune(top / rel)
            for rel, entry in self.writes:
                current = rel
                data = self.journal._blob(entry.sha)
                if entry.mode == "120000":
                    atomic_symlink(top / rel, os.fsdecode(data))
                else:
                    atomic_write(top / rel, data, allow_binary=True, executable=entry.mode == "100755", observer=self.observer)
                restored.append(rel)
        except (OSError, GitError) as exc:
            what = exc.strerror if isinstance(exc, OSError) and not isinstance(exc, ApplyError) and exc.strerror else str(exc)
            done = f" (already restored: {', '.join(shown(self.journal._display(p)) for p in restored + deleted)})" if restored or deleted else ""
            raise JournalError(f"cannot restore {shown(self.journal._display(current))}: {_one_line_text(what)}{done}") from None
        return restored, deleted

    def _prune(self, path: Path) -> None:
        remove_empty_folders(path.parent, self.journal.root)


_NO_ENTRY = TreeEntry("", "")
_AS_LEFT = TreeEntry("as the step left it", "")  # an unrecorded file the disk still shows unchanged


def _remove_empty_tree(path: Path) -> None:
    """Remove a folder whose only content is empty folders (its files are already gone)."""
    for folder, dirs, files in os.walk(path, topdown=False, followlinks=False):
        if files:
            raise ApplyError(f"refusing to remove {folder}: it is not empty")
        for name in dirs:
            if not remove_empty_dir(Path(folder) / name):
                raise ApplyError(f"refusing to remove {Path(folder) / name}: it is not empty")
    if not remove_empty_dir(path):
        raise ApplyError(f"refusing to remove {path}: it is not empty")


def _blocking_kind(fd: int, part: str, exc: OSError) -> str:
    try:
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    return "a file" if stat.S_ISREG(st.st_mode) else "not a folder"


def _one_line(exc: BaseException) -> str:
    return one_line(str(exc))


def _one_line_text(text: str) -> str:
    return one_line(text)
