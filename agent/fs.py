"""Files in a tree the agent controls: opened without following links, written atomically.

Any path in the repository may be a link planted to lead a read or a write elsewhere, or a FIFO that
blocks an open; `.git` may be spelt many ways. Everything ribbit opens or writes there goes one folder at
a time with O_NOFOLLOW, through this module: nothing else spells O_NOFOLLOW.

Every byte the agent (or an undo, or an approved review hunk) puts on disk goes through
`atomic_write`, so a crash or `kill -9` at any moment leaves each file fully old or fully new.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol


# Temp files are named `.NAME.XXXX.ribbit-tmp`; the journal never snapshots them and sweeps
# leftovers (a kill -9 between mkstemp and rename) at session start.
TEMP_SUFFIX = ".ribbit-tmp"


class WriteObserver(Protocol):
    """Told just before a ribbit write or removal lands, so the watcher can tell ribbit's own writes from
    outside edits without racing the rename (the folder fsync after it can take a while). Passed to
    each write that has someone to tell (the agent's edits, /undo); nothing process-wide."""

    def expect_write(self, path: Path, data: bytes | None) -> None:
        """`data` is what the file will hold; None: it (a file, or a folder) is being removed."""
        ...


class ApplyError(OSError):
    """A write the safety rules refuse (binary target, inside .git/, a link on the way). One line."""


class ChangedOnDisk(ApplyError):
    """`atomic_write(expect=...)`: the file is no longer what the change was made from; nothing was written."""


class _Anything:
    """`atomic_write`'s default `expect`: whatever is there is replaced."""


ANYTHING = _Anything()


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A new file, never one already there, never through a link.
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Opening a FIFO for writing without waiting for a reader (to unblock one), never through a link.
WRITE_NOWAIT_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
# Characters HFS+ ignores in names (so `.g\u200cit` is `.git` there).
_HFS_IGNORABLE = dict.fromkeys([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])


def is_git_dir_name(name: str) -> bool:
    """Whether a path component is `.git` on some file system: any case, HFS+ ignorable characters,
    NTFS trailing dots and spaces, `:stream` suffixes and the 8.3 short name `git~1` (as git's own
    verify_path rules, which refuse such paths in trees)."""
    lowered = name.lower()
    if name.isascii() and "git" not in lowered:
        return False  # the common case, cheaply
    if name.translate(_HFS_IGNORABLE).lower() == ".git":
        return True
    return lowered.split(":", 1)[0].rstrip(". ") in (".git", "git~1")


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def refuse_git_dir(path: Path, verb: str = "write") -> None:
    """No component may be `.git` as any file system would read it (.GIT, git~1, `.git.` ...)."""
    if any(is_git_dir_name(part) for part in path.parts):
        raise ApplyError(f"refusing to {verb} {path}: it is inside .git/")


@contextmanager
def parent_dir(path: Path, *, create: bool) -> Iterator[int]:
    """A descriptor of `path`'s folder, reached one component at a time without following links.

    Checked at the moment of use, not resolved beforehand: a folder on the way that is (or has
    just become) a link, or is not a folder, stops the write with an ApplyError naming it.
    `path` must be absolute and already resolved (callers confine it to the repository first).
    """
    if not path.is_absolute():
        raise ApplyError(f"refusing to write {path}: not an absolute path")
    fd = os.open(path.anchor or "/", DIR_FLAGS)
    try:
        walked = Path(path.anchor or "/")
        for part in path.parent.parts[1:]:
            walked = walked / part
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                next_fd = _open_dir_at(fd, part, walked)
            except OSError as exc:
                raise _not_a_folder(walked, exc) from None
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)


