"""The undo journal: snapshots of the working tree as git commits under refs/ribbit/.

Snapshots never touch the user's index, HEAD, branches or stash: the journal keeps its own index
(a temporary file) and only adds objects and private refs. A folder that is not a git repository
gets a private git dir (under the user's state folder) whose work tree is that folder, so the
same code serves both. Every git call goes through agent/git.py (nothing a config names runs).
How the work tree becomes a tree object (exact bytes, no filters, nested repositories and
unstorable paths handled, never failing on a path the agent made): agent/undo/worktree.py.

Refs: `refs/ribbit/<session>/<n>` is snapshot n of a session (0 = its start);
`refs/ribbit/<session>/undone/<n>` keeps a step that /undo took back (so it is never lost);
`refs/ribbit/<session>/reverted` marks a session that `ribbit undo SESSION` rolled back;
`refs/ribbit/<session>/open` is there while a task runs, and stays when its last step could not be
recorded (a full disk, a crash): `ribbit undo` then also takes back what differs from the last snapshot.

Undo restores exact bytes and modes (the plan and the writes: agent/undo/restore.py; the journal reads
the two states from git and hands them over), and the FIFOs and sockets a snapshot's meta records
(`specials`: git cannot store them) are removed or made again the same way. It first compares every file it would touch, on disk and
through no link, with the snapshot it takes back, and refuses (naming the file, restoring
nothing) if it differs: changed by the user afterwards, hidden by .gitignore and then edited, a
folder the user put files in, a link planted where a folder was. Writes walk folders one at a
time with O_NOFOLLOW (agent/fs.py), so nothing is written through a link or into `.git`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from agent.fs import READ_FLAGS, TEMP_SUFFIX, WriteObserver, open_dir_confined, open_regular, remove_file
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
from agent.undo import restore
from agent.undo.restore import DiskState
from agent.undo.worktree import StoreQuota, TreeEntry, WorkTreeIndex
from agent.paths import new_session_id, private_git_dir

RIBBIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ribbit", "GIT_AUTHOR_EMAIL": "ribbit@localhost",
    "GIT_COMMITTER_NAME": "ribbit", "GIT_COMMITTER_EMAIL": "ribbit@localhost",
}
GIT_ERRORS = (GitError, OSError, ValueError)
_T = TypeVar("_T")
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
    # Changed while a command wrote to the checkout directly (no sandbox, or no overlay on this system): the
    # command's or anyone's, nobody can tell; left as they are, never taken back.
    uncertain: list[str] = []
    # Changed by the undone steps but with no earlier bytes in the journal (path, why): left as they are.
    not_restored: list[tuple[str, str]] = []
    # Of those put back, the ones changed after the last recorded step (by a step the journal could not record,
    # or by someone since: the two cannot be told apart in a later process).
    unrecorded_step: list[str] = []

    def summary(self) -> str:
        parts = [f"undid session {self.session_id}" if self.undone == "session" else f"undid {self.undone} of session {self.session_id}"]
        if self.restored:
            parts.append("restored " + ", ".join(map(shown, self.restored)))
        if self.deleted:
            parts.append("removed " + ", ".join(map(shown, self.deleted)))
        if self.kept:
            parts.append("kept your changes to " + ", ".join(map(shown, self.kept)))
        if self.uncertain:
            parts.append("left as they are (changed while a command ran outside the overlay, so ribbit cannot tell "
                         "whose change they are): " + ", ".join(map(shown, self.uncertain))
                         + " (if they are all the command's: `/undo uncertain` in the session, or `ribbit undo --uncertain` "
                         "after it, takes them back)")
        if self.unrecorded_step:
            parts.append("changed after the last recorded step (an unrecorded step's, or yours since), taken back too: "
                         + ", ".join(map(shown, self.unrecorded_step)))
        if self.not_restored:
            parts.append("NOT restored: " + ", ".join(f"{shown(p)} ({why})" for p, why in self.not_restored))
        if not self.restored and not self.deleted and not self.not_restored:
            parts.append("no files needed restoring")
        return "; ".join(parts)


class SessionSnapshots(BaseModel):
    """What the journal holds of one session (the session store lists the sessions: agent.session.store)."""

    session_id: str
    started: float  # unix time of the start snapshot
    steps: int  # snapshots after the start (steps that changed files)
    files: list[str]  # paths that differ between the session's start and its last snapshot
    reverted: bool
    # A task of the session ended without its last step recorded (a full disk, a crash): undo also takes back
    # what differs from the last snapshot now.
    cut_short: bool = False


def journal_kind(root: Path) -> str:
    """What `ribbit doctor` reports, without creating anything."""
    try:
        repo = find_repository(root.resolve())
    except GitError as exc:
        return f"unavailable: {exc}"
    if repo is not None:
        return f"git refs/ribbit/ in {repo.git_dir}"
    return f"not a git repository: private journal in {private_git_dir(root)}"


def with_files_gone_under(paths: Iterable[str], gone_under: Callable[[list[str]], set[str]]) -> set[str]:
    """`folder/` entries (watcher.Changes: a folder someone else removed or moved away, whose files no event
    named) become the files `gone_under` finds gone under those folders; other paths stay as they are."""
    paths = set(paths)
    folders = [p.rstrip("/") for p in paths if p.endswith("/")]
    return {p for p in paths if not p.endswith("/")} | gone_under(folders) if folders else paths


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
        # A step the journal could not record (a full disk): (label, foreign, mixed, uncertain, written); undo
        # still takes it back, and what others changed since (see others_changed) counts as theirs.
        self._pending: tuple[str, list[str], list[str], list[str], list[str]] | None = None
        # How to take back what the last undo_last left as uncertain: `/undo uncertain` right after it.
        self._left_uncertain: Callable[[WriteObserver | None], UndoResult] | None = None
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

    def snapshot(
        self, label: str, foreign: Iterable[str] = (), mixed: Iterable[str] = (), uncertain: Iterable[str] = (),
        written: Iterable[str] = (),
    ) -> str:
        """Commit the working tree (tracked + untracked non-ignored files); returns its sha.

        `foreign`: paths only someone else changed since the previous snapshot (kept on undo);
        `mixed`: paths both the agent and someone else changed (undo refuses them);
        `uncertain`: paths changed while a command wrote to the checkout directly (kept on undo, named);
        `written`: paths ribbit wrote, made or removed since (the watcher's): where a FIFO or socket git cannot
        store or list may be (an applied overlay's mknod); those found are in the meta (`specials`).
        A snapshot identical to the previous one is not recorded again.
        """
        with self._lock:
            try:
                index = self._worktree
                tree = index.tree_now(hints=[self._from_root(p) for p in written])
                foreign, uncertain = with_files_gone_under(foreign, self._gone_under), with_files_gone_under(uncertain, self._gone_under)
                unrecorded = {self._display(p): list(st) for p, st in index.unrecorded.items()}
                modes = [[self._display(p), f"{old:o}", f"{new:o}"] for p, old, new in index.stripped]
                specials = {self._display(p): f"{mode:o}" for p, mode in sorted(index.specials.items())}
                self._note_stripped(index.stripped)
                previous = self._meta(self.snapshots[-1]) if self.snapshots else {}
                if (
                    self.snapshots and label != "start" and tree == self._tree_of(self.snapshots[-1])
                    and not modes and unrecorded == previous.get("unrecorded", {})
                    and specials == previous.get("specials", {})
                ):
                    return self.snapshots[-1]
                meta: dict[str, object] = {
                    "scope": self.scope, "label": label, "foreign": sorted(set(foreign)), "mixed": sorted(set(mixed)),
                }
                if uncertain:
                    meta["uncertain"] = sorted(set(uncertain))
                if unrecorded:
                    meta["unrecorded"] = unrecorded
                if index.uncopied:  # of those, the files the patch reads from disk
                    meta["uncopied"] = sorted(self._display(p) for p in index.uncopied)
                if modes:
                    meta["modes"] = modes
                if specials:  # FIFOs and sockets (mode in octal): git cannot store them; undo takes them back
                    meta["specials"] = specials
                parent = ["-p", self.snapshots[-1]] if self.snapshots else []
                commit = self._commit(tree, parent, label, meta)
                self._objects.run("update-ref", self.ref(len(self.snapshots)), commit)
                touched = index.take_changed()
                if self.snapshots:
                    others = set(foreign) | set(mixed)
                    changed = {self._display(p) for p in touched} | set(unrecorded)
                    had = previous.get("specials", {})
                    changed |= {p for p in set(specials) | set(had) if specials.get(p) != had.get(p)}
                    self.agent_changed |= {p for p in changed if p not in others or p in set(mixed)}
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot snapshot the working tree: {_one_line(exc)}") from None
            self._trees[commit] = tree
            self.snapshots.append(commit)
            self._pending = None
            self._left_uncertain = None
            return commit

    def _gone_under(self, folders: list[str]) -> set[str]:
        """Root-relative files the scan just made finds gone under these root-relative folders."""
        return {self._display(p) for p in self._worktree.gone_under(self._from_root(f) for f in folders)}

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

    def record_step(
        self, label: str, foreign: Iterable[str] = (), mixed: Iterable[str] = (), uncertain: Iterable[str] = (),
        written: Iterable[str] = (),
    ) -> list[str]:
        """Snapshot after a step (the arguments: see snapshot); never raises. Returns notices for the user
        (one line each).

        A step that cannot be recorded (a full disk) is remembered: undo then compares the files with the
        last snapshot that was recorded and puts back what differs, writing nothing to the journal."""
        foreign, mixed, uncertain, wrote = list(foreign), list(mixed), list(uncertain), list(written)
        if self._pending is not None:  # the earlier unrecorded step's others still count
            _label, had_foreign, had_mixed, had_uncertain, had_written = self._pending
            foreign, mixed, uncertain = foreign + had_foreign, mixed + had_mixed, uncertain + had_uncertain
            wrote += had_written
        try:
            self.snapshot(label, foreign, mixed, uncertain, wrote)
        except JournalError as exc:
            self._pending = (label, foreign, mixed, uncertain, wrote)
            self._notices.append(
                f"journal: {label} could not be recorded ({exc}); undo compares the files with the last recorded "
                "snapshot instead"
            )
        return self.take_notices()

    def record_user_step(self, label: str, foreign: Iterable[str] = (), written: Iterable[str] = ()) -> list[str]:
        """Snapshot after the user's own command (`!command`): every path changed since the last snapshot is
        the user's (foreign), so undo never takes it back; so is what ribbit wrote for it (`written`: its
        overlay applied, FIFOs included). Never raises; notices for the user."""
        with self._lock:
            changed: list[str] = []
            written = list(written)
            if self.snapshots:
                try:
                    changed = [self._display(p) for p in self._changed(self.snapshots[-1], self.tree_now())]
                except (*GIT_ERRORS, JournalError):
                    changed = []  # the snapshot below says why, if it fails too
            return self.record_step(label, foreign=[*foreign, *changed, *written], written=written)

    def agent_paths(self) -> set[str]:
        """Root-relative paths the agent's recorded steps changed, someone else's changes left out, read from
        the snapshots themselves: a resumed session's earlier steps count too (one git diff a step)."""
        with self._lock:
            found = set(self.agent_changed)
            for before, after in zip(self.snapshots, self.snapshots[1:]):
                meta = self._meta(after)
                others = set(meta.get("foreign", [])) - set(meta.get("mixed", []))
                try:
                    changed = [self._display(p) for p in self._changed(before, after)]
                except GIT_ERRORS:
                    continue
                found |= {p for p in changed if p not in others}
            return found

    def has_pending(self) -> bool:
        """Whether the last step could not be recorded (see record_step)."""
        return self._pending is not None

    def limit_store(self, quota: StoreQuota) -> None:
        """What a step's snapshot copies counts against the session's write quota; past what is left, the
        journal copies no more (the quota is then reached and the session's commands stopped)."""
        self._worktree.quota = quota

    def keep_every_file(self) -> None:
        """Copy every file a step makes, whatever its size (review's throwaway worktree: what is reviewed
        comes from the snapshot, never from the disk again)."""
        self._worktree.copy_everything = True

    def task_began(self) -> None:
        """Mark the session open while a task runs (`refs/ribbit/<session>/open`), written now, while there is
        room: if a step then fills the disk (or ribbit dies) the mark stays, and `ribbit undo` in another
        process knows the last step may not be recorded. Never raises (a notice when it cannot be written)."""
        with self._lock:
            if not self.snapshots:
                return
            try:
                self._objects.run("update-ref", self._open_ref(self.session_id), self.snapshots[-1])
            except GIT_ERRORS as exc:
                self._notices.append(f"journal: could not mark the session open ({_one_line(exc)})")

    def task_ended(self) -> None:
        """The task is over: the open mark goes, unless its last step is still unrecorded. Never raises."""
        with self._lock:
            if self._pending is not None or not self.snapshots:
                return
            try:
                self._objects.run("update-ref", "-d", self._open_ref(self.session_id))
            except GIT_ERRORS:
                pass  # the mark stays: undo also compares with the disk, which shows what was recorded

    def _open_ref(self, session_id: str) -> str:
        return f"{self.namespace}/{session_id}/open"

    def others_changed(
        self, foreign: Iterable[str], mixed: Iterable[str], uncertain: Iterable[str] = (), written: Iterable[str] = (),
    ) -> bool:
        """Changes someone else made since a step the journal could not record (a full disk): they join that
        step's, so its undo keeps them (and where ribbit wrote since, `written`, is looked at for FIFOs).
        False (nothing taken) when no step is waiting to be recorded."""
        with self._lock:
            if self._pending is None:
                return False
            label, had_foreign, had_mixed, had_uncertain, had_written = self._pending
            self._pending = (
                label, had_foreign + list(foreign), had_mixed + list(mixed), had_uncertain + list(uncertain),
                had_written + list(written),
            )
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
            found = restore.disk_state(self.top, rel, self.object_format)
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
        """Write a file's exact bytes to the object store (its id is what `restore.disk_state` computed)."""
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
        with self._with_uncopied(current) as (end, env):
            ignored = self.ignored_paths()
            if not ignored:
                return self.diff(self.snapshots[start], end, env=env)
            try:
                paths = [self._display(p) for p in self._changed(self.snapshots[start], end, env=env) if self._display(p) not in ignored]
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
            return "".join(
                self.diff(self.snapshots[start], end, paths[i:i + PATCH_PATHS], env=env) for i in range(0, len(paths), PATCH_PATHS)
            )

    @contextmanager
    def _with_uncopied(self, commit: str) -> Iterator[tuple[str, dict[str, str]]]:
        """`commit`'s tree with the files its scan did not copy (uncopied) read from disk now, in a temporary
        object store that is gone afterwards (the journal does not grow): (tree, the env that reads it)."""
        rels = sorted(self._worktree.uncopied)
        if not rels:
            yield commit, {}
            return
        scratch = Path(tempfile.mkdtemp(prefix="patch-", dir=self._index_dir))
        try:
            try:
                objects = Path(self._objects.text("rev-parse", "--git-path", "objects").strip())
                env = {
                    "GIT_OBJECT_DIRECTORY": str(scratch / "objects"),
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects if objects.is_absolute() else self._objects.work_tree / objects),
                }
                (scratch / "objects").mkdir()
                index_env = {**env, "GIT_INDEX_FILE": str(scratch / "index")}
                records = []
                for rel in rels:
                    entry = self._hash_from_disk(rel, env)
                    if entry is not None:
                        records.append(f"{entry.mode} {entry.sha}\t".encode() + os.fsencode(rel) + b"\0")
                self._objects.run("read-tree", commit, env=index_env)
                if records:
                    self._objects.run("update-index", "-z", "--index-info", input=b"".join(records), env=index_env)
                tree = self._objects.text("write-tree", env=index_env).strip()
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot compute the session's patch: {_one_line(exc)}") from None
            yield tree, env
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _hash_from_disk(self, rel: str, env: dict[str, str]) -> TreeEntry | None:
        """A top-relative file's exact bytes into the object store `env` names, reached without links; None
        when it is no longer a regular file there."""
        parent, _, name = rel.rpartition("/")
        try:
            dir_fd = open_dir_confined(self.top, parent) if parent else os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd, info = open_regular(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            return None
        try:
            sha = self._objects.text(
                "hash-object", "-w", "--no-filters", "--stdin-paths", input=f"/dev/fd/{fd}\n".encode(), pass_fds=[fd], env=env,
            ).strip()
        finally:
            os.close(fd)
        return TreeEntry("100755" if info.st_mode & stat.S_IXUSR else "100644", sha)

    def diff(self, a: str, b: str, paths: Iterable[str] | None = None, *, env: dict[str, str] | None = None) -> str:
        """`git diff --binary` between two journal commits, paths relative to the folder ribbit runs in.

        Text keeps undecodable bytes as surrogates (os.fsdecode), so it encodes back exactly."""
        limit = [self._from_root(p) for p in paths] if paths is not None else [self.scope]
        if not limit:
            return ""
        try:
            out = self._objects.text(
                "-c", "core.quotePath=off", "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                "--no-renames", a, b, "--", *limit, env={"GIT_LITERAL_PATHSPECS": "1", **(env or {})},
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
        """Root-relative paths that differ between two journal commits, the files `b` did not copy (a step
        made them) included unless `a` held them as they are."""
        try:
            changed = set(self._changed(a, b)) | self._uncopied_since(a, b)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
        return [self._display(p) for p in sorted(changed)]

    def _uncopied_since(self, a: str, b: str) -> set[str]:
        """Top-relative files commit `b` did not copy whose (size, mtime) `a` did not hold already."""
        before = self._unrecorded(a)
        after = self._unrecorded(b)
        return {p for p in (self._from_root(q) for q in self._meta(b).get("uncopied", [])) if after.get(p) != before.get(p)}

    def changed_since_start(self) -> list[str]:
        """Root-relative paths that differ between the session's start and the working tree now."""
        if not self.snapshots:
            return []
        try:
            now = self.tree_now()
            changed = set(self._changed(self.snapshots[0], now)) | {p for p in self._worktree.uncopied if self._in_scope(p)}
            return [self._display(p) for p in sorted(changed)]
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None

    def disk_state(self, rel: str) -> DiskState:
        """What is on disk at a root-relative path, reached without following links."""
        return restore.disk_state(self.top, self._from_root(rel), self.object_format)

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

    def undo_last(self, observer: WriteObserver | None = None, uncertain_too: bool = False) -> UndoResult:
        """Put the files back as they were before the last step that changed them.

        Raises JournalError (one line) when there is nothing to undo or a file it would overwrite
        was changed after that step by someone other than ribbit. `observer` (the watcher) is told of
        each write before it lands. `uncertain_too`: take back the step's uncertain files as well (see
        snapshot); right after an undo that left some, and nothing recorded since, just those.
        """
        with self._lock:
            left = self._left_uncertain
            self._left_uncertain = None
            if uncertain_too and left is not None:
                return left(observer)
            if self._pending is not None:
                try:
                    self.snapshot(*self._pending)  # the disk may have room again
                except JournalError:
                    return self._undo_unrecorded(self._pending, observer, uncertain_too)
            if len(self.snapshots) < 2:
                raise JournalError("nothing to undo: the agent has not changed any file in this session")
            latest, previous = self.snapshots[-1], self.snapshots[-2]
            step = self._meta(latest).get("label", f"step {len(self.snapshots) - 1}")
            result = self._restore(previous, latest, [latest], undone=str(step), observer=observer, uncertain_too=uncertain_too)
            if result.uncertain:
                unsure = self._others_of([latest])[2]
                self._left_uncertain = lambda seen: self._restore(
                    previous, latest, [latest], undone=str(step), observer=seen, uncertain_too=True, only=unsure,
                )
            try:
                n = len(self.snapshots) - 1
                self._objects.run("update-ref", f"{self.namespace}/{self.session_id}/undone/{n}", latest)
                self._objects.run("update-ref", "-d", self.ref(n))
            except GIT_ERRORS as exc:
                raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
            self.snapshots.pop()
            return result

    def _undo_unrecorded(
        self, pending: tuple[str, list[str], list[str], list[str], list[str]], observer: WriteObserver | None,
        uncertain_too: bool = False, only: set[str] | None = None,
    ) -> UndoResult:
        """Undo a step the journal could not record: every file that differs from the last recorded
        snapshot goes back to it (what someone else changed meanwhile is kept), computed without writing
        anything to the journal (the disk may still be full)."""
        label, foreign, mixed, uncertain, written = pending
        target = self.snapshots[-1]
        specials_before = self._specials(target)
        try:
            before = self._entries(target)
            now = self._worktree.state_now(hints=[*map(self._from_root, written), *specials_before])
            specials_now = dict(self._worktree.specials)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the files to undo {label}: {_one_line(exc)}") from None

        def gone_under(folders: list[str]) -> set[str]:
            prefixes = tuple(f"{folder}/" for folder in folders)
            return {p for p in before if p not in now and p.startswith(prefixes)}

        unsure = set() if uncertain_too else with_files_gone_under(map(self._from_root, uncertain), gone_under)
        others = with_files_gone_under(map(self._from_root, foreign), gone_under) | unsure
        # Files too large to hash keep their earlier entry in `now`: the scan's own list names them.
        place = self._place()
        unrecorded, lost, not_restored = restore.too_large(
            place, self._unrecorded(target), dict(self._worktree.unrecorded), before, others,
            uncopied=self._uncopied(target),
        )
        paths = sorted(
            p for p in set(before) | set(now) | set(unrecorded) | restore.special_paths(specials_before, specials_now)
            if self._in_scope(p) and (before.get(p) != now.get(p) or p in unrecorded or specials_before.get(p) != specials_now.get(p))
            and p not in others and p not in lost and (only is None or p in only)
        )
        plan = restore.UndoPlan(
            place, before, now, paths, observer, expected=unrecorded, specials_before=specials_before, specials_after=specials_now,
        )
        restored, deleted = _carry_out(plan, {self._from_root(p) for p in mixed})
        self._pending = None
        if unsure:
            self._left_uncertain = lambda seen: self._undo_unrecorded(pending, seen, True, only=unsure)
        return UndoResult(
            session_id=self.session_id, undone=label,
            restored=[self._display(p) for p in restored], deleted=[self._display(p) for p in deleted],
            kept=sorted(self._display(p) for p in others - unsure if self._in_scope(p)), not_restored=not_restored,
            uncertain=sorted(self._display(p) for p in unsure if self._in_scope(p)),
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

    def resume(self) -> None:
        """Go on with this session's earlier snapshots (`ribbit --continue`; the journal was given its id),
        then one of the files as they are now, where what changed while ribbit was closed counts as someone
        else's (undo keeps it)."""
        session_id = self.session_id
        snapshots = self.session_snapshots(session_id)
        if not snapshots:
            raise JournalError(f"session {shown(session_id)} has no journal here")
        if self._ref_exists(f"{self.namespace}/{session_id}/reverted"):
            raise JournalError(f"session {session_id} was undone with `ribbit undo`; start a new one")
        with self._lock:
            self.snapshots = snapshots
            had = self._specials(snapshots[-1])
            self._worktree.specials = dict(had)  # looked at again: git does not list them
            try:
                changed = [self._display(p) for p in self._changed(snapshots[-1], self.tree_now())]
                changed += [self._display(p) for p in restore.special_paths(had, self._worktree.specials)]
                # A fresh index saw every path as new: what the agent changes counts from here on.
                self._worktree.take_changed()
            except GIT_ERRORS as exc:
                raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
            if changed:
                self.snapshot("resumed", foreign=changed)

    def undo_session(self, session_id: str, uncertain_too: bool = False) -> UndoResult:
        """`ribbit undo SESSION`: every file the session changed goes back to its start state; its uncertain
        files (see snapshot) only with `uncertain_too`, which after a plain undo takes back just those."""
        snapshots = self.session_snapshots(session_id)
        if not snapshots:
            raise JournalError(f"no ribbit session {shown(session_id)!r} in {self.kind}")
        if self._ref_exists(f"{self.namespace}/{session_id}/reverted"):
            if uncertain_too:
                return self._undo_uncertain_of(session_id, snapshots)
            raise JournalError(f"session {session_id} was already undone")
        cut_short = self._ref_exists(self._open_ref(session_id)) and session_id != self._live_session()
        if len(snapshots) < 2 and not cut_short:
            raise JournalError(f"nothing to undo: session {session_id} changed no files")
        scope = self._meta(snapshots[0]).get("scope", ".")
        if scope != self.scope:
            raise JournalError(f"session {session_id} ran in {self.top / scope}; run ribbit undo there")
        if cut_short:
            result = self._undo_cut_short(session_id, snapshots, uncertain_too)
        else:
            result = self._restore(
                snapshots[0], snapshots[-1], snapshots[1:], undone="session", session_id=session_id, uncertain_too=uncertain_too,
            )
        try:
            self._objects.run("update-ref", f"{self.namespace}/{session_id}/reverted", snapshots[-1])
            if uncertain_too:
                self._objects.run("update-ref", f"{self.namespace}/{session_id}/uncertain-undone", snapshots[-1])
            if cut_short:
                self._objects.run("update-ref", "-d", self._open_ref(session_id))
        except GIT_ERRORS as exc:
            raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
        return result

    def _undo_uncertain_of(self, session_id: str, snapshots: list[str]) -> UndoResult:
        """`ribbit undo --uncertain` of a session already undone: its uncertain files, as the session left them,
        go back to its start (the rest was put back by the first undo)."""
        marked = f"{self.namespace}/{session_id}/uncertain-undone"
        unsure = self._others_of(snapshots[1:])[2]
        if self._ref_exists(marked) or not unsure:
            raise JournalError(f"session {session_id} was already undone, and left no uncertain file to take back")
        result = self._restore(
            snapshots[0], snapshots[-1], snapshots[1:], undone="session", session_id=session_id, uncertain_too=True, only=unsure,
        )
        try:
            self._objects.run("update-ref", marked, snapshots[-1])
        except GIT_ERRORS as exc:
            raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
        return result

    def _live_session(self) -> str | None:
        """This journal's own session when it has one running (its open mark is its own, not a cut-short one)."""
        return self.session_id if self.snapshots else None

    def _undo_cut_short(self, session_id: str, snapshots: list[str], uncertain_too: bool = False) -> UndoResult:
        """`ribbit undo` of a session whose last task ended with a step unrecorded (its open mark stayed):
        what the recorded steps changed and whatever differs from the last snapshot now go back to the
        session's start. The disk's state is computed without writing to the journal (it may still be
        full). Someone else's changes the recorded steps saw are kept; a change made after the last
        recorded step cannot be told from the unrecorded step's, and is taken back with it (named)."""
        target, latest = snapshots[0], snapshots[-1]
        try:
            before, recorded = self._entries(target), self._entries(latest)
            changed = set(self._changed(target, latest)) if len(snapshots) > 1 else set()
            foreign, mixed, unsure = self._others_of(snapshots[1:])
            if uncertain_too:
                unsure = set()
            foreign |= unsure
            specials_before = self._specials(target)
            # What the session recorded is looked at, ignored files too; its FIFOs and sockets as well (one the
            # unrecorded step made is not known here: nothing tells a later process where ribbit wrote).
            self._worktree.assume_recorded(recorded, {**specials_before, **self._specials(latest)})
            now = self._worktree.state_now()
            specials_now = dict(self._worktree.specials)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the files to undo session {session_id}: {_one_line(exc)}") from None
        place = self._place()
        unrecorded, lost, not_restored = restore.too_large(
            place, self._unrecorded(target), dict(self._worktree.unrecorded), before, foreign,
            uncopied=self._uncopied(target),
        )
        since = {p for p in set(recorded) | set(now) if recorded.get(p) != now.get(p)}
        since |= restore.special_paths(self._specials(latest), specials_now)
        changed |= restore.special_paths(specials_before, self._specials(latest))
        paths = sorted(
            p for p in changed | since | set(unrecorded) | restore.special_paths(specials_before, specials_now)
            if self._in_scope(p) and p not in foreign and p not in lost
        )
        plan = restore.UndoPlan(
            place, before, now, paths, expected=unrecorded, specials_before=specials_before, specials_after=specials_now,
        )
        restored, deleted = _carry_out(plan, mixed)
        after_last = sorted(self._display(p) for p in since if p in set(restored) | set(deleted))
        return UndoResult(
            session_id=session_id, undone="session",
            restored=[self._display(p) for p in restored], deleted=[self._display(p) for p in deleted],
            kept=sorted(self._display(p) for p in changed if p in foreign and p not in unsure), not_restored=not_restored,
            uncertain=sorted(self._display(p) for p in changed if p in unsure), unrecorded_step=after_last,
        )

    # -- one session's snapshots ----------------------------------------------------------------

    def session_snapshots(self, session_id: str) -> list[str]:
        steps = self._refs(session_id).get(session_id, {})
        return [steps[n] for n in sorted(steps)]

    def snapshots_of(self, session_ids: Iterable[str]) -> list[SessionSnapshots]:
        """What this journal holds of these sessions (the store lists them; one it holds nothing of, or
        cannot read, is left out)."""
        wanted = set(session_ids)
        try:
            refs = {sid: steps for sid, steps in self._refs().items() if sid in wanted}
            reverted = self._reverted() if refs else set()
            still_open = self._marked("open") if refs else set()
        except GIT_ERRORS:
            return []
        held = []
        for sid, steps in refs.items():
            ordered = [steps[n] for n in sorted(steps)]
            try:
                started = self._commit_time(ordered[0])
                files = self._changed(ordered[0], ordered[-1]) if len(ordered) > 1 else []
                files = sorted(set(files) | self._uncopied(ordered[-1])
                               | restore.special_paths(self._specials(ordered[0]), self._specials(ordered[-1])))
            except GIT_ERRORS:
                continue
            held.append(SessionSnapshots(
                session_id=sid, started=started, steps=len(ordered) - 1,
                files=[self._display(p) for p in files], reverted=sid in reverted,
                cut_short=sid in still_open and sid not in reverted and sid != self._live_session(),
            ))
        return held


    def _restore(
        self, target: str, latest: str, covered: list[str], *, undone: str, session_id: str | None = None,
        observer: WriteObserver | None = None, uncertain_too: bool = False, only: set[str] | None = None,
    ) -> UndoResult:
        """Back from `latest` to `target` over what the `covered` steps changed; their uncertain files kept
        unless `uncertain_too`; `only`: these top-relative paths and no other."""
        try:
            before, after = self._entries(target), self._entries(latest)
            paths = self._changed(target, latest)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
        foreign, mixed, unsure = self._others_of(covered)
        if uncertain_too:
            unsure = set()

        def within(found: dict[str, _T]) -> dict[str, _T]:
            return found if only is None else {p: v for p, v in found.items() if p in only}

        if only is not None:
            paths = [p for p in paths if p in only]
        try:
            done = restore.restore(
                self._place(), before, after, paths, unrecorded_target=within(self._unrecorded(target)),
                unrecorded_latest=within(self._unrecorded(latest)), foreign=foreign | unsure, mixed=mixed, observer=observer,
                uncopied_target=self._uncopied(target), specials_before=within(self._specials(target)),
                specials_after=within(self._specials(latest)),
            )
        except restore.RestoreError as exc:
            raise JournalError(str(exc)) from None
        uncertain = {self._display(p) for p in unsure}
        return UndoResult(
            session_id=session_id or self.session_id, undone=undone, restored=done.restored, deleted=done.deleted,
            kept=[p for p in done.kept if p not in uncertain], uncertain=[p for p in done.kept if p in uncertain],
            not_restored=done.not_restored,
        )

    def _others_of(self, steps: Iterable[str]) -> tuple[set[str], set[str], set[str]]:
        """(foreign, mixed, uncertain) top-relative paths of these steps' snapshots (see snapshot)."""
        foreign: set[str] = set()
        mixed: set[str] = set()
        uncertain: set[str] = set()
        for commit in steps:
            meta = self._meta(commit)
            foreign |= {self._from_root(p) for p in meta.get("foreign", [])}
            mixed |= {self._from_root(p) for p in meta.get("mixed", [])}
            uncertain |= {self._from_root(p) for p in meta.get("uncertain", [])}
        return foreign, mixed, uncertain

    def _place(self) -> restore.Place:
        """What the restore needs of this journal."""
        return restore.Place(
            top=self.top, root=self.root, object_format=self.object_format, display=self._display,
            in_scope=self._in_scope, read_blob=self._blob,
        )

    def _specials(self, commit: str) -> dict[str, int]:
        """The top-relative FIFOs and sockets a snapshot found (git cannot store them), with their modes."""
        found: dict[str, int] = {}
        for p, mode in (self._meta(commit).get("specials") or {}).items():
            try:
                found[self._from_root(p)] = int(mode, 8)
            except (TypeError, ValueError):
                continue
        return found

    def _uncopied(self, commit: str) -> set[str]:
        """The top-relative files a snapshot chose not to copy (a step made them; past the write quota)."""
        return {self._from_root(p) for p in self._meta(commit).get("uncopied", [])}

    def _unrecorded(self, commit: str) -> dict[str, tuple[int, int]]:
        """The top-relative files a snapshot could not record, with (size, mtime_ns) as they were."""
        found: dict[str, tuple[int, int]] = {}
        for p, st in (self._meta(commit).get("unrecorded") or {}).items():
            if isinstance(st, list) and len(st) == 2:
                found[self._from_root(p)] = (int(st[0]), int(st[1]))
        return found

    def blob_id(self, data: bytes) -> str:
        """The object id git gives a blob holding `data` (sha1 or sha256, as the repository uses)."""
        return restore.blob_id(data, self.object_format)

    # -- git plumbing ---------------------------------------------------------------------------

    def _changed(self, a: str, b: str, *, env: dict[str, str] | None = None) -> list[str]:
        out = self._objects.out(
            "diff", "--name-only", "--no-renames", "--no-ext-diff", "--no-textconv", "-z", a, b, "--", self.scope,
            env={"GIT_LITERAL_PATHSPECS": "1", **(env or {})},
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

    def _refs(self, session_id: str = "") -> dict[str, dict[int, str]]:
        """Snapshot refs by session (one session's, given its id)."""
        where = f"{self.namespace}/{session_id}/" if session_id else self.namespace + "/"
        out = self._objects.text("for-each-ref", "--format=%(refname) %(objectname)", where)
        sessions: dict[str, dict[int, str]] = {}
        for line in out.splitlines():
            name, _, sha = line.partition(" ")
            parts = name[len(self.namespace) + 1:].split("/")
            if len(parts) == 2 and parts[1].isdigit():
                sessions.setdefault(parts[0], {})[int(parts[1])] = sha
        return sessions

    def _reverted(self) -> set[str]:
        """The sessions `ribbit undo SESSION` rolled back."""
        return self._marked("reverted")

    def _marked(self, mark: str) -> set[str]:
        """The sessions with `refs/ribbit/<session>/<mark>` (reverted; open: a task cut short)."""
        out = self._objects.text("for-each-ref", "--format=%(refname)", self.namespace + "/")
        return {
            line[len(self.namespace) + 1:].split("/")[0]
            for line in out.splitlines() if line.endswith("/" + mark)
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


def _carry_out(plan: restore.UndoPlan, mixed: set[str]) -> tuple[list[str], list[str]]:
    """The plan checked, then run: (restored, deleted), or a JournalError (a refused check restored nothing)."""
    problem = plan.check(mixed)
    if problem:
        raise JournalError(f"cannot undo: {problem}; nothing was restored")
    try:
        return plan.run()
    except restore.RestoreError as exc:
        raise JournalError(str(exc)) from None


def open_journals(root: Path) -> list[Journal]:
    """The journals `ribbit undo` looks in: the repository's (or the private one), then the private
    one as well when the folder became a repository after sessions were journaled privately."""
    first = Journal(root)
    journals = [first]
    if not first.private and (private_git_dir(root) / "HEAD").exists():
        journals.append(Journal(root, private=True))
    return journals


def _one_line(exc: BaseException) -> str:
    return one_line(str(exc))
