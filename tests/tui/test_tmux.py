"""The real program in a real terminal: `python -m app.cli` inside tmux, driven by send-keys.

One edit is approved and one rejected (with a reason); then Ctrl+C twice quits, and the files on
disk must say exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import xml_call

ROOT = Path(__file__).resolve().parents[2]
assert shutil.which("tmux"), "tmux is required for this test"


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True
        ).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "ribbit")

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the screen was:\n{self.screen()}")

    def exit_status(self, status_file: Path, timeout: float = 30.0) -> int:
        """The program's exit code, which the pane's shell writes to `status_file` when it ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if status_file.exists() and status_file.read_text().strip():
                return int(status_file.read_text())
            time.sleep(0.1)
        # Ask the stuck process where it is (PYTHONFAULTHANDLER prints every thread's stack).
        shell = self("display-message", "-p", "-t", "ribbit", "#{pane_pid}").strip()
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True).stdout.split()
        for pid in children:  # the python process this test started, by its id
            os.kill(int(pid), signal.SIGABRT)
        time.sleep(1)
        history = self("capture-pane", "-p", "-S", "-200", "-t", "ribbit")
        raise AssertionError(f"ribbit did not exit; the screen was:\n{history}")


def test_real_program_in_tmux_approves_one_edit_and_rejects_another(repo: Path, replay_file, tmp_path: Path) -> None:
    replay = replay_file(
        xml_call("Read", file_path="calc.py"),
        "Fixing add.\n" + xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Adding notes.\n" + xml_call("Write", file_path="NOTES.md", content="# notes\n"),
        "All done.",
    )
    tmux = Tmux(f"ribbit-test-{os.getpid()}")
    status_file = tmp_path / "exit-status"
    env = {
        "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT), "TERM": "xterm-256color",
        "PATH": os.environ.get("PATH", ""), "PYTHONFAULTHANDLER": "1", "HOME": os.environ.get("HOME", str(tmp_path)),
    }
    command = " ".join(
        [f"{k}={v!r}" for k, v in env.items()]
        + [sys.executable, "-m", "app.cli", "--repo", str(repo), "--model", f"replay:{replay}", "--no-sandbox"]
    ) + f"; echo $? > {status_file}"
    try:
        tmux("new-session", "-d", "-s", "ribbit", "-x", "120", "-y", "40", "-c", str(ROOT), "bash", "--norc")
        tmux("set-option", "-t", "ribbit", "remain-on-exit", "on")
        tmux("respawn-pane", "-k", "-t", "ribbit", "sh", "-c", command)
        tmux.wait_for("replay:replay.jsonl")  # the status bar shows the model once the session is open
        tmux("send-keys", "-t", "ribbit", "-l", "fix add and write notes")
        tmux("send-keys", "-t", "ribbit", "Enter")

        screen = tmux.wait_for("Edit calc.py")
        assert "+     return a + b" in screen
        tmux("send-keys", "-t", "ribbit", "y")

        screen = tmux.wait_for("Write NOTES.md")
        assert "(new file)" in screen
        tmux("send-keys", "-t", "ribbit", "n")
        tmux.wait_for("Reason for the model")
        tmux("send-keys", "-t", "ribbit", "-l", "no notes please")
        tmux("send-keys", "-t", "ribbit", "Enter")

        screen = tmux.wait_for("done after 4 steps")
        assert "All done." in screen
        tmux("send-keys", "-t", "ribbit", "C-c")
        tmux.wait_for("Press Ctrl+C again to quit")
        tmux("send-keys", "-t", "ribbit", "C-c")
        assert tmux.exit_status(status_file) == 0
    finally:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], capture_output=True)

    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert not (repo / "NOTES.md").exists()
    leftovers = [p.name for p in repo.iterdir() if p.name.endswith(".ribbit-tmp")]
    assert leftovers == []


def test_ribbit_c_in_tmux_reopens_the_last_session(repo: Path, replay_file, tmp_path: Path) -> None:
    """`ribbit -c` in a new process: the last session's conversation is back on screen, the model goes on
    from its saved position (nothing read again), and the new work joins the same saved session."""
    replay = replay_file(
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Fixed add.",
        xml_call("Write", file_path="NOTES.md", content="# notes\n"),
        "Notes written.",
    )
    tmux = Tmux(f"ribbit-test-c-{os.getpid()}")
    env = {
        "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
        "TERM": "xterm-256color", "PATH": os.environ.get("PATH", ""), "PYTHONFAULTHANDLER": "1",
        "HOME": os.environ.get("HOME", str(tmp_path)),
    }

    def start(*extra: str, status_file: Path) -> None:
        command = " ".join(
            [f"{k}={v!r}" for k, v in env.items()]
            + [sys.executable, "-m", "app.cli", "--repo", str(repo), "--model", f"replay:{replay}", "--no-sandbox",
               "--mode", "auto-edit", *extra]
        ) + f"; echo $? > {status_file}"
        tmux("respawn-pane", "-k", "-t", "ribbit", "sh", "-c", command)

    def quit_(status_file: Path) -> None:
        tmux("send-keys", "-t", "ribbit", "C-c")
        tmux.wait_for("Press Ctrl+C again to quit")
        tmux("send-keys", "-t", "ribbit", "C-c")
        assert tmux.exit_status(status_file) == 0

    try:
        tmux("new-session", "-d", "-s", "ribbit", "-x", "120", "-y", "40", "-c", str(ROOT), "bash", "--norc")
        tmux("set-option", "-t", "ribbit", "remain-on-exit", "on")
        start(status_file=tmp_path / "first")
        tmux.wait_for("replay:replay.jsonl")
        tmux("send-keys", "-t", "ribbit", "-l", "fix add please")
        tmux("send-keys", "-t", "ribbit", "Enter")
        tmux.wait_for("done after 3 steps")
        quit_(tmp_path / "first")

        start("-c", status_file=tmp_path / "second")
        screen = tmux.wait_for("Fixed add.")  # the old conversation, shown again
        assert "fix add please" in screen and "nothing is read again" in screen
        tmux("send-keys", "-t", "ribbit", "-l", "now write notes")
        tmux("send-keys", "-t", "ribbit", "Enter")
        tmux.wait_for("done after 2 steps · files changed: NOTES.md")
        quit_(tmp_path / "second")
    finally:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], capture_output=True)

    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (repo / "NOTES.md").read_text() == "# notes\n"
    state = tmp_path / "state" / "ribbit" / "projects"
    sessions = [p for p in state.glob("*/sessions/*") if p.is_dir()]
    assert len(sessions) == 1  # one session, continued
    saved = json.loads((sessions[0] / "session.json").read_text())
    assert [t["prompt"] for t in saved["tasks"]] == ["fix add please", "now write notes"]
