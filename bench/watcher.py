"""`python -m bench.watcher`: the watcher's event-to-note latency and its idle CPU, in figures.

Builds a temporary git repository (files in many folders, an ignored build folder), starts the
same RepoWatcher a session uses (with git's ignore rules), then:
- latency: writes one file from "outside" and times until the change callback (the note) fires;
- idle CPU: process CPU time over a quiet interval, with inotify and with the polling fallback.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from agent.undo.journal import Journal
from agent.undo.watcher import DEBOUNCE_S, ExternalChange, RepoWatcher


def make_tree(root: Path, folders: int, files_per_folder: int) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("build/\n")
    for i in range(folders):
        folder = root / f"pkg{i:03d}"
        folder.mkdir()
        for j in range(files_per_folder):
            (folder / f"mod{j}.py").write_text(f"x = {i * j}\n")
    (root / "build").mkdir()
    for j in range(200):
        (root / "build" / f"obj{j}.o").write_bytes(b"\0" * 64)


def measure_latency(watcher_root: Path, trials: int, polling: bool) -> tuple[list[float], str]:
    journal = Journal(watcher_root)
    fired = threading.Event()
    seen: list[ExternalChange] = []

    def on_change(change: ExternalChange) -> None:
        seen.append(change)
        fired.set()

    watcher = RepoWatcher(watcher_root, on_change, is_ignored=journal.ignored, force_polling=polling)
    message = watcher.start()
    latencies: list[float] = []
    try:
        time.sleep(0.5)  # let the observer settle
        for n in range(trials):
            fired.clear()
            target = watcher_root / f"pkg{n % 10:03d}" / "mod0.py"
            started = time.perf_counter()
            target.write_text(f"changed = {n}\n")
            if not fired.wait(15):
                raise SystemExit(f"no change reported for {target} within 15 s")
            latencies.append(time.perf_counter() - started)
            watcher.wait_idle()
            # Ignored files must not fire: write one and check nothing arrives within a debounce.
            (watcher_root / "build" / "obj0.o").write_bytes(bytes([n % 256]) * 64)
        fired.clear()
        time.sleep(DEBOUNCE_S * 4 + (2.5 if polling else 0))
        if fired.is_set():
            raise SystemExit("an ignored file produced a note")
    finally:
        watcher.stop()
    return latencies, message


def measure_idle_cpu(watcher_root: Path, seconds: float, polling: bool) -> float:
    watcher = RepoWatcher(watcher_root, lambda change: None, is_ignored=Journal(watcher_root).ignored, force_polling=polling)
    watcher.start()
    try:
        time.sleep(1.0)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        cpu1, wall1 = time.process_time(), time.perf_counter()
    finally:
        watcher.stop()
    return 100.0 * (cpu1 - cpu0) / (wall1 - wall0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.watcher", description=__doc__)
    parser.add_argument("--folders", type=int, default=300)
    parser.add_argument("--files", type=int, default=10, help="files per folder")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ribbit-bench-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        make_tree(root, args.folders, args.files)
        print(f"tree: {args.folders} folders x {args.files} files, plus 200 ignored files in build/")
        baseline_cpu0, baseline_wall0 = time.process_time(), time.perf_counter()
        time.sleep(1.0)
        baseline = 100.0 * (time.process_time() - baseline_cpu0) / (time.perf_counter() - baseline_wall0)
        for polling in (False, True):
            label = "polling" if polling else "inotify"
            latencies, message = measure_latency(root, args.trials if not polling else max(5, args.trials // 4), polling)
            ms = sorted(x * 1000 for x in latencies)
            p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
            print(f"[{label}] {message}")
            print(
                f"[{label}] event-to-note latency over {len(ms)} changes: median {statistics.median(ms):.0f} ms, "
                f"p95 {p95:.0f} ms, max {ms[-1]:.0f} ms (debounce {DEBOUNCE_S * 1000:.0f} ms included)"
            )
            idle = measure_idle_cpu(root, args.idle, polling)
            print(f"[{label}] idle CPU over {args.idle:g} s: {idle:.2f}% of one core (process baseline {baseline:.2f}%)")


if __name__ == "__main__":
    main()
