"""`ribbit tour` end to end, as a newcomer runs it: the real program in tmux, the shipped project and
recordings, the real sandbox, git journal and review mode. Each step's outcome is checked on disk: the
rejected fix never reaches the file, the approved one does, /undo takes it back, and review mode applies
only the hunk said yes to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import git
from tests.tui.test_tmux import ROOT, Tmux

BUGGY = "    return (fahrenheit - 32) * 9 / 5\n"
FIXED = "    return (fahrenheit - 32) * 5 / 9\n"


def key(tmux: Tmux, *keys: str, literal: bool = False) -> None:
    tmux("send-keys", "-t", "ribbit", *(["-l"] if literal else []), *keys)


def review_screen(tmux: Tmux, words: str, timeout: float = 60.0) -> str:
    """The diff review with the model's `words` on it (the words reach the transcript a moment earlier)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = tmux.screen()
        if words in screen and "y Approve" in screen:  # the review screen's own footer
            return screen
        time.sleep(0.1)
    raise AssertionError(f"no review screen with {words!r}; the screen was:\n{tmux.screen()}")


def test_the_tour_walks_through_reject_approve_undo_and_review(tmp_path: Path) -> None:
    scratch = tmp_path / "tour"
    module = scratch / "temperature.py"
    status_file = tmp_path / "exit-status"
    env = {
        "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
        "TERM": "xterm-256color", "PATH": os.environ.get("PATH", ""), "PYTHONFAULTHANDLER": "1",
        "HOME": os.environ.get("HOME", str(tmp_path)),
    }
    command = " ".join(
        [f"{k}={v!r}" for k, v in env.items()] + [sys.executable, "-m", "app.cli", "tour", "--dir", str(scratch)]
    ) + f"; echo $? > {status_file}"
    tmux = Tmux(f"ribbit-tour-{os.getpid()}")
    try:
        tmux("new-session", "-d", "-s", "ribbit", "-x", "110", "-y", "36", "-c", str(ROOT), "bash", "--norc")
        tmux("set-option", "-t", "ribbit", "remain-on-exit", "on")
        tmux("respawn-pane", "-k", "-t", "ribbit", "sh", "-c", command)

        tmux.wait_for("Run this command?")  # the tour's first call: the project's tests
        assert git(scratch, "log", "--format=%s").strip() == "the tour's starting point"
        key(tmux, "y")

        screen = review_screen(tmux, "Step 1, a rejection")  # said on the review screen itself
        assert "+     return (fahrenheit + 32) * 9 / 5" in screen
        key(tmux, "n")
        tmux.wait_for("Reason for the model")
        key(tmux, "the factor is upside down", literal=True)
        key(tmux, "Enter")

        review_screen(tmux, "Step 2, an approval")
        assert module.read_text().endswith(BUGGY)  # the rejected fix was never written
        key(tmux, "y")

        tmux.wait_for("Step 3, undo")
        screen = tmux.wait_for("done after 5 steps")  # the run is over: /undo is taken now
        assert "[scripted]" in screen and "replay:scripted-tour.jsonl" in screen
        assert module.read_text().endswith(FIXED)
        key(tmux, "/undo", literal=True)
        key(tmux, "Enter")
        tmux.wait_for("restored temperature.py")
        assert module.read_text().endswith(BUGGY)

        key(tmux, "C-c")
        tmux.wait_for("Press Ctrl+C again to quit")
        key(tmux, "C-c")

        tmux.wait_for("? Review NOTES.md")  # part 2: review mode, hunk by hunk on stdin
        assert module.read_text().endswith(BUGGY)  # nothing of the worktree reached the checkout yet
        key(tmux, "n", "Enter")
        tmux.wait_for("? Review temperature.py")
        key(tmux, "y", "Enter")
        assert tmux.exit_status(status_file) == 0
    finally:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], capture_output=True)

    assert module.read_text().endswith(FIXED) and not (scratch / "NOTES.md").exists()
    sessions = list((tmp_path / "state" / "ribbit" / "projects").glob("*/sessions/*/session.json"))
    assert len(sessions) == 1  # part 1's saved session: the reason reached the model as the call's result
    results = [m["content"] for m in json.loads(sessions[0].read_text())["epochs"][-1] if m["role"] == "tool"]
    assert any("rejected" in r and "Their reason: the factor is upside down" in r for r in results)
    assert any("FAILED" in r or "failures=1" in r for r in results)  # the command really ran the tests
