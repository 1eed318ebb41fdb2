"""What the Bash sandbox costs: per-command latency, the per-command layout work, memory under a flood.

1. `true` through each runner (unsandboxed, bubblewrap with the repository writable, read-only, and
   writable without the memory and process caps: memory_mb = 0, max_processes = 0, and writable without
   the command overlay; a command writing 20 files with and without it), and through a
   baseline runner loaded from another checkout's agent/sandbox/runner.py (--baseline), alternated
   A/B/... per round so machine noise hits them alike; medians and ratios.
2. The per-command layout work alone (hidden paths, the host socket table, the env allow-list, git's
   config files with credentials to mask).
3. Peak RSS of a `ribbit run` process whose command prints 2 GB, against one that prints one line.

    python -m bench.sandbox [--rounds 40] [--submodules 3] [--git-credentials] [--baseline /path/to/old/agent/sandbox.py]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.sandbox.runner import BwrapRunner, LocalRunner
from agent.sandbox.config import SandboxSettings


def load_baseline(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("baseline_sandbox", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# A command that changes something: what applying the overlay's upper layer costs.
WRITES = "mkdir -p out && for i in $(seq 20); do echo $i $RANDOM > out/f$i; done"


def per_command(root: Path, rounds: int, baseline: Path | None) -> None:
    cancel = threading.Event()
    local, bwrap = LocalRunner(root), BwrapRunner(root)
    uncapped = BwrapRunner(root, SandboxSettings(memory_mb=0, max_processes=0))
    direct = BwrapRunner(root)
    direct.overlay_base = None  # writes straight to the checkout, as before issue 40 (agent.sandbox.overlay)
    print(f"caps: {bwrap.caps.describe()}; command overlay: {'yes' if bwrap.overlay_base else 'no (cannot mount here)'}")
    cases: dict[str, Callable[[], object]] = {
        "unsandboxed": lambda: local.run("true", root, 30, cancel),
        "bubblewrap, repo writable": lambda: bwrap.run("true", root, 30, cancel, access="read-write"),
        "bubblewrap, repo read-only": lambda: bwrap.run("true", root, 30, cancel, access="read-only"),
        "bubblewrap writable, no caps": lambda: uncapped.run("true", root, 30, cancel, access="read-write"),
        "bubblewrap writable, no overlay": lambda: direct.run("true", root, 30, cancel, access="read-write"),
        "bubblewrap, writes 20 files": lambda: bwrap.run(WRITES, root, 30, cancel, access="read-write"),
        "no overlay, writes 20 files": lambda: direct.run(WRITES, root, 30, cancel, access="read-write"),
    }
    if baseline is not None:
        old = load_baseline(baseline).BwrapRunner(root)
        cases["baseline bubblewrap (writable)"] = lambda: old.run("true", root, 30, cancel)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for case in cases.values():
        case()  # warm caches
    for _ in range(rounds):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - start)
    print(f"per-command wall time, `true`, median of {rounds} (alternated):")
    ref = statistics.median(times["bubblewrap, repo writable"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<32} {median * 1000:7.1f} ms   ({median / ref:.2f} x bubblewrap writable)")
    start = time.perf_counter()
    for _ in range(rounds):
        bwrap.wrap(["true"], root, "read-write")
    layout = (time.perf_counter() - start) / rounds
    view = bwrap.view()
    start = time.perf_counter()
    for _ in range(rounds):
        bwrap.git_masks.mounts()
    masking = (time.perf_counter() - start) / rounds
    print(
        f"layout work per command: {layout * 1000:.2f} ms "
        f"({len(view.hidden)} hidden paths, {len(view.sockets)} host sockets masked, {len(bwrap.environment())} variables), "
        f"of which finding git's config files to mask {masking * 1000:.2f} ms ({len(view.masked)} masked copies mounted)"
    )
    for runner in (local, bwrap, uncapped, direct):
        runner.close()


def flood_memory(root: Path) -> None:
    here = Path(__file__).resolve().parents[1]

    def peak(command: str) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            replay = Path(tmp) / "r.jsonl"
            call = f"<tool_call>\n<function=Bash>\n<parameter=command>\n{command}\n</parameter>\n<parameter=timeout>\n600\n</parameter>\n</function>\n</tool_call>"
            replay.write_text(json.dumps({"text": call}) + "\n")
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "run", "x", "--repo", str(root), "--model", f"replay:{replay}",
                 "--mode", "full-auto"], cwd=here, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            _, _, usage = os.wait4(proc.pid, 0)
            return usage.ru_maxrss

    small = peak("echo one line")
    big = peak("head -c 1500M /dev/zero; yes ribbit | head -c 500M")
    print(f"peak RSS of `ribbit run`: one line {small / 1024:.0f} MiB, 2 GB of output {big / 1024:.0f} MiB "
          f"(+{(big - small) / 1024:.0f} MiB)")


def add_submodules(root: Path, tmp: Path, count: int) -> None:
    """`count` one-file submodules under vendor/ (initialised), committed."""
    if count == 0:
        return
    source = tmp / "lib"
    source.mkdir()
    who = ["-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    (source / "a").write_text("a\n")
    subprocess.run(["git", "-C", str(source), "add", "a"], check=True)
    subprocess.run(["git", "-C", str(source), *who, "commit", "-qm", "a"], check=True)
    for n in range(count):
        subprocess.run(["git", "-C", str(root), "-c", "protocol.file.allow=always", "submodule", "add", "-q",
                        str(source), f"vendor/lib{n}"], check=True)
    subprocess.run(["git", "-C", str(root), *who, "commit", "-qm", "submodules"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--baseline", type=Path, help="another checkout's agent/sandbox/runner.py to compare with")
    parser.add_argument("--no-flood", action="store_true", help="skip the 2 GB output figure")
    parser.add_argument("--submodules", type=int, default=0, help="submodules in the test repository (vendor/libN)")
    parser.add_argument("--git-credentials", action="store_true",
                        help="a token in the remote URL and an extraheader in the repository's config (one masked copy mounted)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        (root / "a.py").write_text("x = 1\n")
        add_submodules(root, Path(tmp), args.submodules)
        if args.git_credentials:
            for key, value in (("remote.origin.url", "https://x-access-token:bench-token@example.com/r.git"),
                               ("http.https://example.com/.extraheader", "AUTHORIZATION: bearer bench-token")):
                subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
        per_command(root, args.rounds, args.baseline)
        if not args.no_flood:
            flood_memory(root)


if __name__ == "__main__":
    main()
