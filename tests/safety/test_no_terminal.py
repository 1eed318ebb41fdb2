"""The TUI without a terminal (a script, a cron job, an editor's task runner): issue 28 saw it draw escape
codes into the output file and spin a core for 20 minutes. Now it exits 2 at once with one line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.safety.cli import ROOT


def run_tui(repo: Path, out: Path, *, stdin_tty: bool, stdout_tty: bool) -> subprocess.CompletedProcess[bytes]:
    ends: list[int] = []

    def end(tty: bool, mode: int) -> int:
        if tty:
            master, slave = pty.openpty()
            ends.extend((master, slave))
            return slave
        fd = os.open(out if mode == os.O_WRONLY else os.devnull, mode | (os.O_CREAT if mode == os.O_WRONLY else 0))
        ends.append(fd)
        return fd

    stdin, stdout = end(stdin_tty, os.O_RDONLY), end(stdout_tty, os.O_WRONLY)
    try:
        # A hang fails here: the old TUI never returned.
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "--repo", str(repo), "--model", "embedded"],
            stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT, timeout=60,
        )
    finally:
        for fd in ends:
            os.close(fd)


@pytest.mark.parametrize(("stdin_tty", "stdout_tty"), [(False, False), (True, False), (False, True)])
def test_the_tui_without_a_terminal_exits_2_with_one_line(repo: Path, tmp_path: Path, stdin_tty: bool, stdout_tty: bool) -> None:
    out = tmp_path / "out.txt"
    proc = run_tui(repo, out, stdin_tty=stdin_tty, stdout_tty=stdout_tty)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "ribbit run" in err
    written = out.read_bytes() if out.exists() else b""
    assert b"\x1b" not in written and b"\x1b" not in proc.stderr
