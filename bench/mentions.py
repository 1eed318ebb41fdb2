"""`@` completion on a large repository: the file list built once, then matched per keystroke.

Builds a git repository of N files (half committed, half untracked, plus ignored ones that must not
appear) in a temporary folder, times `FileIndex.refresh()` (git ls-files -co --exclude-standard) and
then each keystroke of a few queries typed one character at a time, as the prompt asks: a path typed
from its start, a file name, a fuzzy abbreviation, a query that matches nothing. Prints milliseconds.

    python -m bench.mentions [--files 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agent.git import find_repository
from agent.session.mentions import FileIndex

QUERIES = ("src/pkg_017/module_0042.py", "module_0042", "s17m42", "zzqqxx")


def build(root: Path, files: int) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("build/\n")
    for n in range(files):
        folder = root / "src" / f"pkg_{n // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"module_{n % 500:04d}.py").write_text("")
    (root / "build").mkdir()
    for n in range(1000):
        (root / "build" / f"out_{n}.o").write_text("")
    half = [str(p.relative_to(root)) for p in sorted((root / "src").glob("pkg_0[0-4]*/*.py"))]
    subprocess.run(["git", "-C", str(root), "add", "--", ".gitignore", *half[: files // 2]], check=True)
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
           "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "files"], check=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ribbit-bench-mentions-") as folder:
        root = Path(folder) / "repo"
        root.mkdir()
        build(root, args.files)
        index = FileIndex(root, find_repository(root))
        builds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            index.refresh()
            builds.append(time.perf_counter() - started)
        assert not any(p.startswith("build/") for p in index.paths)
        print(f"{args.files:,} files (+1,000 ignored): the list has {len(index.paths):,} entries (files and folders)")
        print(f"build (git ls-files -co --exclude-standard + index): median {statistics.median(builds) * 1000:.0f} ms")
        every: list[float] = []
        best: list[float] = []  # each keystroke's fastest round: its own cost, without the machine's other load
        for query in QUERIES:
            times: list[list[float]] = [[] for _ in query]
            for _ in range(args.rounds):
                index.refresh()  # each round types the query from scratch, on a fresh list
                for end in range(1, len(query) + 1):
                    started = time.perf_counter()
                    found = index.match(query[:end])
                    times[end - 1].append(time.perf_counter() - started)
            flat = [t for per_key in times for t in per_key]
            every += flat
            best += [min(per_key) for per_key in times]
            print(f"  {query!r:32} per keystroke: median {statistics.median(flat) * 1000:5.1f} ms, "
                  f"max {max(flat) * 1000:5.1f} ms; first match: {found[0] if found else '-'}")
        print(f"all keystrokes: median {statistics.median(every) * 1000:.1f} ms, max {max(every) * 1000:.1f} ms; "
              f"the slowest keystroke in its best round {max(best) * 1000:.1f} ms (target: under 50 ms)")


if __name__ == "__main__":
    main()
