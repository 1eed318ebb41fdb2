"""What a writable sandboxed command costs as a session runs it: bubblewrap with the command overlay,
through the session's WatchedRunner and a real watcher (the settle before it, the watcher asked of a file
the command made or removed, and the step snapshot's question whether anything ignored changed). Medians of `--rounds` runs of: `true`, a command
making a new file, a command appending to a tracked file.

    python -m bench.watched_command [--rounds 30]

To compare with another checkout, run it with that checkout first on PYTHONPATH (from a folder outside
both), alternating, and take the ratio of medians. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

COMMANDS = (("true", "true"), ("new file", "echo x > new_{n}.txt"), ("edit", "echo y >> calc.py"))


def scratch_repository() -> Path:
    base = Path(tempfile.mkdtemp(prefix="ribbit-watched-"))
    os.environ["XDG_STATE_HOME"] = str(base / "state")  # the overlays' folder, on the repository's disk
    repo = base / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "calc.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], check=True)
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.watched_command", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    rounds = parser.parse_args().rounds
    repo = scratch_repository()
    from agent.sandbox.runner import BwrapRunner
    from agent.session.watched_runner import WatchedRunner
    from agent.undo.watcher import RepoWatcher

    watcher = RepoWatcher(repo, lambda change: None)
    watcher.start()
    inner = BwrapRunner(repo)
    inner.write_observer = watcher
    runner = WatchedRunner(inner, watcher)
    try:
        for name, command in COMMANDS:
            times = []
            for n in range(rounds):
                started = time.perf_counter()
                runner.run(command.format(n=n), repo, 30, threading.Event())
                watcher.ignored_quiet()  # what the step's snapshot asks next (it waits for ribbit's writes' events)
                times.append(time.perf_counter() - started)
            print(f"{name}: median {statistics.median(times) * 1000:.1f} ms over {rounds}", flush=True)
    finally:
        runner.close()
        watcher.stop()


if __name__ == "__main__":
    main()
