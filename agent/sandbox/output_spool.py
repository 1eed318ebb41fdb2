"""Where a Bash command's whole output is kept when its result had to be cut, for Read to page through.

Not in the repository (it would be litter in the user's tree, in `git status` and in the undo journal,
and a later command could rewrite it under the model's feet) and not in `.git`: in ribbit's own state
folder, `$XDG_STATE_HOME/ribbit/outputs/<session>/`, which every sandboxed command sees as an empty
folder (agent.sandbox.runner hides ribbit's state). Folders are 0700, files 0600, created with O_EXCL and
O_NOFOLLOW by ribbit alone. Read reads these files, and only these, outside the repository: a path
is accepted when it resolves to a regular file directly in this session's folder with a name ribbit
gave (`bash-N.txt`).

Bounded: one file keeps at most MAX_FILE_BYTES of a command's output, a session at most
MAX_SESSION_BYTES (the oldest files go first), and folders of sessions older than KEEP_DAYS are removed
when a new session opens its own.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import threading
import time
from pathlib import Path

from agent.fs import CREATE_FLAGS

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_SESSION_BYTES = 256 * 1024 * 1024
KEEP_DAYS = 3
_NAME = re.compile(r"bash-[0-9]{1,9}\.txt")


def outputs_home() -> Path:
    from agent.paths import state_home

    return state_home() / "outputs"


class Spool:
    """One command's output as it streams, written to its file up to MAX_FILE_BYTES; counts lines."""

    def __init__(self, store: SavedOutputs, path: Path) -> None:
        self.store = store
        self.path = path
        self._fd: int | None = None
        self.size = 0  # bytes of output seen (written or not)
        self.written = 0
        self.newlines = 0
        self.last_byte = b""

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.size += len(chunk)
        self.newlines += chunk.count(b"\n")
        self.last_byte = chunk[-1:]
        room = MAX_FILE_BYTES - self.written
        if room <= 0:
            return
        try:
            if self._fd is None:
                self._fd = self.store.create(self.path)
            data = chunk[:room]
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self.written += len(data)
        except OSError:
            self.written = MAX_FILE_BYTES  # disk full, folder gone: stop saving, the result says less
            self.close()

    @property
    def lines(self) -> int:
        return self.newlines + (1 if self.size and self.last_byte != b"\n" else 0)

    @property
    def complete(self) -> bool:
        return self.written == self.size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def keep(self) -> bool:
        """Keep the file (the result was cut); False when nothing could be saved."""
        self.close()
        if self.written == 0:
            return False
        self.store.kept(self.path, self.written)
        return True

    def discard(self) -> None:
        self.close()
        if self.written:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class SavedOutputs:
    """This session's folder of saved outputs (made on first use)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or outputs_home()
        self.folder: Path | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._kept: list[tuple[Path, int]] = []

    def new_spool(self) -> Spool:
        with self._lock:
            self._count += 1
            number = self._count
        return Spool(self, self._ensure_folder() / f"bash-{number}.txt")

    def _ensure_folder(self) -> Path:
        with self._lock:
            if self.folder is None:
                self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
                _prune(self.home)
                from agent.paths import new_session_id

                folder = self.home / new_session_id()
                folder.mkdir(mode=0o700)
                self.folder = folder.resolve()
            return self.folder

    def create(self, path: Path) -> int:
        return os.open(path, CREATE_FLAGS, 0o600)

    def kept(self, path: Path, size: int) -> None:
        with self._lock:
            self._kept.append((path, size))
            total = sum(s for _, s in self._kept)
            while total > MAX_SESSION_BYTES and len(self._kept) > 1:
                old, old_size = self._kept.pop(0)
                total -= old_size
                try:
                    os.unlink(old)
                except OSError:
                    pass

    def owns(self, file_path: str) -> Path | None:
        """The saved file `file_path` names, if it is one of this session's (else None)."""
        if self.folder is None or "\x00" in file_path:
            return None
        candidate = Path(file_path)
        if not candidate.is_absolute() or candidate.parent != self.folder or not _NAME.fullmatch(candidate.name):
            return None
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            return candidate  # dropped under the session's cap: Read says it does not exist
        except OSError:
            return None
        return candidate if stat.S_ISREG(info.st_mode) else None

    def close(self) -> None:
        """Remove this session's folder (the outputs are only for the model, during the session)."""
        with self._lock:
            folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _prune(home: Path) -> None:
    """Folders of sessions that ended (or died) more than KEEP_DAYS ago."""
    limit = time.time() - KEEP_DAYS * 86400
    try:
        entries = list(os.scandir(home))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < limit:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue
