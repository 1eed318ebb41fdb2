"""`python -m bench.light` — how light ribbit is on a laptop: peak memory of `ribbit run` at real size with a
context that grows with the conversation, against the same command with the largest context allocated at
the start, and what the memory planner chooses where less memory is free.

    python -m bench.light [--model frognano|PATH] [--free-gib G] [--task-tokens 6000] [--only 123]

1. `ribbit doctor --model M`: the memory plan line (with --free-gib: the planner's free-memory input set to
   G GiB, as on an 8 GB laptop with a browser open).
2. `ribbit run "Say hi." --max-turn-tokens 8`: peak resident memory, growing vs allocated whole.
3. `ribbit run` with a first task of about --task-tokens tokens (a source listing to summarise), 8 tokens
   of answer: peak resident memory, the growth events and what they cost, growing vs allocated whole.

Every ribbit command runs in a child process (`python -m bench.light child ...`) that sets the planner's
inputs before ribbit's own entry point starts; nothing else of ribbit is changed. Peak resident memory
counts the model file's mapped pages (all of them once a turn has run). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.assets import frognano_gguf, model_path
from bench.quantize import measure

ROOT = Path(__file__).resolve().parents[1]
GiB = float(1 << 30)


def child(argv: list[str]) -> int:
    """ribbit's command line, with the planner's free-memory input (--free-gib) and, with --whole, the
    largest context allocated at the start (what ribbit did before its context grew)."""
    parser = argparse.ArgumentParser(prog="python -m bench.light child")
    parser.add_argument("--free-gib", type=float, default=None)
    parser.add_argument("--whole", action="store_true")
    args, rest = parser.parse_known_args(argv)
    import models.llama_backend
    import models.memory

    if args.free_gib is not None:
        free = int(args.free_gib * GiB)
        models.memory.available_memory = models.llama_backend.available_memory = lambda: free  # type: ignore[assignment]
    if args.whole:
        models.memory.START_CONTEXT = 1 << 30
    from app.cli import main

    return main(rest[1:] if rest[:1] == ["--"] else rest)


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir(parents=True)
    (repo / "notes.txt").write_text("A small repository for a memory measurement.\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    return repo


def listing(tokens: int) -> str:
    """About `tokens` tokens of this repository's source (4 characters a token in Qwen's BPE on this code)."""
    text = ""
    for path in sorted((ROOT / "models").glob("*.py")):
        text += f"# {path.name}\n" + path.read_text()
        if len(text) > tokens * 4:
            break
    return text[: tokens * 4]


def ribbit_run(model: Path, task: str, work: Path, name: str, free_gib: float | None, whole: bool) -> dict:
    transcript = work / f"{name}.jsonl"
    options = (["--free-gib", str(free_gib)] if free_gib is not None else []) + (["--whole"] if whole else [])
    cmd = [sys.executable, "-m", "bench.light", "child", *options, "--", "run", task, "--repo", str(make_repo(work / name)),
           "--model", str(model), "--max-turn-tokens", "8", "--transcript", str(transcript)]
    figures = measure(cmd, quiet=True, ok=(0, 3))
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    figures["growths"] = [r for r in records if r["type"] == "context"]
    usage = [r for r in records if r["type"] == "usage"]
    figures["prompt_tokens"] = usage[0]["prompt_tokens"] if usage else 0
    figures["prefill_s"] = sum(u["prefill_s"] for u in usage)
    return figures


def describe(figures: dict, size_gib: float) -> str:
    growths = figures["growths"]
    grown = "; ".join(f"{g['from']} -> {g['to']} in {g['seconds']:.2f} s" for g in growths) or "none"
    return (f"peak RSS {figures['peak_rss_gib']:.2f} GiB = model file {size_gib:.2f} + {figures['peak_rss_gib'] - size_gib:.2f} "
            f"(anonymous {figures['peak_anon_gb'] * 1e9 / GiB:.2f} GiB); prompt {figures['prompt_tokens']} tokens read in "
            f"{figures['prefill_s']:.1f} s; wall {figures['wall_s']:.0f} s; growths: {grown}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.light", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=model_path, default=frognano_gguf(), help="a GGUF, or frognano (default)")
    parser.add_argument("--free-gib", type=float, default=None, help="the planner's free-memory input (default: what the kernel says)")
    parser.add_argument("--task-tokens", type=int, default=6000)
    parser.add_argument("--only", default="123")
    parser.add_argument("--no-whole", action="store_true", help="skip the runs with the largest context allocated at the start")
    args = parser.parse_args(argv)
    size = args.model.stat().st_size / GiB
    free = ["--free-gib", str(args.free_gib)] if args.free_gib is not None else []
    print(f"model {args.model.name}: {size:.2f} GiB on disk" + (f"; planner's free memory set to {args.free_gib} GiB" if free else ""), flush=True)
    if "1" in args.only:
        doctor = subprocess.run([sys.executable, "-m", "bench.light", "child", *free, "--", "doctor", "--model", str(args.model)],
                                capture_output=True, text=True, cwd=ROOT, check=False)
        plan = next((line for line in doctor.stdout.splitlines() if "memory plan" in line), doctor.stdout + doctor.stderr)
        print(f"1. ribbit doctor: {plan.strip()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-light-") as tmp:
        work = Path(tmp)
        cases = [("2", "say-hi", "Say hi."), ("3", "long-task", "Summarise this code in one line:\n\n" + listing(args.task_tokens))]
        for section, name, task in cases:
            if section not in args.only:
                continue
            print(f"{section}. ribbit run {name} (--max-turn-tokens 8):", flush=True)
            for whole in (False,) if args.no_whole else (False, True):
                label = "allocated whole" if whole else "growing"
                figures = ribbit_run(args.model, task, work, f"{name}-{label.replace(' ', '-')}", args.free_gib, whole)
                print(f"   {label:15} {describe(figures, size)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
