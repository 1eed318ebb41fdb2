"""Undo-journal cost per step: a snapshot after one edited file, after nothing changed, after ten
files changed, and an /undo; on a fresh git repository of N files. Prints figures; asserts nothing.

    python -m bench.journal [--files 300] [--steps 30]

Only `Journal(root)`, `.snapshot(label)` and `.undo_last()` are used, so the same script times an
older checkout too (run it from that checkout) for before/after ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent.checkout.journal import Journal
from bench.harness import make_repo


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def figures(name: str, samples: list[float]) -> str:
    samples = sorted(samples)
    return f"{name}: median {statistics.median(samples):.1f} ms, p90 {samples[int(len(samples) * 0.9)]:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ribbit-bench-journal-"))
    os.environ.setdefault("XDG_STATE_HOME", str(work / "state"))
    repo = work / "repo"
    repo.mkdir()
    make_repo(repo, args.files)
    journal = Journal(repo)
    start = timed(lambda: journal.snapshot("start"))
    one, none, ten, undo = [], [], [], []
    for step in range(args.steps):
        (repo / "pkg1" / "mod1.py").write_text(f"x = {step}\n")
        one.append(timed(lambda: journal.snapshot(f"edit {step}")))
        none.append(timed(lambda: journal.snapshot(f"nothing {step}")))
        for i in range(10):
            (repo / f"pkg{i}" / f"mod{i + 10}.py").write_text(f"y = {step}\n")
        ten.append(timed(lambda: journal.snapshot(f"ten {step}")))
        undo.append(timed(journal.undo_last))
    print(f"{args.files} files, {args.steps} steps; start snapshot {start:.0f} ms")
    for name, samples in (("one file edited", one), ("nothing changed", none), ("ten files changed", ten), ("undo of ten", undo)):
        print(figures(name, samples))


if __name__ == "__main__":
    main()
