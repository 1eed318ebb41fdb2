"""`ribbit run` as a real subprocess, for the attacks whose outcome is an exit code, a signal, a
memory cap or the exact bytes that reached the user's terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import resource
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# What must never reach a terminal raw: C0 controls but tab and newline, DEL, and (UTF-8 encoded)
# C1 controls, bidi overrides/isolates and line/paragraph separators.
RAW_CONTROLS = re.compile(
    rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]"
)


@dataclass
class CliRun:
    code: int
    stdout: bytes
    stderr: bytes
    transcript: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every transcript line parsed as JSON (a line that is not JSON fails the test here)."""
        if not self.transcript.exists():
            return []
        return [json.loads(line) for line in self.transcript.read_text(encoding="utf-8").splitlines()]

    def tool_results(self) -> list[str]:
        return [e["message"]["content"] for e in self.events if e["type"] == "message" and e["message"]["role"] == "tool"]

    def user_notes(self) -> list[str]:
        return [
            e["message"]["content"] for e in self.events
            if e["type"] == "message" and e["message"]["role"] == "user"
        ][1:]  # after the task itself: what the loop told the model (malformed calls)

    def summary(self) -> dict[str, Any]:
        last = self.events[-1]
        assert last["type"] == "summary", last
        return last

    def assert_clean_exit(self, code: int = 0) -> None:
        """The contract's exit code, no traceback, a summary as the transcript's last line."""
        assert b"Traceback" not in self.stderr, self.err[-3000:]
        assert self.code == code, (self.code, self.err[-3000:])
        self.summary()


def write_replay(path: Path, *turns: str) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns), encoding="utf-8")
    return path


def _command(repo: Path, replay: Path, transcript: Path, args: tuple[str, ...], task: str) -> list[str]:
    return [
        sys.executable, "-m", "app.cli", "run", task, "--repo", str(repo), "--model", f"replay:{replay}",
        "--transcript", str(transcript), *args,
    ]


def _cap_memory(limit: int | None) -> Callable[[], None] | None:
    if limit is None:
        return None

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def ribbit_cli(
    tmp: Path, repo: Path, replay: Path, *args: str, stdin: bytes = b"", task: str = "do it",
    timeout: float = 240, memory_cap: int | None = None,
) -> CliRun:
    """Run `ribbit run` to its end (a hang fails the test at `timeout`)."""
    transcript = tmp / f"transcript-{time.monotonic_ns()}.jsonl"
    proc = subprocess.run(
        _command(repo, replay, transcript, args, task), input=stdin, capture_output=True, timeout=timeout,
        cwd=ROOT, preexec_fn=_cap_memory(memory_cap),
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr, transcript)


def ribbit_cli_on_tty(tmp: Path, repo: Path, replay: Path, *args: str, stdin: bytes = b"", timeout: float = 240) -> CliRun:
    """Like ribbit_cli, with standard output on a pseudo-terminal: what a user's screen receives."""
    transcript = tmp / f"transcript-{time.monotonic_ns()}.jsonl"
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n": the bytes seen are the bytes ribbit wrote
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    screen = bytearray()

    def read_screen() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=read_screen, daemon=True)
    reader.start()
    proc = subprocess.Popen(
        _command(repo, replay, transcript, args, "do it"), stdin=subprocess.PIPE, stdout=slave,
        stderr=subprocess.PIPE, cwd=ROOT,
    )
    os.close(slave)
    try:
        _, err = proc.communicate(stdin, timeout=timeout)
    finally:
        reader.join(timeout=10)
        os.close(master)
    return CliRun(proc.returncode, bytes(screen), err, transcript)


def ribbit_cli_interrupted(
    tmp: Path, repo: Path, replay: Path, ready: Callable[[], bool], *args: str, signals: int = 1, timeout: float = 120,
) -> CliRun:
    """Start `ribbit run`, wait until `ready()`, send SIGINT (`signals` times), collect the outcome."""
    transcript = tmp / f"transcript-{time.monotonic_ns()}.jsonl"
    proc = subprocess.Popen(
        _command(repo, replay, transcript, args, "do it"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=ROOT,
    )
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError("ribbit ended or stalled before the moment to interrupt it:\n" + err.decode(errors="replace"))
        time.sleep(0.05)
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=timeout)
    return CliRun(proc.returncode, out, err, transcript)
