"""`python -m bench.suite_times`: how long the quick tier and the whole test suite take here, in figures.

Runs, one after the other from the checkout's root, the quick tier (`pytest -m quick -n 3`,
tests/tiers.py) and the whole suite as the README runs it (`python -m tests.suite`: the shared tests on three
workers, then the llama.cpp ones alone), and prints each one's wall time, CPU time and test count
(docs/testing.md keeps the figures). Both run in this interpreter; nothing else should be running.

    python -m bench.suite_times [--quick-only] [--runs N] [-- EXTRA PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What `python -m` runs for each, as docs/testing.md and the README run them.
TIERS = {"quick tier": ["pytest", "-m", "quick", "-n", "3"], "whole suite": ["tests.suite", "--durations=20"]}
SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b")
SUMMARY_LINE = re.compile(r"^=*\s*\d+ \w+.* in [\d.]+s")  # pytest's last line: "1272 passed, 3 xfailed in 272.71s"


def run_tier(args: list[str]) -> tuple[float, float, dict[str, int], int]:
    """(wall s, CPU s of pytest and its children, counts from pytest's summary line, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *args[:1], "-q", "-p", "no:cacheprovider", *args[1:]], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():  # pytest's summary lines (tests.suite prints two), summed
        if SUMMARY_LINE.match(line):
            for n, kind in SUMMARY.findall(line):
                counts[kind] = counts.get(kind, 0) + int(n)
    for line in done.stdout.splitlines():  # what failed, named (the rest of pytest's output is not kept)
        if line.startswith(("FAILED ", "ERROR ")):
            print(f"  {line}", flush=True)
    return wall, cpu, counts, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite_times", description=__doc__.splitlines()[0])
    parser.add_argument("--quick-only", action="store_true", help="time the quick tier only")
    parser.add_argument("--runs", type=int, default=1, help="runs of each, alternated (default 1)")
    parser.add_argument("extra", nargs="*", help="more pytest arguments for both (after --)")
    args = parser.parse_args(argv)
    tiers = {k: v for k, v in TIERS.items() if not (args.quick_only and k != "quick tier")}
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    worst = 0
    for run in range(args.runs):
        for name, selection in tiers.items():
            wall, cpu, counts, code = run_tier([*selection, *args.extra])
            tests = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "no summary line"
            print(f"{name}: {wall:.0f} s wall ({wall / 60:.1f} min), {cpu:.0f} s CPU; {tests}; exit {code}"
                  + (f" (run {run + 1})" if args.runs > 1 else ""), flush=True)
            worst = max(worst, code)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
