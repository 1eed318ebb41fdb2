"""Opening files and folders inside a tree without following links: the one home of O_NOFOLLOW.

The agent controls the repository's contents, so any path in it may be a link planted to lead a read or a
write elsewhere, or a FIFO that blocks an open. Everything ribbit opens there goes one folder at a time
with these flags.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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
