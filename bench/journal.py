"""Undo-journal cost per step: a snapshot after one edited file, after nothing changed, after ten
files changed, and an /undo; on a fresh git repository of N files. Prints figures; asserts nothing.

    python -m bench.journal [--files 300] [--steps 30] [--venv-mb 200] [--node-modules-mb 300] [--ignored-files N]

`--venv-mb` / `--node-modules-mb` add git-ignored folders of that size shaped like a Python virtual
environment (`.venv`, ~25 KiB a file) and a `node_modules` (~10 KiB a file), the places users keep what
the journal must not read every step. `--ignored-files N` adds N small ignored files (`build/`, 8 KiB
each; `--ignored-scattered`: `*.o` files beside the sources) that the journal records when they fit its
budget: what that budget costs at start and per step. Only `Journal(root)`, `.snapshot(label)` and `.undo_last()` are
used, so the same script times an older checkout too (run it from that checkout) for before/after ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent.undo.journal import Journal
from bench.harness import make_repo


SETTLE: list[Callable[[], object]] = []  # run before each timed snapshot, untimed (the watcher's sync)


def timed(action: Callable[[], object]) -> float:
    for settle in SETTLE:
        settle()
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def figures(name: str, samples: list[float]) -> str:
    samples = sorted(samples)
    return f"{name}: median {statistics.median(samples):.1f} ms, p90 {samples[int(len(samples) * 0.9)]:.1f} ms"


def fill(folder: Path, megabytes: int, file_kib: int, per_dir: int = 40, files: int | None = None) -> int:
    """Files of pseudo-random text under `folder` (`megabytes` of them, or `files` of them), `per_dir` a
    folder, three levels deep; their count."""
    count = total = 0
    block = os.urandom(file_kib * 768).hex().encode()[: file_kib * 1024]
    while (count < files) if files is not None else (total < megabytes << 20):
        sub = folder / f"pkg{count // (per_dir * 20)}" / f"mod{count // per_dir % 20}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{count}.py").write_bytes(block[count % 97:] + b"%d\n" % count)
        total += len(block)
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--venv-mb", type=int, default=0, help="size of an ignored .venv")
    parser.add_argument("--node-modules-mb", type=int, default=0, help="size of an ignored node_modules")
    parser.add_argument("--no-watcher", action="store_true",
                        help="no file watcher: the journal lists ignored paths at every snapshot (sessions without one)")
    parser.add_argument("--ignored-files", type=int, default=0, help="small ignored files in build/")
    parser.add_argument("--ignored-kib", type=int, default=8, help="size of each of them")
    parser.add_argument(
        "--ignored-scattered", action="store_true",
        help="put the small ignored files beside the sources (`*.o`, as a C build leaves them) instead of in build/",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ribbit-bench-journal-"))
    os.environ.setdefault("XDG_STATE_HOME", str(work / "state"))
    repo = work / "repo"
    repo.mkdir()
    make_repo(repo, args.files)
    ignored = []
    if args.venv_mb:
        n = fill(repo / ".venv" / "lib" / "python3.11" / "site-packages", args.venv_mb, 25)
        (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        ignored.append(f".venv ({args.venv_mb} MB, {n} files)")
    if args.node_modules_mb:
        n = fill(repo / "node_modules", args.node_modules_mb, 10)
        ignored.append(f"node_modules ({args.node_modules_mb} MB, {n} files)")
    if args.ignored_files and args.ignored_scattered:
        block = os.urandom(args.ignored_kib * 512).hex().encode()
        for i in range(args.ignored_files):
            (repo / f"pkg{i % 10}" / f"obj{i}.o").write_bytes(block + b"%d" % i)
        ignored.append(f"*.o beside the sources ({args.ignored_files} files of {args.ignored_kib} KiB)")
    elif args.ignored_files:
        n = fill(repo / "build", 0, args.ignored_kib, files=args.ignored_files)
        ignored.append(f"build ({n} files of {args.ignored_kib} KiB)")
    if ignored:
        (repo / ".gitignore").write_text(".venv/\nnode_modules/\nbuild/\n*.o\n")
    journal = Journal(repo)
    watcher = None
    if not args.no_watcher:
        # As a session runs it: a file watcher on the repository, whose step waits for its command's events
        # and sorts them before the snapshot (WatchedRunner, take_since_snapshot) — here outside the
        # timing; where the journal takes the watcher's word that no ignored path changed, it is given it.
        from agent.undo.watcher import RepoWatcher

        watcher = RepoWatcher(repo, lambda change: None, is_ignored=journal.ignored)
        watcher.start()
        if hasattr(journal, "use_ignored_hint"):
            watcher.is_unrecorded = journal.left_outside
            journal.use_ignored_hint(watcher.ignored_quiet)
        SETTLE.append(lambda: (watcher.sync(), watcher.take_since_snapshot()))
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
    print(f"{args.files} files{', ignored ' + ', '.join(ignored) if ignored else ''}, {args.steps} steps; "
          f"start snapshot {start:.0f} ms; watcher: {watcher.method if watcher else 'none'}")
    for name, samples in (("one file edited", one), ("nothing changed", none), ("ten files changed", ten), ("undo of ten", undo)):
        print(figures(name, samples))
    if watcher is not None:
        watcher.stop()


if __name__ == "__main__":
    main()
