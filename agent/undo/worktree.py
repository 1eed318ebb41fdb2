"""Recording the work tree in a git tree object: exact bytes, no filters, nothing followed.

How it works (no `git add`, so no filter, hook or eol conversion ever applies): git lists the
untracked, non-ignored files; to those are added every path the previous snapshot held (a file
the agent later hides with .gitignore stays recorded) and the user's tracked files. Each path is
lstat'ed without following links (a path under a link is gone; the link itself is recorded), and
only files whose stat data changed are hashed, as their exact bytes (`hash-object --no-filters`
on a descriptor opened with O_NOFOLLOW). The result goes into an index of ribbit's own (a
temporary file, never the user's), from which `write-tree` makes the tree.

A folder holding its own `.git` (a nested repository, or one the agent made) is walked here, so
its files are never lost to a gitlink. Paths git cannot store (`.GIT/x`, `git~1/x`...), devices
and folders git cannot read are left out, and named once in a notice: recording never
fails because of a path the agent created. FIFOs and sockets (git neither stores nor lists them) are
looked for, by lstat only, where ribbit wrote and where the last scan found one: `specials`, which the
journal keeps in the snapshot's meta.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.fs import DIR_FLAGS, READ_FLAGS, drop_bits, open_dir_confined, open_regular, unsafe_bits
from agent.fs import TEMP_SUFFIX
from agent.undo.ignored import IgnoredFiles
from agent.git import GitError, GitRepo, run_git, shown, unstorable_reason
from agent.fs import is_git_dir_name
from agent.glob_pattern import IGNORE_READ_LIMIT, IGNORE_WALK_SECONDS, IgnoreRules, ignore_rules, ignored_by

GIT_ERRORS = (GitError, OSError, ValueError)
# Attributes that make `git add` change bytes: the user's index then holds converted blobs, so
# its object ids cannot stand for the bytes on disk.
_CONVERTING_ATTRS = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")
# A file whose stat data is this recent may still change within the same timestamp tick: hash it
# again next time rather than trust the cached object id (git's "racily clean" problem).
RACY_NS = 2_000_000_000
# The longest the journal goes without asking git for new ignored paths, however quiet the watcher says
# the tree is.
IGNORED_LISTING_MAX_AGE_S = 20.0
HASH_BATCH = 200  # descriptors handed to one `git hash-object` (well under the usual 1,024 limit)
# What one snapshot hashes is bounded, or `truncate -s 1T x` (a sparse file: no disk, all read time)
# makes every later snapshot run into git's timeout and the journal stops. Files past either bound are
# left out (named once); a path recorded before keeps its earlier entry, so undo leaves it alone.
FILE_HASH_LIMIT = 256 * 1024 * 1024
SNAPSHOT_HASH_BUDGET = 1024 * 1024 * 1024
# A file a step created is not copied into the object store past this size: undoing that step only removes
# it, and the patch reads it from disk. What the journal keeps are before-states: the files as they were
# when the session began (all of them, up to the limits above), and what a step changed that existed before.
# Below it, a new file is copied still, so a later step's edit of it can be undone.
NEW_FILE_COPY_LIMIT = 1024 * 1024
NOTICE_NAMES = 3
# `git ls-files --stage --debug -z`: one record per index entry.
_DEBUG_RECORD = re.compile(
    rb"(\d{6}) ([0-9a-f]{40,64}) (\d)\t(.*?)\0"
    rb"  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n  dev: \d+\tino: (\d+)\n  uid: \d+\tgid: \d+\n  size: (\d+)\tflags: [0-9a-f]+\n",
    re.DOTALL,
)
# git's warning for a folder it cannot walk (cut short by git when the path is very long).
_UNREADABLE_DIR = re.compile(r"could not open directory '(.*?)(?:': (.*))?$")


@dataclass(frozen=True)
class TreeEntry:
    mode: str  # git's: 100644, 100755, 120000, 160000
    sha: str


class StoreQuota(Protocol):
    """What a session may still add to the repository's disk (the sandbox's write quota, handed over by the
    session: undo and sandbox do not know each other). The journal's copies count against it."""

    def left(self) -> int | None:
        """Bytes still allowed (None: no limit)."""
        ...

    def charge(self, size: int) -> None:
        """Count `size` bytes the journal wrote (or would have written) against the quota."""
        ...


@dataclass(frozen=True)
class Blocked:
    """A path that cannot be reached without going through a link or a file."""

    at: str  # top-relative component that is in the way
    kind: str  # "a link" | "a file" | "not a folder" | "unreadable"


UNTRACKED_FOLDER_LIMIT = 10_000  # folders the end-of-task check of untracked folders looks at


