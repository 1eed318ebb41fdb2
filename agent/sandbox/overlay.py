"""A writable command's changes, and only them: the command writes through an overlay.

While a sandboxed command runs with the repository writable, the repository it sees is an overlayfs
whose lower layer is the live checkout and whose upper layer is an empty folder of ribbit's: every file
the command writes, makes or removes lands in the upper layer and nowhere else. When it ends, ribbit
applies the upper layer to the checkout itself, one file at a time through agent.fs (no link followed,
nothing into the repository's `.git`), telling the write observer (the watcher) of each write first, so
it knows them by content. So what the command changed is known exactly, and what
anyone else changed in the checkout meanwhile (the user's editor) is theirs: it never counts as the
agent's step, and undo keeps it.

A file both changed is left as the other writer left it (the command's version is not applied; the
model is told which). "Changed meanwhile" is the checkout file's ctime at or after the command's start
(as the kernel's clock for ctimes read it): a file nobody touched keeps its ctime, and a false alarm
only keeps the user's version.

The overlay is mounted before bubblewrap starts, in a mount namespace of its own (`unshare`; as an
ordinary user also a user namespace, with the overlay's `userxattr` option; bubblewrap then maps the
user back). Where that cannot work (an older kernel, user namespaces turned off), `overlay_works` says
so once and commands write to the checkout directly, as before.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.fs import (
    read_and_close,
    DIR_FLAGS,
    special_mark,
    ApplyError,
    WriteObserver,
    atomic_symlink,
    atomic_write,
    is_git_dir_name,
    open_dir_confined,
    open_regular,
    remove_tree,
)

# Directory xattrs overlayfs sets on a folder the command removed and made again ("y": the lower
# folder's entries are hidden): `trusted.` as root, `user.` with userxattr.
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
NAMED = 5
# What mount's option string cannot carry in a path.
_UNMOUNTABLE = set(",:\\\n")
_MOUNT_SCRIPT = 'mount -t overlay -o "$1" ribbit-overlay "$2" && shift 2 && exec "$@"'


def overlay_home() -> Path:
    """Where upper layers live: beside ribbit's state, so on the user's disk (not a small /tmp), and
    hidden from every command (the sandbox masks the state folder)."""
    from agent.paths import state_home

    folder = state_home() / "overlays"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# An upper layer left by a ribbit that was killed while its command ran (none lives longer than a command).
STALE_AFTER_S = 2 * 3600


def sweep_stale(base: Path) -> None:
    """Remove upper layers left behind by a ribbit killed mid-command (its command's changes never applied)."""
    cutoff = time.time() - STALE_AFTER_S
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name.startswith(("overlay-", "probe-")) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                OverlayRun.remove(Path(entry.path))
        except OSError:
            continue


@functools.cache
def overlay_works() -> bool:
    """Whether this system lets ribbit mount an overlay for a command (tried once, on scratch folders)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    try:
        base = overlay_home()
        scratch = Path(tempfile.mkdtemp(prefix="probe-", dir=base))
    except OSError:
        return False
    try:
        (scratch / "lower").mkdir()
        run = OverlayRun(scratch / "lower", base)
        try:
            probe = subprocess.run(
                [*run.prefix(), "sh", "-c", 'echo ok > "$1/probe"', "sh", str(scratch / "lower")], cwd="/", capture_output=True, timeout=20,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
            written = run.upper / "probe"
            return probe.returncode == 0 and written.exists() and not (scratch / "lower" / "probe").exists()
        finally:
            run.close()
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def usable_for(root: Path) -> Path | None:
    """Where this repository's commands' upper layers go, or None when they write to it directly: a path
    mount's options cannot carry, or ribbit's state folder on another disk (the write quota measures the
    repository's disk, and an applied file is renamed into place, never copied)."""
    if set(str(root)) & _UNMOUNTABLE:
        return None
    try:
        base = overlay_home()
        if os.stat(base).st_dev != os.stat(root).st_dev:
            return None
    except OSError:
        return None
    return base if overlay_works() else None


class ApplyObserver(WriteObserver, Protocol):
    """The watcher, as applying an upper layer needs it: told of each write first, and asked whether someone
    else changed a path while the command ran (a removal leaves no ctime to compare)."""

    def changed_by_others(self, path: Path) -> bool: ...


@dataclass
class OverlayReport:
    applied: list[str] = field(default_factory=list)
    # Changed by someone else while the command ran: their version kept, the command's not applied.
    kept: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def lines(self) -> list[str]:
        out = []
        if self.kept:
            more = f" and {len(self.kept) - NAMED} more" if len(self.kept) > NAMED else ""
            out.append(
                "[ribbit: not applied, because they changed outside this command while it ran (that version is "
                f"kept): {', '.join(self.kept[:NAMED])}{more}. Read them again before changing them.]"
            )
        for rel, why in self.skipped[:NAMED]:
            out.append(f"[ribbit: {rel} not applied: {why}]")
        return out


class OverlayRun:
    """One command's overlay: its upper layer, the command line that mounts it, then applying it."""

    def __init__(self, root: Path, base: Path) -> None:
        self.root = root
        self.folder = Path(tempfile.mkdtemp(prefix="overlay-", dir=base))
        self.upper = self.folder / "upper"
        self.work = self.folder / "work"
        self.upper.mkdir()
        self.work.mkdir()
        self.privileged = os.geteuid() == 0
        self.root_dev = os.stat(root).st_dev
        # The kernel's own clock for ctimes, read right before the command starts (a file made now): a file
        # changed at or after it changed while the command ran (time.time_ns() is finer than ctimes and
        # would miss a change in the same tick, or with slack count the agent's own edit just before).
        (self.folder / "start").touch()
        self.started_ns = os.stat(self.folder / "start").st_ctime_ns

    def prefix(self) -> list[str]:
        """What runs before bubblewrap: a mount namespace with the overlay on the repository."""
        options = f"lowerdir={self.root},upperdir={self.upper},workdir={self.work}"
        if self.privileged:
            namespace = ["unshare", "--mount", "--propagation", "private"]
        else:
            namespace = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
            options += ",userxattr"
        return [*namespace, "--", "sh", "-c", _MOUNT_SCRIPT, "sh", options, str(self.root)]

    def bwrap_options(self) -> list[str]:
        """bubblewrap's own options under the prefix: as an ordinary user it runs as uid 0 of the prefix's
        user namespace, so the command gets the user's ids back and no capability."""
        if self.privileged:
            return []
        return ["--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid()), "--cap-drop", "ALL"]

    def close(self) -> None:
        self.remove(self.folder)

    @staticmethod
    def remove(folder: Path) -> None:
        try:
            os.chmod(folder / "work" / "work", 0o700)  # overlayfs leaves it with mode 000
        except OSError:
            pass
        try:
            remove_tree(folder)  # however deep the command made it
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)

    # -- applying -------------------------------------------------------------------------------

    def apply(self, observer: ApplyObserver | None) -> OverlayReport:
        """The upper layer onto the checkout: files written, made, removed (whiteouts, opaque folders).
        Folders are walked by descriptor, without recursion and without following a link, however deep."""
        report = OverlayReport()
        folders = _Folders(os.open(self.upper, DIR_FLAGS), os.open(self.root, DIR_FLAGS))
        pending = [""]  # folders still to walk, depth first (no recursion, however deep)
        try:
            while pending:
                rel_dir = pending.pop()
                try:
                    up, down = folders.open(rel_dir)
                except OSError as exc:
                    report.skipped.append((rel_dir, exc.strerror or str(exc)))
                    continue
                for name in sorted(os.listdir(up), reverse=True):
                    rel = f"{rel_dir}/{name}" if rel_dir else name
                    if is_git_dir_name(name) and not rel_dir:
                        continue  # bubblewrap kept the repository's `.git` read-only: nothing of it is applied
                    try:
                        if self._apply_entry(up, down, name, rel, observer, report):
                            pending.append(rel)
                    except OSError as exc:
                        why = str(exc) if isinstance(exc, ApplyError) else exc.strerror or str(exc)
                        report.skipped.append((rel, why))
        finally:
            folders.close()
        report.applied.sort()
        return report

    def _apply_entry(
        self, up: int, down: int, name: str, rel: str, observer: ApplyObserver | None, report: OverlayReport,
    ) -> bool:
        """One entry of the upper layer; True for a folder to walk."""
        info = os.lstat(name, dir_fd=up)
        dest = self.root / rel
        now = _lstat_at(down, name)
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # a whiteout: the command removed it
            if now is None:
                return False
            if self._changed_meanwhile(down, name, now):
                report.kept.append(rel)
            else:
                _remove_at(down, name, dest, observer)
                report.applied.append(rel)
            return False
        if stat.S_ISDIR(info.st_mode):
            if (now is None or not stat.S_ISDIR(now.st_mode)) and self._someone_elses(down, name, now, dest, observer):
                report.kept.append(rel)  # removed (or moved away) meanwhile, folder and all, or made a file: that stands
                return False
            if now is not None and not stat.S_ISDIR(now.st_mode):
                _remove_at(down, name, dest, observer)
                now = None
            if now is None:
                os.mkdir(name, 0o700, dir_fd=down)
            sub_down = os.open(name, DIR_FLAGS, dir_fd=down)
            try:  # the mode the command left (the journal takes off and names what no folder needs)
                if stat.S_IMODE(os.fstat(sub_down).st_mode) != stat.S_IMODE(info.st_mode):
                    os.fchmod(sub_down, stat.S_IMODE(info.st_mode))
            finally:
                os.close(sub_down)
            sub_up = os.open(name, DIR_FLAGS, dir_fd=up)
            try:
                if _opaque(sub_up):  # removed and made again: what the folder held before is gone
                    self._clear_opaque(sub_up, down, name, rel, observer, report)
            finally:
                os.close(sub_up)
            return True
        if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
            if self._someone_elses(down, name, now, dest, observer):
                report.kept.append(rel)
                return False
            if now is not None and stat.S_ISDIR(now.st_mode):
                _remove_at(down, name, dest, observer)
                now = None
            if stat.S_ISLNK(info.st_mode):
                atomic_symlink(dest, os.readlink(name, dir_fd=up), observer)
                report.applied.append(rel)
                return False
            data = _read_at(up, name)
            mode = stat.S_IMODE(info.st_mode)  # setuid & co. too: the journal takes them off and names them
            if now is not None and stat.S_ISREG(now.st_mode) and stat.S_IMODE(now.st_mode) == mode and _read_at(down, name) == data:
                return False  # copied up without a change (opened for writing, touched)
            if info.st_dev == self.root_dev:
                # Same file system: the upper file itself is renamed into place (atomic, no copy; a command's
                # writes were never fsynced before either). The observer is told first, as atomic_write does.
                if observer is not None:
                    observer.expect_write(dest, data)
                if stat.S_IMODE(info.st_mode) != mode:
                    os.chmod(name, mode, dir_fd=up)  # (ribbit's own folder, hidden from every command)
                try:
                    os.rename(name, name, src_dir_fd=up, dst_dir_fd=down)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:  # a file system mounted inside the repository: copied
                        raise
                    atomic_write(dest, data, mode, allow_binary=True, observer=observer)
            else:
                atomic_write(dest, data, mode, allow_binary=True, observer=observer)
            report.applied.append(rel)
            return False
        if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode):
            if self._someone_elses(down, name, now, dest, observer):
                report.kept.append(rel)
                return False
            if now is not None:
                _remove_at(down, name, dest, observer)
            if observer is not None:
                observer.expect_write(dest, special_mark(info.st_mode))
            os.mknod(name, info.st_mode, dir_fd=down)  # (a FIFO or socket needs no privilege)
            report.applied.append(rel)
            return False
        report.skipped.append((rel, "a device; ribbit makes none in the checkout"))
        return False

    def _clear_opaque(
        self, sub_up: int, down: int, name: str, rel: str, observer: WriteObserver | None, report: OverlayReport,
    ) -> None:
        ours = set(os.listdir(sub_up))
        sub_down = os.open(name, DIR_FLAGS, dir_fd=down)
        try:
            for old in sorted(os.listdir(sub_down)):
                found = _lstat_at(sub_down, old)
                if old in ours or is_git_dir_name(old) or found is None:
                    continue
                if self._changed_meanwhile(sub_down, old, found):
                    report.kept.append(f"{rel}/{old}")
                else:
                    _remove_at(sub_down, old, self.root / rel / old, observer)
                    report.applied.append(f"{rel}/{old}")
        finally:
            os.close(sub_down)

    def _someone_elses(
        self, down: int, name: str, now: os.stat_result | None, dest: Path, observer: ApplyObserver | None,
    ) -> bool:
        """Whether someone else changed the checkout entry while the command ran (then their version stands):
        one that is there by its ctime; one that is gone, removed meanwhile or never there, by what the watcher
        saw (overlayfs's origin mark cannot tell: a `mv` of the command's carries it to the new name)."""
        if now is not None:
            return self._changed_meanwhile(down, name, now)
        return observer is not None and observer.changed_by_others(dest)

    def _changed_meanwhile(self, parent: int, name: str, info: os.stat_result) -> bool:
        """Whether the checkout entry (anything in it, for a folder) changed since the command began."""
        if not stat.S_ISDIR(info.st_mode):
            return info.st_ctime_ns >= self.started_ns
        stack = [os.open(name, DIR_FLAGS, dir_fd=parent)]
        try:
            while stack:
                fd = stack.pop()
                try:
                    for entry in os.listdir(fd):
                        found = _lstat_at(fd, entry)
                        if found is None:
                            continue
                        if stat.S_ISDIR(found.st_mode):
                            stack.append(os.open(entry, DIR_FLAGS, dir_fd=fd))
                        elif found.st_ctime_ns >= self.started_ns:
                            return True
                finally:
                    os.close(fd)
        finally:
            for fd in stack:
                os.close(fd)
        return False


class _Folders:
    """Descriptors of (upper layer, checkout) folder pairs by path, the most recently used kept open: a folder
    is opened from its parent's descriptors (one step, no link followed), else from the top one component at
    a time, so a walk costs a few opens a folder and few descriptors however wide or deep the tree."""

    KEPT = 64

    def __init__(self, upper: int, checkout: int) -> None:
        self.open_pairs: dict[str, tuple[int, int]] = {"": (upper, checkout)}

    def open(self, rel: str) -> tuple[int, int]:
        found = self.open_pairs.pop(rel, None)
        if found is None:
            parent, _, name = rel.rpartition("/")
            above = self.open_pairs.get(parent)
            if above is not None:
                up = os.open(name, DIR_FLAGS, dir_fd=above[0])
                try:
                    down = os.open(name, DIR_FLAGS, dir_fd=above[1])
                except BaseException:
                    os.close(up)
                    raise
            else:
                top_up, top_down = self.open_pairs[""]
                up = open_dir_confined(top_up, rel)
                try:
                    down = open_dir_confined(top_down, rel)
                except BaseException:
                    os.close(up)
                    raise
            found = (up, down)
        self.open_pairs[rel] = found  # most recent last
        while len(self.open_pairs) > self.KEPT:
            oldest = next(k for k in self.open_pairs if k)
            for fd in self.open_pairs.pop(oldest):
                os.close(fd)
        return found

    def close(self) -> None:
        for pair in self.open_pairs.values():
            for fd in pair:
                os.close(fd)
        self.open_pairs = {}


def _lstat_at(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return None


def _read_at(fd: int, name: str) -> bytes:
    handle, _info = open_regular(name, dir_fd=fd)
    return read_and_close(handle)


def _opaque(fd: int) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(fd, name) == b"y":
                return True
        except OSError:
            continue
    return False


def _remove_at(parent: int, name: str, path: Path, observer: WriteObserver | None) -> None:
    """A file, link or whole folder the command removed: each file told to the observer first, no link
    followed, no recursion however deep."""
    info = _lstat_at(parent, name)
    if info is None:
        return
    if not stat.S_ISDIR(info.st_mode):
        if observer is not None:
            observer.expect_write(path, None)
        os.unlink(name, dir_fd=parent)
        return
    # (descriptor, its name in the folder above, its path) of each folder on the way down.
    stack: list[tuple[int, str, Path]] = [(os.open(name, DIR_FLAGS, dir_fd=parent), name, path)]
    try:
        while stack:
            fd, _name, here = stack[-1]
            sub = None
            for entry in os.listdir(fd):
                found = _lstat_at(fd, entry)
                if found is not None and stat.S_ISDIR(found.st_mode):
                    sub = entry
                    break
                if observer is not None:
                    observer.expect_write(here / entry, None)
                os.unlink(entry, dir_fd=fd)
            if sub is not None:
                stack.append((os.open(sub, DIR_FLAGS, dir_fd=fd), sub, here / sub))
                continue
            stack.pop()
            os.close(fd)
            if observer is not None:  # the folder's own event: ribbit's removal, not someone else's
                observer.expect_write(here, None)
            os.rmdir(_name, dir_fd=stack[-1][0] if stack else parent)
    finally:
        for fd, _n, _p in stack:
            os.close(fd)
