"""Watching the live checkout for changes made outside the agent.

A watchdog observer runs in its own thread; its handler only records (path, time, was-the-agent-busy)
and wakes a flusher thread. The flusher waits for a burst to go quiet (debounce), drops `.git/`,
temp files and the agent's own writes, and reports what is left through one callback. Git-ignored
files are not reported to the user; those the undo journal records still count as someone else's
change (undo keeps a `.env` the user edited), those it leaves outside (`.venv`...) are dropped.

Who made a change: a Write/Edit, and a command's changes applied from its overlay, are recognised by the
content hash they left (`agent_wrote`, `expect_write`); while such a command runs, every change is someone
else's. A writable command that writes to the checkout directly (no sandbox, or no overlay on this system)
opens a window (`agent_running`): what changes in it may be the command's or anyone's, and nothing here can
tell which, so those paths are *uncertain* (undo names them and leaves them). When the window opens and
closes, the watcher drops a marker file in the root and waits for its event (`sync`): the observer delivers
events in order, so what came before the command is judged as someone else's, however late a loaded machine
delivers them (a short grace after the end is kept for what the marker cannot order). Everything else is
external. The sets since the last journal snapshot are kept for the journal's undo rules.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple


from pydantic import BaseModel
from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserverVFS

from agent.fs import CREATE_FLAGS, LINK_MARK, TEMP_SUFFIX, open_regular, special_mark


DEBOUNCE_S = 0.15  # a burst (editor save, git checkout) is reported once it has been quiet this long
MAX_DELAY_S = 1.0  # ... or at the latest this long after its first event
AGENT_GRACE_S = 0.5  # events this soon after the agent's Bash ends are still the agent's
# How long `sync` waits for the observer to deliver the marker's event (then: the grace alone).
BARRIER_TIMEOUT_S = 5.0
BARRIER_PREFIX = ".ribbit-watch-sync."
POLL_INTERVAL_S = 2.0
# Use polling when the tree needs more than this share of the inotify watch limit.
INOTIFY_SHARE = 0.5
# watchdog walks new folders recursively (os.walk recurses on Python 3.11): a tree deeper than this
# kills its inotify thread. Such trees are polled, and polling does not descend past this depth.
MAX_WATCH_DEPTH = 200
HEALTH_CHECK_S = 2.0  # how often an idle watcher checks that its observer threads are still alive
# The most of one file the watcher hashes to recognise ribbit's own write (Write/Edit stop at 16 MiB).
WATCH_HASH_LIMIT = 64 * 1024 * 1024
# What changes content or mode (a chmod is a change git records): no open/close events, so reads cost nothing.
EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileModifiedEvent, FileAttribEvent, FileDeletedEvent, FileMovedEvent, DirMovedEvent,
    DirDeletedEvent,  # (a folder moved out of the tree names none of its files)
]


class ExternalChange(BaseModel):
    paths: list[str]  # relative to the root, sorted
    deleted: list[str]


class Changes(NamedTuple):
    """Root-relative paths changed since the last journal snapshot, by whom."""

    # Only by someone else: undo keeps them. `folder/` (a trailing slash): a folder someone else removed or moved
    # out of the tree, whose files no event named; the journal keeps the files a step finds gone under it.
    foreign: set[str]
    mixed: set[str]  # by the agent (a Write/Edit, an applied overlay) and by someone else: undo refuses them
    uncertain: set[str]  # while a command wrote to the checkout directly: nobody can tell; undo names and keeps them
    # Every path ribbit itself wrote, made or removed (told first: expect_write, agent_wrote), whoever changed it
    # since: where the journal looks for the FIFOs and sockets git cannot list (an applied overlay's mknod).
    written: AbstractSet[str] = frozenset()


IgnoreCheck = Callable[[list[str]], set[str]]


def inotify_watch_limit() -> int | None:
    try:
        return int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    except (OSError, ValueError):
        return None


def count_dirs(root: Path, stop_after: int) -> int:
    """Folders under root (all of them: inotify watches ignored ones too), counting up to stop_after."""
    return tree_shape(root, stop_after)[0]


def tree_shape(root: Path, stop_after: int) -> tuple[int, int]:
    """(folders under root, deepest level seen), counting up to stop_after folders.

    Iterative, so a tree of any depth (an agent can make a 2,000-deep one) is measured, not a crash.
    """
    count = deepest = 0
    stack = [(str(root), 0)]
    while stack and count <= stop_after:
        folder, depth = stack.pop()
        deepest = max(deepest, depth)
        try:
            with os.scandir(folder) as entries:
                subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        count += len(subdirs)
        stack.extend((sub, depth + 1) for sub in subdirs)
    return count, deepest


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: RepoWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type != "moved":
            if event.event_type == "deleted":  # (a folder moved out of the tree, to the trash: no event of its files)
                self.watcher._folder_removed(os.fsdecode(event.src_path))
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        self.watcher._record([os.fsdecode(p) for p in paths if p])


class RepoWatcher:
    def __init__(
        self,
        root: Path,
        on_change: Callable[[ExternalChange], None],
        *,
        is_ignored: IgnoreCheck | None = None,
        is_unrecorded: IgnoreCheck | None = None,
        debounce_s: float = DEBOUNCE_S,
        force_polling: bool = False,
    ) -> None:
        self.root = root.resolve()
        self.on_change = on_change
        self.is_ignored = is_ignored or (lambda rels: set())
        # Of the ignored paths, those the undo journal does not record (agent.undo.ignored): the rest
        # are journaled, so who changed them matters to undo, but they are not announced to the user.
        self.is_unrecorded = is_unrecorded or (lambda rels: set(rels))
        self.debounce_s = debounce_s
        self.force_polling = force_polling
        self.method = "none"
        self.message = ""
        self._lock = threading.Condition()
        self._pending: dict[str, bool] = {}  # path -> every event for it came while the agent was busy
        self._first_at = 0.0
        self._last_at = 0.0
        self._agent_busy = 0
        self._agent_until = 0.0
        self._marker = ""  # the name of the barrier file being waited for
        self._marker_seen = False
        self._written: dict[str, str | None] = {}  # path -> sha256 the agent's last write left
        self._foreign: set[str] = set()  # since the last take_since_snapshot()
        self._ignored_changed = True  # an event touched an ignored path since ignored_quiet() last said
        self._agent: set[str] = set()
        self._wrote: set[str] = set()  # paths ribbit wrote, made or removed since the last take_since_snapshot()
        self._uncertain: set[str] = set()  # changed in a window of a command writing to the checkout directly
        # Someone else's changes since the last settle(), and whether every event up to now is sorted into it.
        self._others: set[str] = set()
        self._removed_folders: set[str] = set()  # of those, folders gone (removed, or moved out of the tree)
        self._removing_folders: set[str] = set()  # folders ribbit is removing itself (told first: expect_write)
        self._wrote_unsynced = False  # ribbit wrote since the last sync: those events may not be delivered yet
        self._others_judged = False
        self._stopping = False
        self._flushing = False
        self._observer: BaseObserver | None = None
        self._observer_threads: list[threading.Thread] = []
        self._ignored_dirs: dict[str, bool] = {}
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> str:
        """Start observing; returns a line saying how (inotify, or polling and why)."""
        reason = ""
        if self.force_polling:
            reason = "polling requested"
        else:
            limit = inotify_watch_limit()
            if limit is not None:
                budget = int(limit * INOTIFY_SHARE)
                folders, deepest = tree_shape(self.root, budget)
                if folders > budget:
                    reason = f"the tree has more than {budget} folders (inotify allows {limit} watches)"
                elif deepest > MAX_WATCH_DEPTH:
                    reason = f"the tree is more than {MAX_WATCH_DEPTH} folders deep"
        if not reason:
            try:
                before = set(threading.enumerate())
                observer: BaseObserver = Observer()
                observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=EVENT_FILTER)
                observer.start()
                self._observer = observer
                # The observer's own threads: if one dies (a tree too deep appeared), we switch to polling.
                self._observer_threads = [t for t in threading.enumerate() if t not in before]
                self.method = "inotify" if "Inotify" in type(observer).__name__ else type(observer).__name__
                self.message = f"watching {self.root} for outside changes ({self.method})"
            except OSError as exc:  # ENOSPC: out of inotify watches; EMFILE: out of instances
                reason = f"the system refused more file watches ({exc.strerror or exc})"
        if reason:
            self._start_polling(reason)
        self._thread = threading.Thread(target=self._flush_loop, name="ribbit-watcher", daemon=True)
        self._thread.start()
        return self.message

    def _start_polling(self, reason: str) -> None:
        observer = PollingObserverVFS(os.stat, self._listdir, polling_interval=POLL_INTERVAL_S)
        observer.schedule(_Handler(self), str(self.root), recursive=True)
        observer.start()
        self._observer = observer
        self._observer_threads = []
        self.method = "polling"
        self.message = (
            f"watching {self.root} by polling every {POLL_INTERVAL_S:g} s, because {reason}; "
            "outside changes are noticed more slowly"
        )

    def _check_observer(self) -> None:
        """An inotify thread that died (watchdog recursing into a very deep new tree) is replaced by polling."""
        if not self._observer_threads or all(t.is_alive() for t in self._observer_threads):
            return
        old = self._observer
        self._start_polling(f"a folder more than {MAX_WATCH_DEPTH} levels deep appeared")
        if old is not None:
            old.stop()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- what the agent does --------------------------------------------------------------------

    def agent_wrote(self, path: Path) -> None:
        """After the agent's own Write/Edit landed (ChangeGate): recognised later by its content, and counted
        as the agent's for the journal's undo rules."""
        rel = self._rel(str(path))
        if rel is None:
            return
        sha = _sha_of(path)
        with self._lock:
            self._written[rel] = sha
            self._agent.add(rel)
            self._wrote.add(rel)

    def expect_write(self, path: Path, data: bytes | None) -> None:
        """WriteObserver: before a ribbit write or removal lands (the agent's edits, /undo), remember what
        it will leave."""
        if data is None and _is_folder(path):  # a folder: its own event, once gone
            folder = self._rel_of(path)  # (lexical: no lstat per level, as undo prunes a 2,000-deep chain)
            if folder is not None:
                with self._lock:
                    self._removing_folders.add(folder)
            return
        rel = self._rel(str(path.parent.resolve() / path.name))
        if rel is None:
            return
        with self._lock:
            self._written[rel] = None if data is None else hashlib.sha256(data).hexdigest()
            self._wrote_unsynced = True
            self._wrote.add(rel)

    @contextmanager
    def agent_running(self) -> Iterator[None]:
        """A command writing to the checkout directly: what changes while it runs is uncertain, the command's
        or someone else's (kept out of undo, named).

        Events already pending (say, of the agent's Write a moment ago) are judged first, by content,
        while the files are still as that write left them: judged after the command changed the file
        again, the write's own event would look like someone else's change (and undo would refuse).
        Both ends wait for the observer (`sync`): what changed before the command is judged as not the
        agent's, what changed during it as uncertain (with polling this costs up to a poll each end).
        """
        self.settle()
        with self._lock:
            self._agent_busy += 1
        try:
            yield
        finally:
            try:
                self.sync()
            finally:
                with self._lock:
                    self._agent_busy -= 1
                    self._agent_until = time.monotonic() + AGENT_GRACE_S

    def settle(self) -> None:
        """Judge every change made so far now (before a command that may change the files again); from
        here on, `changed_by_others` counts anew."""
        self._judge_now()
        with self._lock:
            self._others, self._removed_folders, self._others_judged = set(), set(), False

    def _judge_now(self) -> None:
        self.sync()
        self.flush_now()
        self.wait_idle(timeout=2.0)

    def changed_by_others(self, path: Path) -> bool:
        """Whether someone else changed (or removed) `path` since the last settle(): asked when a command's
        overlay is applied, of a file it changed that is gone from the checkout now. Every event so far is
        judged first, once per command."""
        rel = self._rel_of(path)
        if rel is None:
            return False
        with self._lock:
            judged = self._others_judged
        if not judged:
            self._judge_now()
            with self._lock:
                self._others_judged = True
        with self._lock:  # the path, or a folder above it (few: a prefix test each, whatever the depth)
            return rel in self._others or any(rel.startswith(folder + "/") for folder in self._removed_folders)

    def _rel_of(self, path: Path) -> str | None:
        """`path` relative to the root: lexically where it is written under the root (a path ribbit made
        from it: no lstat per level, which a 2,000-deep tree would pay per folder), else with its folder
        resolved."""
        if path.is_absolute() and ".." not in path.parts and path.is_relative_to(self.root):
            return self._rel(str(path))
        return self._rel(str(path.parent.resolve() / path.name))

    def sync(self) -> bool:
        """Wait until the observer has delivered every event that happened before now: create a marker
        file in the root and wait for its own event (with polling: a poll has run since). False (the
        grace alone then) if the root is not writable, the observer is not running or died meanwhile
        (then polling replaces it), or the event did not come within the timeout."""
        with self._lock:
            self._check_observer()
            observer = self._observer
        if observer is None or self._stopping:
            return False
        timeout = BARRIER_TIMEOUT_S + (2 * POLL_INTERVAL_S if self.method == "polling" else 0.0)
        name = f"{BARRIER_PREFIX}{os.urandom(6).hex()}{TEMP_SUFFIX}"  # TEMP_SUFFIX: never in a snapshot
        with self._lock:
            self._marker, self._marker_seen = name, False
        try:
            fd = os.open(self.root / name, CREATE_FLAGS, 0o600)
        except OSError:
            return False
        try:
            os.write(fd, b"ribbit")  # a modification too: polling sees a file only between two polls
        except OSError:  # a full disk: no marker left behind, the grace alone
            os.close(fd)
            _unlink_quietly(self.root / name)
            with self._lock:
                self._marker = ""
            return False
        os.close(fd)
        try:
            deadline = time.monotonic() + timeout
            with self._lock:
                while not self._marker_seen and not self._stopping:
                    left = deadline - time.monotonic()
                    self._check_observer()  # an inotify thread that died will never deliver the marker
                    if left <= 0 or self._observer is not observer:
                        break
                    self._lock.wait(min(left, 0.05))
                return self._marker_seen
        finally:
            with self._lock:
                self._marker = ""
            try:
                os.unlink(self.root / name)
            except OSError:
                pass

    def ignored_quiet(self) -> bool:
        """True when no event since the last call touched a git-ignored path the journal may record, nor a
        .gitignore (the journal then need not list ignored paths again). False whenever the watcher cannot
        tell: polling (which skips ignored folders), an observer not running, events not sorted yet (the
        session's step flushes them first, in take_since_snapshot). After ribbit's own writes (a command's
        overlay applied, a Write) their events are waited for first: once per step that wrote."""
        with self._lock:
            unsynced, self._wrote_unsynced = self._wrote_unsynced, False
        if unsynced:
            seen = self.sync()
            self.flush_now()
            self.wait_idle(timeout=2.0)
            if not seen:
                return False
        with self._lock:
            if self._pending or self._flushing:
                return False
            changed, self._ignored_changed = self._ignored_changed, False
            healthy = self.method == "inotify" and self._observer is not None and not self._stopping
        return healthy and not changed

    def take_since_snapshot(self) -> Changes:
        """What changed since the last call, by whom (see Changes)."""
        self.flush_now()
        with self._lock:
            foreign, agent, uncertain, wrote = self._foreign, self._agent, self._uncertain, self._wrote
            self._foreign, self._agent, self._uncertain, self._wrote = set(), set(), set(), set()
        return Changes(foreign - agent - uncertain, (foreign & agent) - uncertain, uncertain, wrote)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until nothing is pending (tests and the benchmark); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._flushing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    def flush_now(self) -> None:
        with self._lock:
            batch = self._take_batch()
        self._report(batch)

    # -- internals ------------------------------------------------------------------------------

    def _rel(self, path: str) -> str | None:
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return None
        if rel == "." or rel == ".git" or rel.startswith(".git/") or "/.git/" in rel or rel.endswith("/.git"):
            return None
        if rel.endswith(TEMP_SUFFIX):
            return None
        return rel

    def _folder_removed(self, path: str) -> None:
        """A folder gone (removed, or moved out of the tree: to the trash, where no event names its files).

        For `changed_by_others` (what a command changed in it), and for the journal: unless ribbit removed
        it (told first, expect_write), it stands in Changes as `folder/`, someone else's (or uncertain, in a
        direct command's window): the journal counts the files the step finds gone under it the same way."""
        rel = self._rel(path)
        if rel is None:
            return
        now = time.monotonic()
        with self._lock:
            if rel in self._removing_folders:
                self._removing_folders.discard(rel)
                return  # ribbit's own removal: an applied overlay's, undo's
            self._others.add(rel)
            self._removed_folders.add(rel)
            busy = self._agent_busy > 0 or now < self._agent_until
            (self._uncertain if busy else self._foreign).add(rel + "/")

    def _record(self, paths: list[str]) -> None:
        now = time.monotonic()
        with self._lock:
            busy = self._agent_busy > 0 or now < self._agent_until
            added = False
            for path in paths:
                if self._marker and os.path.basename(path) == self._marker:
                    self._marker_seen = True
                    self._lock.notify_all()
                    continue
                rel = self._rel(path)
                if rel is None:
                    continue
                self._pending[rel] = self._pending.get(rel, True) and busy
                added = True
            if added:
                if not self._first_at:
                    self._first_at = now
                self._last_at = now
                self._lock.notify_all()

    def _take_batch(self) -> dict[str, bool]:
        batch, self._pending = self._pending, {}
        self._first_at = self._last_at = 0.0
        self._flushing = bool(batch)
        return batch

    def _flush_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    if not self._lock.wait(HEALTH_CHECK_S):  # idle: blocked, waking rarely
                        self._check_observer()
                if self._stopping:
                    return
                now = time.monotonic()
                due = min(self._last_at + self.debounce_s, self._first_at + MAX_DELAY_S)
                if now < due:
                    self._lock.wait(due - now)
                    continue
                batch = self._take_batch()
            self._report(batch)

    def _report(self, batch: dict[str, bool]) -> None:
        try:
            if not batch:
                return
            ignored = self.is_ignored(sorted(batch))
            unrecorded = self.is_unrecorded(sorted(ignored)) if ignored else set()
            if ignored - unrecorded or any(rel.rpartition("/")[2] == ".gitignore" for rel in batch):
                with self._lock:
                    self._ignored_changed = True
            external: list[str] = []
            deleted: list[str] = []
            quiet: list[str] = []  # ignored files the journal records, changed by someone else: not announced
            for rel, by_agent in sorted(batch.items()):
                if rel in unrecorded:
                    continue
                full = self.root / rel
                if full.is_dir() and not full.is_symlink():
                    continue
                with self._lock:
                    written = self._written.get(rel, "")
                if by_agent:  # in a direct command's window: the command's, or anyone's
                    with self._lock:
                        self._uncertain.add(rel)
                    continue
                if written != "" and _sha_of(full) == written:
                    with self._lock:
                        self._agent.add(rel)
                    continue
                if rel in ignored:
                    quiet.append(rel)
                    continue
                external.append(rel)
                if not full.exists():
                    deleted.append(rel)
            if external or quiet:
                with self._lock:
                    self._foreign.update(external + quiet)
                    self._others.update(external + quiet)
                    for rel in external + quiet:
                        self._written.pop(rel, None)
            if external:
                self.on_change(ExternalChange(paths=external, deleted=deleted))
        finally:
            with self._lock:
                self._flushing = False
                self._lock.notify_all()

    def _listdir(self, path: str | None) -> Iterator[os.DirEntry[str]]:
        """Polling walks only what matters: never `.git/`, never ignored folders, nothing too deep."""
        entries = [e for e in os.scandir(path) if e.name != ".git"]
        rel = self._rel(os.fsdecode(path or self.root)) or ""
        if rel.count("/") + 1 >= MAX_WATCH_DEPTH:  # watchdog's snapshot walk recurses per level
            entries = [e for e in entries if not e.is_dir(follow_symlinks=False)]
        folders = [self._rel(e.path) or "" for e in entries if e.is_dir(follow_symlinks=False)]
        unknown = [rel for rel in folders if rel and rel not in self._ignored_dirs]
        if unknown:
            # Asked once per folder: a git call per folder on every poll would cost more than it saves.
            ignored = self.is_ignored(unknown)
            self._ignored_dirs.update({rel: rel in ignored for rel in unknown})
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and self._ignored_dirs.get(self._rel(entry.path) or "", False):
                continue
            yield entry


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):  # (gone, too long a path: not a folder ribbit is removing)
        return False


def _sha_of(path: Path) -> str | None:
    """sha256 of the regular file at `path`, None if nothing is there, "" if it cannot be what ribbit
    wrote: a link (never followed: `-> /dev/zero` would fill memory), a FIFO (never waited on), a
    device, or a file past WATCH_HASH_LIMIT (the agent can replace a file ribbit wrote by any of
    these in the same turn). Read in chunks."""
    try:
        fd, info = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        # A link, FIFO or socket ribbit made (a command's, applied from its overlay): known by its target or kind.
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                return hashlib.sha256(LINK_MARK + os.fsencode(os.readlink(path))).hexdigest()
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                return hashlib.sha256(special_mark(mode)).hexdigest()
        except OSError:
            pass
        return ""
    try:
        if info.st_size > WATCH_HASH_LIMIT:
            return ""
        digest = hashlib.sha256()
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > WATCH_HASH_LIMIT:
                return ""
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return ""
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