def _open_dir_at(fd: int, part: str, walked: Path) -> int:
    try:
        return os.open(part, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _not_a_folder(walked, exc) from None


def _not_a_folder(walked: Path, exc: OSError) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        kind = "a link" if os.path.islink(walked) or exc.errno != errno.ENOTDIR else "not a folder"
        return ApplyError(f"refusing to write through {walked}: it is {kind}")
    return exc


def _existing(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _refuse_binary(fd: int, name: str, path: Path) -> None:
    try:
        handle = os.open(name, READ_FLAGS, dir_fd=fd)
    except OSError:
        return  # a link or special file is replaced, never read or written through
    try:
        if stat.S_ISREG(os.fstat(handle).st_mode) and b"\x00" in os.read(handle, 8192):
            raise ApplyError(f"refusing to overwrite {path}: it is a binary file")
    finally:
        os.close(handle)


def atomic_write(
    path: Path, data: bytes, mode: int | None = None, *, allow_binary: bool = False, executable: bool | None = None,
    observer: WriteObserver | None = None, expect: bytes | None | _Anything = ANYTHING,
) -> None:
    """Replace `path` with `data` so that a crash at any moment leaves it fully old or fully new.

    Temp file in the same folder (rename is atomic only within a file system), fsync before the
    rename, then fsync the folder so the rename itself is durable. The old file's mode is kept
    unless `mode` is given; `executable` then sets or clears the executable bits (git's one mode
    bit). `allow_binary` is for undo/review restoring exact journal bytes.
    Folders are walked without following links (see `parent_dir`); a link at `path` itself is
    replaced by the file, never written through.
    `expect`: what the file must still hold (bytes; None: nothing there), compared as late as possible,
    in the same folder descriptor right before the rename; ChangedOnDisk (nothing written) if it does not.
    """
    refuse_git_dir(path)
    with parent_dir(path, create=True) as fd:
        name = path.name
        old = _existing(fd, name)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise ApplyError(f"refusing to write {path}: it is a folder")
        if not allow_binary:
            _refuse_binary(fd, name, path)
        if mode is None:
            mode = stat.S_IMODE(old.st_mode) if old is not None and stat.S_ISREG(old.st_mode) else _default_mode()
        if executable is not None:
            mode = mode | ((mode & 0o444) >> 2) if executable else mode & ~0o111
        tmp = f".{name[:200]}.{os.urandom(4).hex()}{TEMP_SUFFIX}"
        handle = os.open(tmp, CREATE_FLAGS, 0o600, dir_fd=fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle, view):]
                os.fsync(handle)
                os.fchmod(handle, mode)
            finally:
                os.close(handle)
            if not isinstance(expect, _Anything) and _holds(fd, name) != expect:
                raise ChangedOnDisk(f"{path} changed on disk since the change was made from it")
            if observer is not None:
                observer.expect_write(path, data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(fd)


def _holds(fd: int, name: str) -> bytes | None | _Anything:
    """The bytes of the regular file `name` in folder `fd` (None: nothing there; ANYTHING: something that is
    not a regular file, which no expectation matches)."""
    try:
        handle, _info = open_regular(name, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError:
        return ANYTHING
    return read_and_close(handle)


def write_new_file(path: Path, data: bytes, *, executable: bool = False) -> None:
    """Create a file that does not exist yet, e.g. filling a fresh folder (no fsync: nothing to lose)."""
    refuse_git_dir(path)
    mode = _default_mode()
    if executable:
        mode |= (mode & 0o444) >> 2
    with parent_dir(path, create=True) as fd:
        handle = os.open(path.name, CREATE_FLAGS, 0o600, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view):]
            os.fchmod(handle, mode)
        finally:
            os.close(handle)


def remove_file(path: Path, observer: WriteObserver | None = None) -> None:
    """Delete a file (or link) ribbit itself takes away: undo of a created file, an approved deletion."""
    refuse_git_dir(path, "remove")
    with parent_dir(path, create=False) as fd:
        old = _existing(fd, path.name)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise ApplyError(f"refusing to remove {path}: it is a folder")
        if observer is not None:
            observer.expect_write(path, None)
        os.unlink(path.name, dir_fd=fd)
        os.fsync(fd)


def remove_empty_dir(path: Path, observer: WriteObserver | None = None) -> bool:
    """rmdir, without following links on the way; False when it is not an empty folder."""
    refuse_git_dir(path, "remove")
    try:
        with parent_dir(path, create=False) as fd:
            if observer is not None:
                observer.expect_write(path, None)
            os.rmdir(path.name, dir_fd=fd)
            os.fsync(fd)
        return True
    except OSError:
        return False


CHAIN_WINDOW = 128  # descriptors remove_empty_folders holds at once (well under the usual 1,024 open files)


def remove_empty_folders(folder: Path, stop: Path, observer: WriteObserver | None = None) -> None:
    """rmdir `folder`, then each folder above it short of `stop`, until one is not an empty folder; no
    link followed on the way. Each rmdir uses a descriptor of its parent from one walk down that serves
    CHAIN_WINDOW levels: removing a 1,500-deep chain costs ~20,000 opens, not one walk from the root a
    level (1.1 million)."""
    refuse_git_dir(folder, "remove")  # (its parents have fewer components: none is `.git` if it is not)
    while folder != stop and folder.is_relative_to(stop):
        try:
            chain = _parents_chain(folder, CHAIN_WINDOW)
        except OSError:
            return
        try:
            for fd in reversed(chain):  # the parent of `folder`, then its parent, ...
                if folder == stop or not folder.is_relative_to(stop):
                    return
                if observer is not None and not _has_entries(fd, folder.name):
                    observer.expect_write(folder, None)  # (told only of what will go: an rmdir that fails is no removal)
                try:
                    os.rmdir(folder.name, dir_fd=fd)
                    os.fsync(fd)
                except OSError:
                    return
                folder = folder.parent
        finally:
            for fd in chain:
                os.close(fd)


def _has_entries(parent: int, name: str) -> bool:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError:
        return True  # not a folder ribbit can open: the rmdir fails too
    try:
        return bool(os.listdir(fd))
    finally:
        os.close(fd)


def _parents_chain(path: Path, keep: int) -> list[int]:
    """Descriptors of the last `keep` folders on the way to `path`'s folder (the last: its folder itself),
    reached one component at a time from the root without following links, as parent_dir does."""
    if not path.is_absolute():
        raise ApplyError(f"refusing to write {path}: not an absolute path")
    chain = [os.open(path.anchor or "/", DIR_FLAGS)]
    try:
        walked = Path(path.anchor or "/")
        for part in path.parent.parts[1:]:
            walked = walked / part
            chain.append(_open_dir_at(chain[-1], part, walked))
            if len(chain) > keep:
                os.close(chain.pop(0))
    except BaseException:
        for fd in chain:
            os.close(fd)
        raise
    return chain


# What a write observer is told a link will hold: never the bytes of a text file ribbit writes.
LINK_MARK = b"\0ribbit-link\0"


def special_mark(mode: int) -> bytes:
    """What a write observer is told a FIFO or socket holds (agent.undo.watcher hashes one the same way)."""
    return LINK_MARK + (b"fifo" if stat.S_ISFIFO(mode) else b"socket")


def atomic_symlink(path: Path, target: str, observer: WriteObserver | None = None) -> None:
    """Replace `path` with a symlink to `target`, atomically (used by undo for git symlinks). The observer is
    told LINK_MARK + the target's bytes (agent.undo.watcher hashes a link the same way)."""
    refuse_git_dir(path)
    with parent_dir(path, create=True) as fd:
        old = _existing(fd, path.name)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise ApplyError(f"refusing to write {path}: it is a folder")
        tmp = f".{path.name[:200]}.{os.urandom(4).hex()}{TEMP_SUFFIX}"
        os.symlink(target, tmp, dir_fd=fd)
        try:
            if observer is not None:
                observer.expect_write(path, LINK_MARK + os.fsencode(target))
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(tmp, dir_fd=fd)
            raise
        os.fsync(fd)


def make_special(path: Path, mode: int, observer: WriteObserver | None = None) -> None:
    """Make a FIFO or socket at `path` with `mode`'s type and permission bits (undo of a step that removed
    one; a socket made so has no program behind it, as one left by a program that ended). Nothing may be
    there; it is never opened. The observer is told `special_mark(mode)` first."""
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise ApplyError(f"refusing to make {path}: not a FIFO or socket")
    refuse_git_dir(path)
    with parent_dir(path, create=True) as fd:
        if _existing(fd, path.name) is not None:
            raise ApplyError(f"refusing to make {path}: something is there")
        if observer is not None:
            observer.expect_write(path, special_mark(mode))
        if stat.S_ISFIFO(mode):
            os.mkfifo(path.name, 0o600, dir_fd=fd)
        else:
            os.mknod(path.name, stat.S_IFSOCK | 0o600, dir_fd=fd)  # (a FIFO or socket needs no privilege)
        try:  # the recorded bits, whatever the umask; never through a link put there meanwhile
            os.chmod(path.name, stat.S_IMODE(mode), dir_fd=fd, follow_symlinks=False)
        except (OSError, ValueError, NotImplementedError) as exc:  # (ValueError: a link is there now)
            raise ApplyError(f"cannot set the mode of {path}: {exc}") from None
        os.fsync(fd)


def remove_tree(path: Path) -> None:
    """Delete a folder and everything in it, however deep (no recursion, no link followed);
    a link at `path` is removed itself. Used for ribbit's own temporary folders."""
    try:
        top = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(top.st_mode):
        os.unlink(path)
        return
    # (descriptor, name in its parent) of each folder on the way down; files go at once, a
    # folder once it is empty.
    stack: list[tuple[int, str | None]] = [(os.open(path, DIR_FLAGS), None)]
    try:
        while stack:
            fd, name = stack[-1]
            sub = _unlink_files_until_a_folder(fd)
            if sub is not None:
                stack.append((os.open(sub, DIR_FLAGS, dir_fd=fd), sub))
                continue
            stack.pop()
            os.close(fd)
            if stack and name is not None:
                os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for fd, _name in stack:
            os.close(fd)
    os.rmdir(path)


def _unlink_files_until_a_folder(fd: int) -> str | None:
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            os.unlink(entry.name, dir_fd=fd)
    return None


class NotRegularFile(OSError):
    """What `open_regular` found is not a regular file; `mode` says what it is."""

    def __init__(self, mode: int) -> None:
        super().__init__(f"not a regular file (mode {stat.S_IFMT(mode):o})")
        self.mode = mode



def read_and_close(handle: int) -> bytes:
    """All of an open file's bytes from where it stands; the descriptor is closed."""
    try:
        chunks = []
        while chunk := os.read(handle, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(handle)

def open_regular(path: Path | str, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A read-only descriptor on a regular file, and its stat: the last component is never followed (a
    link swapped in after a check), a FIFO is never waited on. NotRegularFile (closing what it opened) for
    anything else; the open's own OSError when there is nothing to open."""
    fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegularFile(info.st_mode)
    return fd, info


def read_regular(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file reached without links; None otherwise."""
    try:
        with parent_dir(path, create=False) as fd:
            handle, _info = open_regular(path.name, dir_fd=fd)
    except OSError:
        return None
    return read_and_close(handle)


def encode_text(new_text: str, old_text: str | None) -> bytes:
    """The bytes to write for `new_text`: a CRLF file stays CRLF even when the model wrote LF."""
    if old_text is not None and detect_newline(old_text) == "\r\n" and "\r\n" not in new_text:
        new_text = with_newline(new_text, "\r\n")
    return new_text.encode("utf-8")


def detect_newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def to_lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def with_newline(text_lf: str, newline: str) -> str:
    return text_lf.replace("\n", newline) if newline != "\n" else text_lf


def is_binary(data: bytes) -> bool:
    """NUL in the first 8 KiB, or not valid UTF-8: treat as binary (git uses the same NUL test)."""
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def open_dir_confined(top: Path | int, rel: str) -> int:
    """A descriptor of a top-relative folder, reached one component at a time without links
    (`top`: the tree's path, or a descriptor of it)."""
    fd = os.dup(top) if isinstance(top, int) else os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.split("/"):
            next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


# Bits no file in a checkout needs, taken off whenever a command sets them: setuid, setgid, sticky and
# world-write always; group-write only where the path did not have it when the session began (a user
# whose umask is 002 makes group-writable files, and those stay as they were).
ALWAYS_UNSAFE = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWOTH


def unsafe_bits(mode: int, at_start: int | None) -> int:
    """The bits of `mode` to take off, given the bits the path had when the session began (None: it is new)."""
    unsafe = mode & ALWAYS_UNSAFE
    if at_start is not None:
        unsafe |= mode & stat.S_IWGRP
        unsafe &= ~at_start  # the user's own bits stay
    return unsafe


def drop_bits(top_fd: int, rel: str, st: os.stat_result, bits: int) -> os.stat_result | None:
    """chmod without following links (the very inode that was stat'ed); the new stat, or None."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = os.dup(top_fd) if rel == "." else None
        if fd is None:
            parent_fd = open_dir_confined(top_fd, parent) if parent else os.dup(top_fd)
            try:
                fd = os.open(name, READ_FLAGS, dir_fd=parent_fd)
            finally:
                os.close(parent_fd)
        try:
            now = os.fstat(fd)
            if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                return None
            os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~bits)
            return os.fstat(fd)
        finally:
            os.close(fd)
    except OSError:
        return None
