"""One writer per repository: the session that changes a checkout holds an flock on a file in the
repository's state folder (agent.paths.project_state of the git work tree's top) for as long as it lives.

A second session in the same repository (TUI, `ribbit run`, another terminal) is told at its start who
holds it; its Write, Edit, writable commands and undo are refused while the other one holds it (commands
run read-only instead, where a sandbox can make them so), and it takes the lock itself at its next write
once the other has ended. Plan mode changes nothing and never takes it. The kernel drops an flock when
its process exits or crashes: nothing stale is ever left to clean up.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import weakref
from pathlib import Path

from agent.paths import project_state

LOCK_NAME = "writer.lock"
HOLDER_MAX_BYTES = 4096


class CheckoutLock:
    def __init__(self, top: Path, what: str = "a ribbit session") -> None:
        self.top = top
        self.what = what
        self.path = project_state(top) / LOCK_NAME
        self._fd: int | None = None
        self._close: weakref.finalize | None = None  # type: ignore[type-arg]

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_take(self) -> str | None:
        """None when this session holds the checkout (now or already); else one line saying who does."""
        if self._fd is not None:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            # No state folder to lock in: nothing can be coordinated, and refusing every write would
            # punish the user for it (check_state refuses such a folder before any session starts).
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            return busy_line(holder)
        record = json.dumps({"pid": os.getpid(), "since": time.time(), "what": self.what}).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        except OSError:
            pass  # a full disk: the lock holds all the same; a second session just cannot say whose it is
        self._fd = fd
        self._close = weakref.finalize(self, os.close, fd)  # also when a session that failed to start is dropped
        return None

    def release(self) -> None:
        if self._close is not None:
            self._close()  # closing the last descriptor drops the flock
            self._fd = self._close = None


def _holder(fd: int) -> dict[str, object]:
    try:
        data = os.pread(fd, HOLDER_MAX_BYTES, 0)
        found = json.loads(data.decode("utf-8")) if data else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def busy_line(holder: dict[str, object]) -> str:
    """Who holds the checkout, for the user and the model."""
    pid, since, what = holder.get("pid"), holder.get("since"), holder.get("what")
    who = str(what) if isinstance(what, str) and what.isprintable() and len(what) < 80 else "a ribbit session"
    details = []
    if isinstance(pid, int):
        details.append(f"pid {pid}")
    if isinstance(since, (int, float)):
        details.append("since " + time.strftime("%H:%M", time.localtime(since)))
    where = f" ({', '.join(details)})" if details else ""
    return (
        f"another ribbit session{where} is changing this repository ({who}): this one may not write to it until "
        "that one ends (one writer per repository; plan mode may share)"
    )
