"""Reading files the agent names, at a bounded cost whatever they are.

A path inside the repository may be a FIFO (open() waits forever for a writer), a socket, a device
or a file of many gigabytes. Every tool reads through here: the file is opened without blocking and
without following a last-moment symlink, anything but a regular file is refused, and a file is read
in chunks — whole only up to MAX_EDIT_BYTES (what Write and Edit may change), otherwise just the
lines a Read window needs while the rest is counted.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from agent.fs import NotRegularFile
from agent.fs import open_regular as fs_open_regular
from agent.core.tools.errors import ToolError

# Write and Edit hold the old and the new text and diff them: past this they are refused.
MAX_EDIT_BYTES = 16 * 1024 * 1024
CHUNK_BYTES = 1 << 20
SNIFF_BYTES = 8192  # a NUL in here means binary (git's test)
MAX_LINE_CHARS = 2000
# A Read window keeps at most this much of one line (4 bytes a character, plus one to see the cut)
# and of all its lines together (about 64K tokens, half the evaluated context): a 2 GB file on one
# line, or limit=10**9, cost no more, in memory or in the conversation.
MAX_LINE_BYTES = MAX_LINE_CHARS * 4 + 4
MAX_WINDOW_BYTES = 256 * 1024


@dataclass(frozen=True)
class FileStamp:
    sha256: str  # "" when the file was too big to hash (it cannot be written back anyway)
    mtime_ns: int
    size: int


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def open_regular(path: Path, shown: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor on `path` and its stat, or ToolError if it is not a regular file.

    O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer (fstat then refuses
    it). O_NOFOLLOW: a symlink swapped in after the path was checked is not followed.
    """
    try:
        return fs_open_regular(path)
    except NotRegularFile as exc:
        raise ToolError(f"{shown} is {_kind(exc.mode)}, not a regular file; the tools only read regular files") from None
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from None


def read_for_edit(path: Path, shown: str) -> tuple[bytes, FileStamp]:
    """The whole file, for Write/Edit, refused past MAX_EDIT_BYTES (and if it grows while read)."""
    fd, info = open_regular(path, shown)
    try:
        if info.st_size > MAX_EDIT_BYTES:
            raise ToolError(_too_big(shown, info.st_size))
        data = bytearray()
        while chunk := os.read(fd, CHUNK_BYTES):
            data += chunk
            if len(data) > MAX_EDIT_BYTES:
                raise ToolError(_too_big(shown, len(data)))
        info = os.fstat(fd)
    finally:
        os.close(fd)
    content = bytes(data)
    return content, FileStamp(hashlib.sha256(content).hexdigest(), info.st_mtime_ns, len(content))


def file_sha256(path: Path, shown: str) -> str:
    """Hash of a regular file read in chunks ("" past MAX_EDIT_BYTES: treated as changed)."""
    fd, info = open_regular(path, shown)
    try:
        if info.st_size > MAX_EDIT_BYTES:
            return ""
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK_BYTES):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _too_big(shown: str, size: int) -> str:
    return (
        f"{shown} is {size / 1024 / 1024:.1f} MiB; Write and Edit change files up to "
        f"{MAX_EDIT_BYTES // 1024 // 1024} MiB (use Bash for bigger ones)"
    )


def count_newlines(chunk: bytes, start: int = 0) -> int:
    """Newlines in chunk[start:]. (bytes.count is three times slower on text, where they are dense.)"""
    part = chunk[start:] if start else chunk
    return len(part) - len(part.replace(b"\n", b""))


@dataclass
class TextWindow:
    lines: list[str]  # the window's lines, without line ends; a line cut short is longer than MAX_LINE_CHARS
    first: int  # 1-based number of lines[0]
    full: bool  # the window stopped at MAX_WINDOW_BYTES, before `limit` lines
    total: int  # lines in the file
    size: int
    binary: bool
    stamp: FileStamp


class _WindowScan:
    """One pass over the file: hash (when small enough), UTF-8 check, line count, window lines."""

    def __init__(self, first: int, limit: int, hash_it: bool) -> None:
        self.first = first
        self.end = first + limit  # first line number past the window
        self.digest = hashlib.sha256() if hash_it else None
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.line = 1  # number of the line being read
        self.partial = False  # bytes seen since the last newline
        self.current = bytearray()
        self.lines: list[bytes] = []
        self.kept = 0
        self.seen = 0
        self.binary = False

    def feed(self, chunk: bytes) -> None:
        if self.seen < SNIFF_BYTES and b"\x00" in chunk[: SNIFF_BYTES - self.seen]:
            self.binary = True
            return
        self.seen += len(chunk)
        if self.digest is not None:
            self.digest.update(chunk)
        try:
            self.decoder.decode(chunk)
        except UnicodeDecodeError:
            self.binary = True
            return
        self._lines(chunk)
        self.partial = not chunk.endswith(b"\n")

    def _lines(self, chunk: bytes) -> None:
        pos = 0
        if self.line < self.first:  # before the window: count whole chunks where possible
            ends = count_newlines(chunk)
            if self.line + ends < self.first:
                self.line += ends
                return
            while self.line < self.first:
                pos = chunk.index(b"\n", pos) + 1
                self.line += 1
        while self.line < self.end and pos < len(chunk):
            newline = chunk.find(b"\n", pos)
            stop = len(chunk) if newline == -1 else newline
            room = MAX_LINE_BYTES - len(self.current)
            if room > 0:
                self.current += chunk[pos : min(stop, pos + room)]
            if newline == -1:
                return
            self._end_line()
            pos = newline + 1
        self.line += count_newlines(chunk, pos)  # past the window: only count

    def _end_line(self) -> None:
        raw = bytes(self.current)
        self.current = bytearray()
        self.lines.append(raw[:-1] if raw.endswith(b"\r") else raw)
        self.kept += len(raw)
        self.line += 1
        if self.kept >= MAX_WINDOW_BYTES:
            self.end = self.line  # the window is full: the rest is only counted

    def finish(self) -> tuple[list[str], int]:
        """(window lines, total lines); a file that ends inside a UTF-8 sequence turns out binary."""
        try:
            self.decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            self.binary = True
            return [], 0
        if self.partial:
            if self.first <= self.line < self.end:
                self._end_line()
            else:
                self.line += 1
        total = self.line - 1
        return [raw.decode("utf-8", "replace") for raw in self.lines], total


def read_window(path: Path, shown: str, first: int, limit: int) -> TextWindow:
    """Lines first..first+limit-1 of a text file (fewer if MAX_WINDOW_BYTES fills), with the file's
    line count, in memory bounded by the window whatever the file's size."""
    fd, info = open_regular(path, shown)
    try:
        scan = _WindowScan(first, limit, hash_it=info.st_size <= MAX_EDIT_BYTES)
        while chunk := os.read(fd, CHUNK_BYTES):
            scan.feed(chunk)
            if scan.binary:
                break
        info = os.fstat(fd)
    finally:
        os.close(fd)
    lines, total = ([], 0) if scan.binary else scan.finish()
    if scan.seen > MAX_EDIT_BYTES:
        scan.digest = None  # it grew past the limit while being read
    stamp = FileStamp(scan.digest.hexdigest() if scan.digest else "", info.st_mtime_ns, scan.seen)
    return TextWindow(
        lines=lines, first=first, full=scan.kept >= MAX_WINDOW_BYTES, total=total, size=info.st_size,
        binary=scan.binary, stamp=stamp,
    )
