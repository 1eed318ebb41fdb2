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
    """A CommandRunner whose commands the watcher attributes to the agent."""

    def __init__(self, inner: CommandRunner, watcher: RepoWatcher) -> None:
        self.inner = inner
        self.watcher = watcher
        self.name = inner.name
        self.sandboxed = inner.sandboxed

    def run(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access = "read-write",
        spool: Spool | None = None,
    ) -> CommandResult:
        with self.watcher.agent_running():
            if spool is None:
                return self.inner.run(command, cwd, timeout, cancel, access=access)
            return self.inner.run(command, cwd, timeout, cancel, access=access, spool=spool)

    def close(self) -> None:
        self.inner.close()
