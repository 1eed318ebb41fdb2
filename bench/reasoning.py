"""What reasoning costs per task: the same sessions with reasoning on and off, teacher-forced.

    python -m bench.reasoning [--gguf PATH.gguf] [--repeats 2] [--tasks merge-intervals,...]

Each task of bench/reasoning_sessions.py (three evals/starter tasks) runs as a whole ribbit session: the
real agent loop, real tools on a fresh copy of the task's repository (Read, Edit, pytest in the sandbox),
and llama.cpp evaluating every token the model "writes" one at a time, exactly as sampled tokens are
(teacher forcing: the recorded turn is forced, nothing is sampled). With reasoning on, the generation
prompt opens `<think>` and the turn starts with its reasoning; with it off (`enable_thinking=false`), the
prompt closes an empty think block and the turn is the call alone. Tokens and seconds per task are what
llama.cpp really spent on this machine; the amount of reasoning is the script's (see reasoning_sessions).

The default GGUF is the synthetic FrogNano (random weights, FrogNano's exact shapes and Q4_K_M size) in
/work/models when present, else the shared tiny qwen35: a random-weight model costs exactly what the real
one does per token but says nothing about quality. Its template is replaced by the real Qwen3.5-4B one
(tests/data/Qwen3.5-4B.jinja, which FrogNano ships), so the switch is the real one. Prints figures;
asserts nothing. Runs alternate on/off and take medians (the machine is shared).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from agent.approvals import RejectAll
from agent.events import AgentEvent, UsageEvent
from agent.loop import Limits
from agent.sandbox import sandbox_available
from agent.workspace import open_workspace
from bench.reasoning_sessions import TASKS, ScriptedTask, forced_turns
from models.base import Chunk, GenerationRequest, TurnEnd
from models.llama_backend import LlamaCppModel

ROOT = Path(__file__).resolve().parents[1]
STARTER = ROOT / "evals" / "starter"
TEMPLATE = ROOT / "tests" / "data" / "Qwen3.5-4B.jinja"
SYNTHETIC = Path("/work/models/frognano/frognano-synthetic-Q4_K_M.gguf")
TINY = ROOT.parent.parent / "shared" / "fixtures" / "tiny-qwen35-f16.gguf"


class ForcedTurns:
    """A ChatModel over a llama.cpp model that 'writes' recorded turns: each token is forced and evaluated
    one at a time like a sampled one; the turn ends where the recording does."""

    def __init__(self, model: LlamaCppModel, turns: list[str]) -> None:
        self.model, self.turns = model, turns
        self.info = model.info
        self.position = 0

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        text = self.turns[self.position] if self.position < len(self.turns) else "Done."
        self.position += 1
        self.model.response_prefix = text
        forced = len(self.model._tokenize(text))  # noqa: SLF001
        try:
            for chunk in self.model.generate(dataclasses.replace(request, max_tokens=forced)):
                if isinstance(chunk, TurnEnd) and chunk.finish_reason == "length":
                    chunk = dataclasses.replace(chunk, finish_reason="stop")  # the recording ends here
                yield chunk
        finally:
            self.model.response_prefix = ""

    def context_used(self) -> int:
        return self.model.context_used()

    def close(self) -> None:
        pass


@dataclasses.dataclass
class Figures:
    steps: int
    generated: int  # tokens the model "wrote" (reasoning and calls)
    evaluated: int  # prompt tokens read (tool results, generation prompts)
    model_s: float  # prefill + decode
    wall_s: float  # the whole session, tools included
    solved: bool  # the task's fixed file equals its solution on disk


def fresh_repo(root: Path, source: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(source, root)
    env = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), *env, "commit", "-qm", "start"], check=True)


def run_once(model: LlamaCppModel, task: ScriptedTask, reasoning: bool, work: Path, sandbox: bool) -> Figures:
    root = work / task.name  # the same path every run: one system prompt, read once, restored after
    fresh_repo(root, STARTER / task.name / "repo")
    statement = json.loads((STARTER / task.name / "task.json").read_text())["problem_statement"]
    usage: list[UsageEvent] = []

    def sink(event: AgentEvent) -> None:
        if isinstance(event, UsageEvent):
            usage.append(event)

    forced = ForcedTurns(model, forced_turns(task, reasoning))
    workspace = open_workspace(
        forced, root, mode="full-auto", approver=RejectAll(), sink=sink, no_sandbox=not sandbox, watch=False,
        reasoning=reasoning, limits=Limits(max_steps=len(task.turns) + 2, context=model.info.context_length),
    )
    try:
        list(model.preload(workspace.session.messages[0], workspace.session.specs))  # a restore after the first run
        started = time.perf_counter()
        summary = workspace.session.run(statement)
        wall = time.perf_counter() - started
    finally:
        workspace.close()
    solution = STARTER / task.name / "solution"
    solved = summary.stop_reason == "finished" and all(
        (root / f.relative_to(solution)).read_text() == f.read_text() for f in solution.rglob("*") if f.is_file()
    )
    return Figures(
        steps=summary.steps, generated=sum(u.completion_tokens for u in usage),
        evaluated=sum(u.evaluated_tokens for u in usage), model_s=sum(u.prefill_s + u.decode_s for u in usage),
        wall_s=wall, solved=solved,
    )


def median_of(runs: list[Figures], field: str) -> float:
    return statistics.median(float(getattr(r, field)) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = SYNTHETIC if SYNTHETIC.is_file() else TINY
    parser.add_argument("--gguf", type=Path, default=default, help=f"a qwen35 GGUF (default: {default})")
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="chat template replacing the GGUF's")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each task in each mode (alternating)")
    parser.add_argument("--tasks", default=",".join(t.name for t in TASKS))
    parser.add_argument("--context", type=int, default=16_384)
    args = parser.parse_args()
    tasks = [t for t in TASKS if t.name in args.tasks.split(",")]
    sandbox, why = sandbox_available()
    print(f"model: {args.gguf} ({args.gguf.stat().st_size / 2**30:.2f} GiB), template: {args.template.name}")
    print(f"sandbox: {'bubblewrap' if sandbox else 'none (' + why + ')'}; {len(tasks)} tasks x {args.repeats} repeats x on/off")
    with tempfile.TemporaryDirectory(prefix="bench-reasoning-") as tmp:
        model = LlamaCppModel(args.gguf, n_ctx=args.context, temperature=0.0, chat_template=args.template.read_text(),
                              state_dir=Path(tmp) / "states")
        if model.info.reasoning is None:
            raise SystemExit(f"{args.template} has no enable_thinking switch")
        print(f"threads {model.plan.n_threads}, context {model.info.context_length}\n")
        results: dict[tuple[str, bool], list[Figures]] = {}
        try:
            for index, task in enumerate(tasks):
                for repeat in range(args.repeats):
                    order = (True, False) if (index + repeat) % 2 == 0 else (False, True)
                    for reasoning in order:
                        figures = run_once(model, task, reasoning, Path(tmp) / "work", sandbox)
                        results.setdefault((task.name, reasoning), []).append(figures)
                        print(f"  {task.name:<22} reasoning {'on ' if reasoning else 'off'}  {figures}", flush=True)
        finally:
            model.close()
    print("\nmedians per task            on: gen tok  eval tok  model s  wall s | off: gen tok  eval tok  model s  wall s"
          " | off/on: wall")
    totals = {True: [0.0, 0.0], False: [0.0, 0.0]}
    for task in tasks:
        row = []
        for reasoning in (True, False):
            runs = results[(task.name, reasoning)]
            gen, ev, model_s, wall = (median_of(runs, f) for f in ("generated", "evaluated", "model_s", "wall_s"))
            totals[reasoning][0] += gen
            totals[reasoning][1] += wall
            solved = "" if all(r.solved for r in runs) else " (NOT SOLVED)"
            row.append(f"{gen:8.0f}  {ev:8.0f}  {model_s:7.1f}  {wall:6.1f}{solved}")
        ratio = median_of(results[(task.name, False)], "wall_s") / median_of(results[(task.name, True)], "wall_s")
        print(f"  {task.name:<24} {row[0]}     | {row[1]}     | {ratio:.2f}")
    extra_tokens = totals[True][0] - totals[False][0]
    extra_s = totals[True][1] - totals[False][1]
    steps = sum(len(t.turns) for t in tasks)
    print(f"\nper task: reasoning on {totals[True][1] / len(tasks):.1f} s, off {totals[False][1] / len(tasks):.1f} s "
          f"(off/on {totals[False][1] / totals[True][1]:.2f}); {extra_tokens / steps:.0f} reasoning tokens a step "
          f"cost {extra_s / max(extra_tokens, 1) * 1000:.0f} ms each")


if __name__ == "__main__":
    main()
