"""`!command`: the user's own command, run in the repository as the user would run it.

A command the user typed is not the model's: it runs with the user's environment and no sandbox (unless
`bang_sandbox = true` in sandbox.toml), no approval. Its output is shown to the user and handed to the
model with the next prompt, paged like a Bash result. What it changes is the user's: the journal records
it as someone else's change (Journal.record_user_step), so undo never takes it back. Esc stops it (the
whole process group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.sandbox.output_spool import Spool

# Journal step labels: the state before a `!command`, and what it changed (all of it the user's).
BEFORE_STEP = "before a command of the user's"
USER_STEP = "the user's command"
KEEP_BYTES = 256 * 1024  # of each end of the output: what is shown and paged, whatever the command prints
KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class UserCommandResult:
    command: str
    output: str
    exit_code: int | None  # None: stopped
    dropped_lines: int = 0
    cancelled: bool = False
    handed: str = ""  # what the model reads with the next prompt (the output paged by the budget)

    def status(self) -> str:
        if self.cancelled:
            return "stopped by the user"
        return "exit code 0" if self.exit_code == 0 else f"exit code {self.exit_code}"


class _Tail:
    """The first and the last KEEP_BYTES of a stream, and how many lines fell between them."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = KEEP_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        if len(self.tail) > KEEP_BYTES:
            cut = len(self.tail) - KEEP_BYTES
            self.dropped += self.tail[:cut].count(b"\n")
            del self.tail[:cut]

    def text(self) -> str:
        data = bytes(self.head) + bytes(self.tail)
        return data.decode("utf-8", "replace")


def run_user_command(command: str, root: Path, cancel: threading.Event, spool: Spool | None = None) -> UserCommandResult:
    """`bash -c command` in `root` with the user's environment, standard input empty, stdout and stderr
    together; `cancel` stops it (SIGTERM to its process group, SIGKILL after a grace). `spool`: where the
    whole output is also saved, for Read to page through when the result is cut."""
    shell = os.environ.get("SHELL", "") if os.path.basename(os.environ.get("SHELL", "")) in ("bash", "zsh") else ""
    proc = subprocess.Popen(
        [shell or "bash", "-c", command], cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    collected = _Tail()
    assert proc.stdout is not None

    def read() -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 65536):  # what has come, not a full buffer: an Esc never waits on it
            collected.feed(chunk)
            if spool is not None:
                spool.feed(chunk)

    reader = threading.Thread(target=read, name="ribbit-bang-output", daemon=True)
    reader.start()
    cancelled = False
    while True:
        try:
            proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            if cancel.is_set() and not cancelled:
                cancelled = True
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
    if cancelled:
        _signal_group(proc, signal.SIGKILL)  # what it left running in its group (a server it started)
    reader.join(timeout=KILL_GRACE_S)
    proc.stdout.close()
    return UserCommandResult(
        command=command, output=collected.text(), exit_code=None if cancelled else proc.returncode,
        dropped_lines=collected.dropped, cancelled=cancelled,
    )


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
