"""Writing files onto the live checkout: atomically, keeping mode and line endings.

Every byte the agent (or an undo, or an approved review hunk) puts on disk goes through
`atomic_write`, so a crash or `kill -9` at any moment leaves each file fully old or fully new.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

# Temp files are named `.NAME.XXXX.ribbit-tmp`; the journal never snapshots them and sweeps
# leftovers (a kill -9 between mkstemp and rename) at session start.
TEMP_SUFFIX = ".ribbit-tmp"


# Called with (path, data) just before a write lands, so the watcher can tell ribbit's own writes
# from outside edits without racing the rename (the folder fsync after it can take a while).
WriteListener = Callable[[Path, "bytes | None"], None]  # None: the file is being removed
_listeners: list[WriteListener] = []


def add_write_listener(listener: WriteListener) -> None:
    _listeners.append(listener)


def remove_write_listener(listener: WriteListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


class ApplyError(OSError):
    """A write the safety rules refuse (binary target, inside .git/). One line for the model."""


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_target(path: Path) -> None:
    """Refuse paths inside a `.git` folder and existing binary files, whatever the caller checked."""
    if ".git" in path.parts:
        raise ApplyError(f"refusing to write {path}: it is inside .git/")
    if path.is_file() and not path.is_symlink():
        with path.open("rb") as handle:
            head = handle.read(8192)
        if b"\x00" in head:
            raise ApplyError(f"refusing to overwrite {path}: it is a binary file")


def atomic_write(path: Path, data: bytes, mode: int | None = None, *, allow_binary: bool = False) -> None:
    """Replace `path` with `data` so that a crash at any moment leaves it fully old or fully new.

    Temp file in the same folder (rename is atomic only within a file system), fsync before the
    rename, then fsync the folder so the rename itself is durable. The old file's mode is kept
    unless `mode` is given. `allow_binary` is for undo/review restoring exact journal bytes.
    """
    if not allow_binary:
        check_target(path)
    elif ".git" in path.parts:
        raise ApplyError(f"refusing to write {path}: it is inside .git/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = _default_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        for listener in list(_listeners):
            listener(path, data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def remove_file(path: Path) -> None:
    """Delete a file ribbit itself takes away (undo of a created file, an approved deletion)."""
    if ".git" in path.parts:
        raise ApplyError(f"refusing to remove {path}: it is inside .git/")
    for listener in list(_listeners):
        listener(path, None)
    path.unlink()
    fsync_dir(path.parent)


def atomic_symlink(path: Path, target: str) -> None:
    """Replace `path` with a symlink to `target`, atomically (used by undo for git symlinks)."""
    if ".git" in path.parts:
        raise ApplyError(f"refusing to write {path}: it is inside .git/")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.urandom(4).hex()}{TEMP_SUFFIX}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
