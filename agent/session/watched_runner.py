"""The Bash runner the session hands the loop: the sandbox's runner, with the watcher told when a command
runs (undo and sandbox know nothing of each other; the session puts them together)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agent.sandbox.runner import Access, CommandResult, CommandRunner
from agent.undo.watcher import RepoWatcher

if TYPE_CHECKING:
    from agent.sandbox.output_spool import Spool


class WatchedRunner:
    """A CommandRunner whose commands' changes the watcher attributes.

    A command whose writes are kept apart (agent.sandbox.overlay) changes the checkout only through ribbit's
    own writes afterwards, each one recognised by its content: while it runs, every change the watcher sees
    is someone else's (and the overlay asks the watcher of a file gone meanwhile). Any other writable command
    (no sandbox, no overlay on this system): what changes while it runs is uncertain, the command's or
    anyone's, for nothing can tell the two apart; undo names such files and leaves them."""

    def __init__(self, inner: CommandRunner, watcher: RepoWatcher) -> None:
        self.inner = inner
        self.watcher = watcher
        self.name = inner.name
        self.sandboxed = inner.sandboxed

    def run(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access = "read-write",
        spool: Spool | None = None,
    ) -> CommandResult:
        isolates = getattr(self.inner, "isolates_writes", None)
        if access == "read-only" or (isolates is not None and isolates(access)):
            self.watcher.settle()  # what happened before is judged now, while the files are as it left them
            return self._run(command, cwd, timeout, cancel, access, spool)
        with self.watcher.agent_running():
            return self._run(command, cwd, timeout, cancel, access, spool)

    def _run(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access, spool: Spool | None,
    ) -> CommandResult:
        if spool is None:
            return self.inner.run(command, cwd, timeout, cancel, access=access)
        return self.inner.run(command, cwd, timeout, cancel, access=access, spool=spool)

    def close(self) -> None:
        self.inner.close()