class WorkTreeIndex:
    """The journal's own index of one work tree (the part in `scope`); `tree_now` records it."""

    def __init__(self, git: GitRepo, objects: GitRepo, index: Path, *, scope: str, private: bool) -> None:
        self.git = git  # reads the work tree (ls-files)
        self.objects = objects  # writes objects and the index, reads no work-tree file
        self.top = git.work_tree
        self.scope = scope
        self.private = private
        self._index = index
        self.converting = self._uses_conversions()
        self.object_format = objects.text("rev-parse", "--show-object-format").strip() or "sha1"
        self._known: dict[str, TreeEntry] = {}  # what the index holds (the last recorded state)
        self._stat_ids: dict[str, tuple[tuple[int, ...], str]] = {}  # path -> (stat key, object id)
        self._seed: dict[str, tuple[TreeEntry, tuple[int, ...] | None]] | None = None  # the user's index
        self._left_out: set[str] = set()  # paths already named in a notice
        self._notices: list[str] = []
        self._tree: str | None = None  # the tree the index held when last written
        self.nested: set[str] = set()  # folders holding their own `.git` (not submodules) at the last scan
        self.ignored = IgnoredFiles()  # which git-ignored files are recorded, which are left outside
        # The last scan's files whose bytes the tree does not hold (too large, past the hash budget), with
        # (size, mtime_ns) as they were: undo puts back the earlier file only where the disk still shows that.
        self.unrecorded: dict[str, tuple[int, int]] = {}
        # Permission bits a scan took off (setuid, setgid, sticky, group/world write added by a command):
        # (path, mode before, mode after); and the bits each path had when the session began.
        self.stripped: list[tuple[str, int, int]] = []
        self._start_modes: dict[str, int] | None = None
        # Says whether no ignored path changed since it was last asked (the watcher's); None: always list.
        self.ignored_quiet: Callable[[], bool] | None = None
        self._listed_at: float | None = None  # when git last listed the ignored paths
        self._changed_since: set[str] = set()  # paths the index changed since take_changed() last ran
        # Of `unrecorded`, the files a step's snapshot chose not to copy (new past NEW_FILE_COPY_LIMIT, or past
        # the write quota): their bytes are on disk only, where the patch reads them.
        self.uncopied: set[str] = set()
        self.quota: StoreQuota | None = None  # the write quota a step's copies count against
        self.copy_everything = False  # a throwaway tree whose snapshots must hold every byte (review)
        # The FIFOs and sockets the last scan found (path -> st_mode: type and permission bits), which git
        # cannot store nor list: looked for where the scan was told ribbit wrote (hints), where the previous
        # scan found one, and among the paths the tree holds or held.
        self.specials: dict[str, int] = {}

    def take_changed(self) -> set[str]:
        """Paths (top-relative, in scope) whose entry changed since the last call: what a snapshot made now
        holds differently from the one before, without asking git for the diff."""
        changed, self._changed_since = self._changed_since, set()
        return {rel for rel in changed if self._in_scope(rel)}

    def gone_under(self, folders: Iterable[str]) -> set[str]:
        """Top-relative paths under these (top-relative) folders that the last scan no longer holds and that
        changed since take_changed() last ran: what a folder's removal took since the last snapshot."""
        prefixes = tuple(f"{folder}/" for folder in folders)
        return {rel for rel in self._changed_since if rel.startswith(prefixes) and rel not in self._known} if prefixes else set()

    def tree_now(self, hints: Iterable[str] = ()) -> str:
        """The tree object of the work tree as it is now (scope only; the rest as in the user's index).
        `hints`: top-relative paths ribbit wrote since, where a FIFO or socket may be (see `specials`)."""
        top_fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if self._seed is None:
                self._seed = self._read_user_index()
            state = self._scan(top_fd, hints=hints)
            changed = self._update_index(state)
        finally:
            os.close(top_fd)
        if changed or self._tree is None:
            self._tree = self.objects.text("write-tree", env=self._index_env()).strip()
        return self._tree

    def assume_recorded(self, entries: dict[str, TreeEntry], specials: dict[str, int] | None = None) -> None:
        """Start from a snapshot's entries (a later process undoing a session, a resumed one): the paths it
        holds are looked at by the next scan, git-ignored ones too, as if this index had recorded them; and
        its FIFOs and sockets (`specials`) too."""
        self._known = dict(entries)
        if specials is not None:
            self.specials = dict(specials)

    def state_now(self, hints: Iterable[str] = ()) -> dict[str, TreeEntry]:
        """The entries the work tree would be recorded with now, computed without writing to the object
        store or an index (for an undo when the disk is full); `specials` as the disk has them now."""
        top_fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if self._seed is None:
                self._seed = self._read_user_index()
            return self._scan(top_fd, write=False, hints=hints)
        finally:
            os.close(top_fd)

    def list_others(self, *, index: bool) -> tuple[list[str], list[tuple[str, str]]]:
        return self._list_others(index=index)

    def take_notices(self) -> list[str]:
        notices, self._notices = self._notices, []
        return notices

    def _display(self, rel: str) -> str:
        if self.scope != "." and rel.startswith(self.scope + "/"):
            return rel[len(self.scope) + 1:]
        return rel

    def _in_scope(self, rel: str) -> bool:
        return self.scope == "." or rel.startswith(self.scope + "/")

    def _scan(self, top_fd: int, *, write: bool = True, hints: Iterable[str] = ()) -> dict[str, TreeEntry]:
        """Every path the snapshot holds, with its mode and object id (hashing what changed); the FIFOs and
        sockets found go to `specials`."""
        assert self._seed is not None
        started = time.time_ns()
        if self._ignored_listing_needed(write):
            with ThreadPoolExecutor(max_workers=1) as pool:  # git walks the tree twice: at the same time
                ignored_listing = pool.submit(self._list_ignored)
                others, problems = self._list_others(index=True)
                listing = ignored_listing.result()
            self._listed_at = time.monotonic()
        else:  # nothing ignored changed: the ignored files recorded so far are all there is to look at
            others, problems = self._list_others(index=True)
            listing = []
        candidates = set(self._known) | set(self._seed)
        self.unrecorded = {}
        self.stripped = []
        first_scan = self._start_modes is None
        if first_scan:
            self._start_modes = {}
        nested = []
        for rel in others:
            if rel.endswith("/"):
                nested.append(rel.rstrip("/"))
            elif not rel.endswith(TEMP_SUFFIX):  # ribbit's own half-written files (swept at start)
                candidates.add(rel)
        self.nested = set()
        deadline = time.monotonic() + IGNORE_WALK_SECONDS  # for all nested walks of this snapshot
        for folder in nested:
            seeded = self._seed.get(folder)
            if seeded is not None and seeded[0].mode == "160000":
                continue  # a submodule: recorded as the gitlink it is
            self.nested.add(folder)
            files, trouble, hidden = _walk_nested(top_fd, folder, deadline)
            candidates.update(f for f in files if not f.endswith(TEMP_SUFFIX))
            problems.extend(trouble)
            listing += hidden  # what the nested repository's own .gitignore hides: ignored files like any other
        ignored, left_outside = self.ignored.select(top_fd, listing, tracked=self._seed)
        problems.extend(left_outside)
        candidates |= ignored | self.ignored.admitted | self.ignored.pinned
        state: dict[str, TreeEntry] = {}
        to_hash: list[tuple[str, os.stat_result]] = []
        links: list[tuple[str, os.stat_result, bytes]] = []
        folders: dict[str, Blocked | None] = {"": None}
        folder_stats: dict[str, os.stat_result] = {"": os.fstat(top_fd)}
        gone: list[str] = []
        specials: dict[str, int] = {}
        for rel in candidates:
            known = self._known.get(rel)
            if not self._in_scope(rel):
                seeded = self._seed.get(rel)
                if known is not None or seeded is not None:
                    state[rel] = known if known is not None else seeded[0]  # type: ignore[index]
                continue
            st = _lstat_confined(top_fd, rel, folders, folder_stats)
            if st is None:
                gone.append(rel)
                continue
            if isinstance(st, Blocked):
                continue
            st = self._safe_mode(top_fd, rel, st, first_scan)
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                seeded = self._seed.get(rel)
                if seeded is not None and seeded[0].mode == "160000":
                    state[rel] = seeded[0]
                continue
            if known is None or stat.S_ISLNK(mode):  # a path already recorded was checked then
                reason = unstorable_reason(rel, is_link=stat.S_ISLNK(mode))
                if reason:
                    problems.append((rel, reason))
                    continue
            if stat.S_ISREG(mode):
                sha = self._cached_id(rel, st)
                if sha is None:
                    to_hash.append((rel, st))
                    continue
                entry_mode = "100755" if mode & stat.S_IXUSR else "100644"
                same = known is not None and known.sha == sha and known.mode == entry_mode
                state[rel] = known if same else TreeEntry(entry_mode, sha)  # type: ignore[assignment]
            elif stat.S_ISLNK(mode):
                sha = self._cached_id(rel, st)
                if sha is not None:
                    state[rel] = known if known is not None and known.sha == sha else TreeEntry("120000", sha)  # type: ignore[assignment]
                else:
                    try:
                        links.append((rel, st, os.readlink(os.fsencode(rel), dir_fd=top_fd)))
                    except OSError as exc:
                        problems.append((rel, exc.strerror or "unreadable"))
            elif stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                specials[rel] = _special_mode(mode)  # not in the tree; undo knows it from the snapshot's meta
            else:
                problems.append((rel, "not a regular file (a device)"))
        left_out = _over_budget(to_hash)
        self.uncopied = set()
        if write and not first_scan and not self.copy_everything:
            self.uncopied = self._not_copied([item for item in to_hash if item[0] not in left_out])
            left_out.update(dict.fromkeys(self.uncopied, ""))
        for rel, st in to_hash:
            if rel in left_out:
                if rel not in self.uncopied:
                    problems.append((rel, left_out[rel]))
                self.unrecorded[rel] = (st.st_size, st.st_mtime_ns)
                known = self._known.get(rel)
                if known is not None:
                    state[rel] = known
        to_hash = [item for item in to_hash if item[0] not in left_out]
        if write:
            hashed = self._hash_files(top_fd, to_hash, started, problems)
            if self.quota is not None and not first_scan:
                sizes = {rel: st.st_size for rel, st in to_hash}
                self.quota.charge(sum(sizes.get(rel, 0) for rel, entry in hashed.items() if entry != self._known.get(rel)))
            state.update(hashed)
            state.update(self._hash_links(links, started))
        else:
            state.update(self._ids_in_process(top_fd, to_hash, links))
        specials.update(self._find_specials(top_fd, (set(hints) | set(self.specials)) - candidates, folders, folder_stats))
        self.specials = specials
        self._check_folders(top_fd, folder_stats, first_scan)
        if first_scan:
            self._check_untracked_folders(top_fd, first_scan=True)
        self._report(problems)
        if write:
            self.ignored.release(gone)
        return state

    def _find_specials(
        self, top_fd: int, rels: Iterable[str], folders: dict[str, Blocked | None], stats: dict[str, os.stat_result],
    ) -> dict[str, int]:
        """Which of these top-relative paths are FIFOs or sockets now (lstat only: never opened); paths the
        journal leaves outside (an environment), out of scope, or that git could never hold are not looked at."""
        found: dict[str, int] = {}
        for rel in rels:
            if (
                not rel or not self._in_scope(rel) or rel.endswith(TEMP_SUFFIX) or self.ignored.is_outside(rel)
                or unstorable_reason(rel, is_link=False)
            ):
                continue
            st = _lstat_confined(top_fd, rel, folders, stats)
            if isinstance(st, os.stat_result) and (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
                found[rel] = _special_mode(st.st_mode)
        return found

    def _not_copied(self, items: list[tuple[str, os.stat_result]]) -> set[str]:
        """The files a step's snapshot leaves out of the object store: new ones past NEW_FILE_COPY_LIMIT (a
        file the step created needs no copy to be undone), then the largest others past what the write
        quota has left, which counts them as written all the same: the session is stopped, rather than the
        journal made to grow past the quota (named in a notice)."""
        left = self.quota.left() if self.quota is not None else None
        found: set[str] = set()
        past_quota: list[str] = []
        total = 0
        for rel, st in sorted(items, key=lambda item: (item[1].st_size, item[0])):
            new = rel not in self._known and (self._seed is None or rel not in self._seed)
            if new and st.st_size > NEW_FILE_COPY_LIMIT:
                found.add(rel)
            elif left is not None and total + st.st_size > left:
                found.add(rel)
                past_quota.append(rel)
                assert self.quota is not None
                self.quota.charge(st.st_size)
            else:
                total += st.st_size
        if past_quota:
            named = ", ".join(shown(self._display(rel)) for rel in past_quota[:NOTICE_NAMES])
            more = f" and {len(past_quota) - NOTICE_NAMES} more" if len(past_quota) > NOTICE_NAMES else ""
            self._notices.append(
                f"journal: past the session's write quota, not copied: {named}{more} (the patch reads them from "
                "disk; undo of a later change to them cannot put this version back)"
            )
        return found

    def _ignored_listing_needed(self, write: bool) -> bool:
        """Whether to ask git for ignored paths the journal does not hold yet. Not when the watcher saw no
        event on an ignored path (nor a .gitignore) since the last listing, which it can only say with
        inotify; at least every IGNORED_LISTING_MAX_AGE_S anyway (an event queue can overflow)."""
        if not write or self.ignored_quiet is None or self._listed_at is None:
            return True
        if time.monotonic() - self._listed_at > IGNORED_LISTING_MAX_AGE_S:
            return True
        return not self.ignored_quiet()

    def _list_ignored(self) -> list[str]:
        """Ignored paths not in the journal's index (top-relative; `dir/` for a folder ignored whole)."""
        env = {"GIT_LITERAL_PATHSPECS": "1", **self._index_env()}
        out = self.git.out(
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory", "--full-name", "--", self.scope,
            env=env,
        )
        return [p for p in os.fsdecode(out).split("\0") if p and not p.endswith(TEMP_SUFFIX)]

    def _safe_mode(self, top_fd: int, rel: str, st: os.stat_result, first_scan: bool) -> os.stat_result:
        """Take off the permission bits a command added that no checkout needs (see `unsafe_bits`)."""
        assert self._start_modes is not None
        if first_scan:
            self._start_modes[rel] = stat.S_IMODE(st.st_mode)
            return st
        extra = unsafe_bits(stat.S_IMODE(st.st_mode), self._start_modes.get(rel))
        if not extra or stat.S_ISLNK(st.st_mode):
            return st
        changed = drop_bits(top_fd, rel, st, extra)
        if changed is None:
            return st
        self.stripped.append((rel, stat.S_IMODE(st.st_mode), stat.S_IMODE(changed.st_mode)))
        return changed

    def _check_folders(self, top_fd: int, folder_stats: dict[str, os.stat_result], first_scan: bool) -> None:
        """The folders this scan went through (the top too): the same rule as files."""
        for rel, st in folder_stats.items():
            if self.scope == "." or rel.startswith(self.scope + "/"):
                self._safe_mode(top_fd, rel or ".", st, first_scan)

    def check_untracked_folders(self) -> list[tuple[str, int, int]]:
        """The folders no scan goes through (untracked ones holding no file, the folders below them): the
        same rule as files, once at the end of a task (a step's scan only sees folders above files).
        Returns the bits taken off, as `stripped`."""
        top_fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.stripped = []
            self._check_untracked_folders(top_fd, first_scan=False)
            return self.stripped
        finally:
            os.close(top_fd)

    def _check_untracked_folders(self, top_fd: int, *, first_scan: bool) -> None:
        env = {"GIT_LITERAL_PATHSPECS": "1", **self._index_env()}
        try:
            # Bounded like the nested walks: --directory matches the .gitignore patterns of every untracked
            # folder (a nested repository's too), and hostile ones make that slow.
            out = self.git.out("ls-files", "-z", "--others", "--exclude-standard", "--directory", "--full-name", "--",
                               self.scope, env=env, timeout=IGNORE_WALK_SECONDS)
        except GitError as exc:
            self._notices.append(f"journal: the modes of empty folders were not checked ({exc})")
            return
        pending = [p.rstrip("/") for p in os.fsdecode(out).split("\0") if p.endswith("/")]
        seen = 0
        while pending and seen < UNTRACKED_FOLDER_LIMIT:
            rel = pending.pop()
            seen += 1
            try:
                fd = open_dir_confined(top_fd, rel)
            except OSError:
                continue  # gone, or a link: not a folder of the checkout
            try:
                st = os.fstat(fd)
                with os.scandir(fd) as entries:
                    pending.extend(f"{rel}/{e.name}" for e in entries if e.is_dir(follow_symlinks=False) and e.name != ".git")
            except OSError:
                continue
            finally:
                os.close(fd)
            self._safe_mode(top_fd, rel, st, first_scan)

    def _list_others(self, *, index: bool) -> tuple[list[str], list[tuple[str, str]]]:
        """Untracked, non-ignored paths (top-relative; `dir/` for a folder holding a `.git`),
        and the folders git could not read."""
        env = {"GIT_LITERAL_PATHSPECS": "1"}
        if index:
            env.update(self._index_env())
        proc = self.git.run("ls-files", "-z", "--others", "--exclude-standard", "--full-name", "--", self.scope, env=env)
        problems = []
        for line in os.fsdecode(proc.stderr).splitlines():
            match = _UNREADABLE_DIR.search(line)
            if match:
                why = match.group(2) or "path too long"
                problems.append((match.group(1).rstrip("/") + "/", f"git cannot read it: {why}"))
        return [p for p in os.fsdecode(proc.stdout).split("\0") if p], problems

    def _cached_id(self, rel: str, st: os.stat_result) -> str | None:
        """The object id recorded for this path when its stat data was the same (else None)."""
        key = _stat_key(st)
        cached = self._stat_ids.get(rel)
        if cached is not None and cached[0] == key:
            return cached[1]
        seeded = self._seed.get(rel) if self._seed else None
        if seeded is not None and seeded[1] is not None and stat.S_ISREG(st.st_mode) and _matches_index(st, seeded[1]):
            self._stat_ids[rel] = (key, seeded[0].sha)  # the user's index vouched for it
            return seeded[0].sha
        return None

    def _remember(self, rel: str, st: os.stat_result, sha: str, started: int) -> None:
        if max(st.st_mtime_ns, st.st_ctime_ns) < started - RACY_NS:
            self._stat_ids[rel] = (_stat_key(st), sha)
        else:
            self._stat_ids.pop(rel, None)

    def _hash_files(
        self, top_fd: int, items: list[tuple[str, os.stat_result]], started: int, problems: list[tuple[str, str]],
    ) -> dict[str, TreeEntry]:
        """Object ids of regular files, written to the object store as their exact bytes.

        Each file is opened here with O_NOFOLLOW and handed to git as /dev/fd/N, so git hashes the
        very file that was checked (no filters, no following a link swapped in meanwhile)."""
        found: dict[str, TreeEntry] = {}
        for start in range(0, len(items), HASH_BATCH):
            opened: list[tuple[str, int, os.stat_result]] = []
            try:
                for rel, _st in items[start:start + HASH_BATCH]:
                    try:
                        fd = os.open(rel, READ_FLAGS, dir_fd=top_fd)
                    except OSError as exc:
                        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                            problems.append((rel, exc.strerror or "unreadable"))
                        continue
                    fst = os.fstat(fd)
                    if not stat.S_ISREG(fst.st_mode) or fst.st_size > FILE_HASH_LIMIT:
                        os.close(fd)
                        if stat.S_ISREG(fst.st_mode):  # grown past the limit since the lstat: named too
                            problems.append((rel, f"larger than {FILE_HASH_LIMIT >> 20} MiB"))
                            self.unrecorded[rel] = (fst.st_size, fst.st_mtime_ns)
                        continue
                    opened.append((rel, fd, fst))
                if not opened:
                    continue
                listing = "".join(f"/dev/fd/{fd}\n" for _rel, fd, _st in opened).encode()
                shas = self.objects.text(
                    "hash-object", "-w", "--no-filters", "--stdin-paths", input=listing, pass_fds=[fd for _r, fd, _s in opened],
                ).split()
                for (rel, _fd, fst), sha in zip(opened, shas):
                    found[rel] = TreeEntry("100755" if fst.st_mode & stat.S_IXUSR else "100644", sha)
                    self._remember(rel, fst, sha, started)
            finally:
                for _rel, fd, _st in opened:
                    os.close(fd)
        return found

    def _ids_in_process(
        self, top_fd: int, files: list[tuple[str, os.stat_result]], links: list[tuple[str, os.stat_result, bytes]],
    ) -> dict[str, TreeEntry]:
        """Object ids computed here, stored nowhere (and not cached: the objects do not exist)."""
        found: dict[str, TreeEntry] = {}
        for rel, _st in files:
            parent, _, name = rel.rpartition("/")
            try:
                dir_fd = open_dir_confined(top_fd, parent) if parent else os.dup(top_fd)
                try:
                    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError:
                continue
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode):
                    continue
                digest = hashlib.new(self.object_format)
                digest.update(b"blob %d\0" % fst.st_size)
                while chunk := os.read(fd, 1 << 20):
                    digest.update(chunk)
                found[rel] = TreeEntry("100755" if fst.st_mode & stat.S_IXUSR else "100644", digest.hexdigest())
            finally:
                os.close(fd)
        for rel, _st, target in links:
            digest = hashlib.new(self.object_format)
            digest.update(b"blob %d\0" % len(target) + target)
            found[rel] = TreeEntry("120000", digest.hexdigest())
        return found

    def _hash_links(self, links: list[tuple[str, os.stat_result, bytes]], started: int) -> dict[str, TreeEntry]:
        """Object ids of symlink targets (a link is stored as a blob holding its target)."""
        if not links:
            return {}
        folder = Path(tempfile.mkdtemp(prefix="links-", dir=self._index.parent))
        try:
            paths = []
            for n, (_rel, _st, target) in enumerate(links):
                path = folder / str(n)
                path.write_bytes(target)
                paths.append(os.fsencode(path))
            shas = self.objects.text("hash-object", "-w", "--no-filters", "--stdin-paths", input=b"\n".join(paths) + b"\n").split()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        found = {}
        for (rel, st, _target), sha in zip(links, shas):
            found[rel] = TreeEntry("120000", sha)
            self._remember(rel, st, sha, started)
        return found

    def _update_index(self, state: dict[str, TreeEntry]) -> bool:
        """Make the journal's own index hold exactly `state` (only the differences are sent);
        whether anything changed."""
        zero = "0" * (64 if self.object_format == "sha256" else 40)
        removed = self._known.keys() - state.keys()
        records = [f"0 {zero}\t".encode() + os.fsencode(rel) for rel in removed]
        changed = sorted(rel for rel, entry in state.items() if self._known.get(rel) != entry)
        self._changed_since.update(removed, changed)
        records += [f"{state[rel].mode} {state[rel].sha}\t".encode() + os.fsencode(rel) for rel in changed]
        refused = self._send_index_records(records)
        for rel in refused:
            state.pop(rel, None)
        self._report([(rel, "git refuses this path") for rel in refused])
        self._known = state
        return bool(records)

    def _send_index_records(self, records: Sequence[bytes]) -> list[str]:
        """Feed records to `update-index --index-info`; a record git refuses is dropped (found by
        halving the batch, which only happens for paths our own checks did not foresee)."""
        if not records:
            return []
        try:
            self.objects.run("update-index", "-z", "--index-info", input=b"\0".join(records) + b"\0", env=self._index_env())
            return []
        except GitError:
            if len(records) == 1:
                return [os.fsdecode(records[0].split(b"\t", 1)[1])]
        middle = len(records) // 2
        return self._send_index_records(records[:middle]) + self._send_index_records(records[middle:])

    def _read_user_index(self) -> dict[str, tuple[TreeEntry, tuple[int, ...] | None]]:
        """The user's tracked files (they stay journaled even if ignored), with the stat data that
        lets an unchanged file keep its object id without being read again."""
        if self.private:
            return {}
        index_file = self.git.git_dir / "index"
        try:
            index_mtime = index_file.stat().st_mtime_ns
        except OSError:
            return {}
        data = self.git.out("ls-files", "-z", "--stage", "--debug")
        seed: dict[str, tuple[TreeEntry, tuple[int, ...] | None]] = {}
        for match in _DEBUG_RECORD.finditer(data):
            mode, sha, stage, name = match.group(1).decode(), match.group(2).decode(), match.group(3), match.group(4)
            ctime_s, ctime_ns, mtime_s, mtime_ns, ino, size = (int(g) for g in match.groups()[4:])
            rel = os.fsdecode(name)
            if stage != b"0":
                seed.setdefault(rel, (TreeEntry(mode, sha), None))
                continue
            trusted = not self.converting and mode in ("100644", "100755") and mtime_s * 10**9 + mtime_ns < index_mtime
            seed[rel] = (TreeEntry(mode, sha), (mtime_s, mtime_ns, ctime_s, ctime_ns, size, ino) if trusted else None)
        return seed

    def _report(self, problems: list[tuple[str, str]]) -> None:
        """One notice line for the paths left out of this snapshot that were not named before."""
        new = [(rel, why) for rel, why in problems if rel not in self._left_out]
        if not new:
            return
        self._left_out.update(rel for rel, _ in new)
        named = ", ".join(f"{shown(self._display(rel))} ({why})" for rel, why in new[:NOTICE_NAMES])
        more = f" and {len(new) - NOTICE_NAMES} more" if len(new) > NOTICE_NAMES else ""
        self._notices.append(f"journal: not recorded, so not in the patch nor undoable: {named}{more}")

    def _index_env(self) -> dict[str, str]:
        return {"GIT_INDEX_FILE": str(self._index)}


    def _uses_conversions(self) -> bool:
        """Whether the user's `git add` rewrites bytes here (autocrlf, or text/eol/filter attributes)."""
        try:
            autocrlf = self.git.text("config", "--get", "core.autocrlf", check=False).strip().lower()
        except GIT_ERRORS:
            autocrlf = ""
        if not autocrlf:
            autocrlf = _user_config("core.autocrlf").lower()
        if autocrlf in ("true", "input"):
            return True
        try:
            listed = self.git.text("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ":(glob)**/.gitattributes")
        except GIT_ERRORS:
            listed = ""
        candidates = [self.top / p for p in filter(None, listed.split("\0"))] + [self.git.git_dir / "info" / "attributes"]
        for path in candidates:
            data = _read_small(path)
            if data is None:
                continue
            for line in data.decode("utf-8", "replace").splitlines():
                words = line.split()
                if words and not words[0].startswith("#"):
                    if any(w.lstrip("-!").split("=")[0] in _CONVERTING_ATTRS for w in words[1:]):
                        return True
        return False


def _over_budget(items: list[tuple[str, os.stat_result]]) -> dict[str, str]:
    """The files one snapshot does not hash: any past FILE_HASH_LIMIT, then the largest ones while the
    rest would exceed SNAPSHOT_HASH_BUDGET (sizes as stat says: a sparse file counts whole)."""
    left_out: dict[str, str] = {}
    total = 0
    for rel, st in sorted(items, key=lambda item: (item[1].st_size, item[0])):
        if st.st_size > FILE_HASH_LIMIT:
            left_out[rel] = f"larger than {FILE_HASH_LIMIT >> 20} MiB"
        elif total + st.st_size > SNAPSHOT_HASH_BUDGET:
            left_out[rel] = f"past the {SNAPSHOT_HASH_BUDGET >> 20} MiB one snapshot reads"
        else:
            total += st.st_size
    return left_out


def _walk_nested(
    top_fd: int, folder: str, deadline: float | None = None,
) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """Files under a folder git treats as another repository: the journal records them itself
    (`.git` entries never). What its .gitignore files hide (matched as git does, each match in linear
    time) comes third, as git's own listing of ignored paths has it (`dir/` for a folder): the
    ignored-file budget decides (agent.undo.ignored). Past `deadline` (time.monotonic) the folders
    not walked yet are named instead: files recorded before stay recorded, new ones there wait for a
    later snapshot."""
    files: list[str] = []
    hidden: list[str] = []
    problems: list[tuple[str, str]] = []
    slow = f"not walked: the .gitignore patterns here took over {IGNORE_WALK_SECONDS:g} s to match"
    if deadline is not None and time.monotonic() > deadline:
        return [], [(folder + "/", slow)], []
    try:
        fd = open_dir_confined(top_fd, folder)
    except OSError as exc:
        return [], [(folder + "/", exc.strerror or "unreadable")], []
    stack: list[tuple[str, int, list[tuple[str, IgnoreRules]]]] = [(folder, fd, [])]
    while stack:
        current, dir_fd, specs = stack.pop()
        try:
            entries = sorted(os.scandir(dir_fd), key=lambda e: e.name)
            rules = _gitignore_at(dir_fd)
        except OSError as exc:
            problems.append((current + "/", exc.strerror or "unreadable"))
            os.close(dir_fd)
            continue
        if rules is not None:
            specs = [*specs, (current + "/", rules)]
        for entry in entries:
            if deadline is not None and time.monotonic() > deadline:
                for left, left_fd, _specs in stack:
                    os.close(left_fd)
                    problems.append((left + "/", slow))
                problems.append((current + "/", slow))
                stack = []
                break
            path = f"{current}/{entry.name}"
            if is_git_dir_name(entry.name):
                problems.append((path, "a nested .git is never journaled"))
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if ignored_by(specs, path, is_dir):
                hidden.append(path + "/" if is_dir else path)
                continue
            if is_dir:
                try:
                    stack.append((path, os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd), specs))
                except OSError as exc:
                    problems.append((path + "/", exc.strerror or "unreadable"))
            else:
                files.append(path)
        os.close(dir_fd)
    return files, problems, hidden


