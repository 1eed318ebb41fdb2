"""Which files the agent has read, and whether they changed since (the Write/Edit staleness rules)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from agent.core.tools.errors import ToolError
from agent.core.tools.files import FileStamp, file_sha256
from agent.core.tools.paths import resolve_in_root


class SavedRead(BaseModel):
    """A file the agent had read, as it was then (the session store keeps them): a resumed session may
    change it without reading it again only while it is still exactly that."""

    sha256: str
    mtime_ns: int
    size: int


def stamp_bytes(data: bytes, path: Path) -> FileStamp:
    st = path.stat()
    return FileStamp(hashlib.sha256(data).hexdigest(), st.st_mtime_ns, st.st_size)


class ReadState:
    """Thread-safe: the watcher thread marks files stale while the loop thread checks them."""

    def __init__(self) -> None:
        self._stamps: dict[Path, FileStamp] = {}
        self._stale: set[Path] = set()
        self._lock = threading.Lock()

    def record(self, path: Path, data: bytes) -> None:
        """The agent has seen (or itself written) exactly `data` at `path`."""
        stamp = stamp_bytes(data, path)
        with self._lock:
            self._stamps[path] = stamp
            self._stale.discard(path)

    def record_stamp(self, path: Path, stamp: FileStamp) -> None:
        """The agent has seen the file whose stamp this is (a Read that streamed it)."""
        with self._lock:
            self._stamps[path] = stamp
            self._stale.discard(path)

    def saved(self, root: Path) -> dict[str, SavedRead]:
        """What a saved session keeps: the files under `root` read and not changed by others since."""
        with self._lock:
            stamps = {path: stamp for path, stamp in self._stamps.items() if path not in self._stale}
        kept: dict[str, SavedRead] = {}
        for path, stamp in stamps.items():
            if path.is_relative_to(root):
                kept[path.relative_to(root).as_posix()] = SavedRead(sha256=stamp.sha256, mtime_ns=stamp.mtime_ns, size=stamp.size)
        return kept

    def adopt(self, root: Path, saved: dict[str, SavedRead]) -> None:
        """A resumed session's reads. Nothing is trusted: a path must stay inside `root` (a session file
        is input like any other), and check_writable compares each file on disk with its stamp, so a
        file changed since it was read must be read again."""
        for name, read in saved.items():
            if PurePosixPath(name).is_absolute():
                continue
            try:
                path = resolve_in_root(root, name)  # the key Write and Edit look up; refuses what escapes
            except ToolError:
                continue
            self.record_stamp(path, FileStamp(read.sha256, read.mtime_ns, read.size))

    def forget(self, path: Path) -> None:
        with self._lock:
            self._stamps.pop(path, None)
            self._stale.discard(path)

    def mark_stale(self, path: Path) -> bool:
        """Called when something outside the agent changed `path`; True if the agent had read it."""
        with self._lock:
            if path in self._stamps:
                self._stale.add(path)
                return True
            return False

    def check_writable(self, path: Path, display: str) -> None:
        """Raise unless an existing file was read and is unchanged since (hash, then mtime)."""
        if not path.exists():
            return
        with self._lock:
            stamp = self._stamps.get(path)
            stale = path in self._stale
        if stamp is None:
            raise ToolError(f"{display} has not been read in this session; Read it before changing it")
        st = path.stat()
        if not stale and st.st_mtime_ns == stamp.mtime_ns and st.st_size == stamp.size:
            return
        # Same size, new mtime: maybe only touched. Hash it (in chunks; a FIFO is refused).
        if stale or st.st_size != stamp.size or file_sha256(path, display) != stamp.sha256:
            raise ToolError(f"{display} was modified since read; Read it again before changing it")
