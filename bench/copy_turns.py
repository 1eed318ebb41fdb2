"""`python -m bench.copy_turns` — what lookup drafting gives a user through `ribbit run`, on copy turns.

    python -m bench.copy_turns [--model default|frognano|PATH] [--rounds 2] [--tokens 500]

Each turn is a real `ribbit run` (its own process, temperature 0, the model's own tokens), once with
`--draft lookup` and once with `--draft none`, alternating which goes first; the figure is decode tokens/s
from the transcript's usage events (completion tokens / decode seconds), lookup over none, per turn and
as the median of the rounds. The turns:

- "repeat": the task holds a 33-line block of this repository's code and asks for it repeated;
- "write-back": a session whose model (a replay) has Read a file goes on with this model (`--continue`),
  asked to Write that file back unchanged: the Write of a file just read.

The figure includes where drafting does not pay: the policy (models.drafting.DraftBudget) drafts only where
its measured verify cost and acceptance say it gains, so a model that does not copy (the synthetic
FrogNano's random weights) or a compute-bound CPU should come out near 1.0, not below. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.assets import model_path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "models" / "threads.py"


def block(lines: int = 33) -> str:
    text = SOURCE.read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("class "))
    return "\n".join(text[start : start + lines])


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir(parents=True)
    (repo / "threads.py").write_text(block() + "\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    return repo


def ribbit(*args: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def decode_rate(transcript: Path) -> tuple[float, int]:
    usage = [json.loads(line) for line in transcript.read_text().splitlines()]
    usage = [u for u in usage if u["type"] == "usage" and u["completion_tokens"] > 1 and u["decode_s"] > 0]
    tokens = sum(u["completion_tokens"] for u in usage)
    return tokens / sum(u["decode_s"] for u in usage) if usage else 0.0, tokens


def run_turn(kind: str, model: Path, draft: str, tokens: int, work: Path) -> tuple[float, int]:
    import os

    folder = work / f"{kind}-{draft}"
    repo = make_repo(folder)
    env = dict(os.environ, XDG_STATE_HOME=str(folder / "state"))
    transcript = folder / "transcript.jsonl"
    common = ["--repo", str(repo), "--mode", "full-auto", "--no-sandbox", "--temperature", "0", "--draft", draft,
              "--max-turn-tokens", str(tokens), "--max-steps", "1", "--transcript", str(transcript)]
    if kind == "repeat":
        task = f"Repeat this block exactly, nothing else:\n\n```python\n{block()}\n```"
        ribbit("run", task, "--model", str(model), *common, cwd=repo, env=env)
    else:
        read = json.dumps({"text": '<tool_call>\n{"name": "Read", "arguments": {"file_path": "threads.py"}}\n</tool_call>'})
        replay = folder / "read.jsonl"
        replay.write_text(read + "\n")
        ribbit("run", "Read threads.py.", "--model", f"replay:{replay}", "--repo", str(repo), "--mode", "full-auto",
               "--no-sandbox", "--max-steps", "2", cwd=repo, env=env)
        ribbit("run", "--continue", "Now Write threads.py back exactly as it is, all of it.", "--model", str(model),
               *common, cwd=repo, env=env)
    return decode_rate(transcript)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.copy_turns", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=model_path, default=None, help="a GGUF, frognano, or the embedded model (default)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=500, help="--max-turn-tokens of each turn")
    parser.add_argument("--turns", nargs="+", default=["repeat", "write-back"], choices=["repeat", "write-back"])
    args = parser.parse_args(argv)
    from models.embedded import embedded_model_path

    model = args.model or embedded_model_path()
    print(f"copy turns through `ribbit run` on {model.name}, {args.rounds} alternated pairs each", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-copy-turns-") as tmp:
        for kind in args.turns:
            ratios = []
            for index in range(args.rounds):
                rates: dict[str, tuple[float, int]] = {}
                for draft in (("lookup", "none") if index % 2 == 0 else ("none", "lookup")):
                    rates[draft] = run_turn(kind, model, draft, args.tokens, Path(tmp) / str(index))
                (lookup, n_lookup), (none, n_none) = rates["lookup"], rates["none"]
                ratio = lookup / none if none else float("nan")
                ratios.append(ratio)
                print(f"  {kind:10} round {index + 1}: lookup {lookup:6.2f} tok/s ({n_lookup} tokens) vs none {none:6.2f} tok/s "
                      f"({n_none} tokens) = {ratio:.2f}x", flush=True)
            print(f"  {kind:10} median {statistics.median(ratios):.2f}x (lowest {min(ratios):.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