def _gitignore_at(dir_fd: int) -> IgnoreRules | None:
    try:
        fd = os.open(".gitignore", READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, IGNORE_READ_LIMIT)
    finally:
        os.close(fd)
    return ignore_rules(data)


def _lstat_confined(
    top_fd: int, rel: str, folders: dict[str, Blocked | None], stats: dict[str, os.stat_result],
) -> os.stat_result | Blocked | None:
    """lstat of a top-relative path whose every folder is a real folder (checked once per snapshot)."""
    parent = rel.rpartition("/")[0]
    blocked = folders[parent] if parent in folders else _folder_ok(top_fd, parent, folders, stats)
    if blocked is not None:
        return blocked
    try:
        return os.stat(rel, dir_fd=top_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return None
        return Blocked(rel, "unreadable")


def _folder_ok(top_fd: int, folder: str, folders: dict[str, Blocked | None], stats: dict[str, os.stat_result]) -> Blocked | None:
    """None if every component of `folder` is a real folder, else what is in the way (memoised)."""
    parts = folder.split("/")
    result: Blocked | None = None
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if prefix in folders:
            result = folders[prefix]
        else:
            if result is None:
                try:
                    st = os.stat(prefix, dir_fd=top_fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        result = Blocked(prefix, "a link")
                    elif not stat.S_ISDIR(st.st_mode):
                        result = Blocked(prefix, "a file")
                    else:
                        stats[prefix] = st
                except OSError:
                    result = Blocked(prefix, "unreadable")
            folders[prefix] = result
        if result is not None:
            return result
    return None


def _special_mode(mode: int) -> int:
    """A FIFO's or socket's type and permission bits, as the snapshot's meta records them."""
    return stat.S_IFMT(mode) | stat.S_IMODE(mode)


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _matches_index(st: os.stat_result, recorded: tuple[int, ...]) -> bool:
    """Whether a file's lstat data is what the user's index recorded (git keeps 32-bit size/inode)."""
    mtime_s, mtime_ns, ctime_s, ctime_ns, size, ino = recorded
    return (
        divmod(st.st_mtime_ns, 10**9) == (mtime_s, mtime_ns) and divmod(st.st_ctime_ns, 10**9) == (ctime_s, ctime_ns)
        and st.st_size & 0xFFFFFFFF == size and st.st_ino & 0xFFFFFFFF == ino
    )


def _read_small(path: Path, limit: int = 1 << 20) -> bytes | None:
    """A small regular file's bytes, or None (never blocks on a FIFO, never follows the last link)."""
    try:
        fd, _info = open_regular(path)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _user_config(key: str) -> str:
    """A value from the user's own global/system config: read (which runs nothing), never applied."""
    for scope in ("--global", "--system"):
        try:
            proc = run_git(["config", scope, "--get", key], check=False, read_user_config=True)
        except GitError:
            continue
        if proc.returncode == 0:
            return proc.stdout.decode("utf-8", "replace").strip()
    return ""
