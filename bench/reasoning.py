"""What reasoning costs per task: the same sessions with reasoning on and off, teacher-forced.

    python -m bench.reasoning [--gguf PATH] [--vocab VOCAB.gguf] [--real-size PATH|none] [--repeats 2]

1. Sessions. Each task of bench/reasoning_sessions.py (three evals/starter tasks) runs as a whole ribbit
   session on `--gguf`: the real agent loop, real tools on a fresh copy of the task's repository (Read,
   Edit, tests in the sandbox), and llama.cpp evaluating every token the model "writes" one at a time,
   as sampled tokens are (teacher forcing: the recorded turn is forced, nothing is sampled). With
   reasoning on, the generation prompt opens `<think>` and each turn starts with its reasoning; with it
   off (`enable_thinking=false`) the prompt closes an empty think block and the turn is the call alone.
   The template is the real Qwen3.5-4B one (tests/data), whatever the GGUF carries. Every task is checked
   solved on disk in both modes.
2. Tokens. What llama.cpp evaluated in each session is counted again with a trained Qwen tokenizer
   (`--vocab`, default llama.cpp's ggml-vocab-qwen35.gguf from the llama-cpp-python sources, fetched
   once by bench.assets: Qwen's 151,643-token BPE with Qwen3.5's pre-tokenizer; FrogNano's own
   vocabulary has 248,320): written tokens (reasoning and calls) and read tokens (tool results, prompts).
3. Time at real size. Per-token costs measured on `--real-size` (default: the synthetic FrogNano in
   ribbit's cache, from bench.quantize — random weights, FrogNano's exact shapes and Q4_K_M size, so
   the same cost per token):
   prompt tokens in batches, written tokens one at a time. Time per task = written x decode cost + read
   x prompt cost + the tools' own time from step 1.

With a real FrogNano GGUF as `--gguf`, step 1 is the real thing. The default tiny model is meaningless
for quality; so is the synthetic one: this measures cost, never whether the model does better with
reasoning. Prints figures; asserts nothing. Runs alternate on/off; medians.
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

from agent.core.approvals import RejectAll
from agent.core.events import AgentEvent, UsageEvent
from agent.core.loop import Limits
from agent.sandbox.runner import sandbox_available
from agent.session.workspace import open_workspace
from bench.assets import frognano_gguf, qwen_vocabulary
from bench.quantize import QWEN35_TEMPLATE
from bench.reasoning_sessions import TASKS, ScriptedTask, forced_turns
from models.base import Chunk, GenerationRequest, TurnEnd
from models.llama_backend import LlamaCppModel

ROOT = Path(__file__).resolve().parents[1]
STARTER = ROOT / "evals" / "starter"


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
class Run:
    """One session: what the session model did, and the same text in FrogNano's tokens."""

    written: int  # tokens the model wrote (reasoning and calls), session model
    read: int  # prompt tokens it read (tool results, prompts), session model
    model_s: float
    wall_s: float
    solved: bool  # the task's fixed files equal its solution, on disk
    real_written: int = 0  # the same counted with --vocab
    real_read: int = 0

    @property
    def tools_s(self) -> float:
        return max(0.0, self.wall_s - self.model_s)


def fresh_repo(root: Path, source: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(source, root)
    env = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), *env, "commit", "-qm", "start"], check=True)


def run_session(model: LlamaCppModel, task: ScriptedTask, reasoning: bool, work: Path, sandbox: bool) -> tuple[Run, str]:
    """(figures, the text read and written after the system prompt)."""
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
        list(model.preload(workspace.session.messages[:1], workspace.session.specs))  # restored after the first run
        system = len(model.stream_tokens())
        started = time.perf_counter()
        summary = workspace.session.run(statement)
        wall = time.perf_counter() - started
    finally:
        workspace.close()
    stream = model.llm.detokenize(model.stream_tokens()[system:], special=True).decode("utf-8", "replace")
    solution = STARTER / task.name / "solution"
    solved = summary.stop_reason == "finished" and all(
        (root / f.relative_to(solution)).read_text() == f.read_text() for f in solution.rglob("*") if f.is_file()
    )
    run = Run(written=sum(u.completion_tokens for u in usage), read=sum(u.evaluated_tokens for u in usage),
              model_s=sum(u.prefill_s + u.decode_s for u in usage), wall_s=wall, solved=solved)
    return run, stream


def count_real(run: Run, stream: str, turns: list[str], vocab: object) -> None:
    """Fill in the real tokenizer's counts: every turn as written, the rest of the stream as read."""
    def tokens(text: str) -> int:
        return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))  # type: ignore[attr-defined]

    run.real_written = sum(tokens(t) for t in turns)
    run.real_read = tokens(stream) - run.real_written


@dataclasses.dataclass
class TokenCosts:
    prompt_s: float  # seconds per prompt token, read in batches
    decode_s: float  # seconds per written token, one at a time


def measure_costs(path: Path, rounds: int, prompt_tokens: int = 512, decode_tokens: int = 32) -> TokenCosts:
    """Per-token costs on a real-size GGUF: a prompt of `prompt_tokens` in batches, then tokens one by one."""
    model = LlamaCppModel(path, n_ctx=4096, persist_states=False)
    prompts, decodes = [], []
    try:
        text = (STARTER / "merge-intervals" / "repo" / "intervals.py").read_text() * 40
        tokens = model._tokenize(text)[: prompt_tokens + decode_tokens]  # noqa: SLF001
        for _ in range(rounds):
            model.llm.reset()
            started = time.perf_counter()
            for start in range(0, prompt_tokens, model.n_batch):
                model._eval(tokens[start : min(start + model.n_batch, prompt_tokens)])  # noqa: SLF001
            prompts.append((time.perf_counter() - started) / prompt_tokens)
            started = time.perf_counter()
            for token in tokens[prompt_tokens:]:
                model._eval([token])  # noqa: SLF001
            decodes.append((time.perf_counter() - started) / decode_tokens)
        print(f"  {path.name}: threads {model.plan.n_threads}; prompt {1 / statistics.median(prompts):.1f} tok/s, "
              f"writing {1 / statistics.median(decodes):.2f} tok/s (medians of {rounds})")
    finally:
        model.close()
    return TokenCosts(prompt_s=statistics.median(prompts), decode_s=statistics.median(decodes))


def med(runs: list[Run], field: str) -> float:
    return statistics.median(float(getattr(r, field)) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, default=None,
                        help="the model sessions run on (default: a tiny qwen35 with Qwen3.5's template, built here)")
    parser.add_argument("--template", type=Path, default=QWEN35_TEMPLATE, help="chat template replacing the GGUF's")
    parser.add_argument("--vocab", default=None,
                        help="a GGUF whose tokenizer counts the tokens (default: Qwen's, fetched once; '': the session model's)")
    parser.add_argument("--real-size", default=str(frognano_gguf()) if frognano_gguf().is_file() else "none",  # bench.quantize builds it
                        help="a real-size GGUF to measure per-token costs on, or none")
    parser.add_argument("--repeats", type=int, default=2, help="sessions of each task in each mode (alternating)")
    parser.add_argument("--tasks", default=",".join(t.name for t in TASKS))
    args = parser.parse_args()
    if args.vocab is None:
        args.vocab = str(qwen_vocabulary())
    tasks = [t for t in TASKS if t.name in args.tasks.split(",")]
    sandbox, why = sandbox_available()
    print(f"sessions on {args.gguf.name if args.gguf else 'a tiny qwen35'}, template {args.template.name}, sandbox "
          f"{'bubblewrap' if sandbox else 'none (' + why + ')'}; {len(tasks)} tasks x {args.repeats} x on/off")
    import llama_cpp

    results: dict[tuple[str, bool], list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-reasoning-") as tmp:
        if args.gguf is None:
            from tests.engine.tiny_qwen35 import build_tiny_qwen35

            args.gguf = build_tiny_qwen35(Path(tmp) / "tiny")
        model = LlamaCppModel(args.gguf, n_ctx=8192, temperature=0.0, chat_template=args.template.read_text(),
                              state_dir=Path(tmp) / "states")
        vocab = llama_cpp.Llama(model_path=args.vocab, vocab_only=True, verbose=False) if args.vocab else model.llm
        if model.info.reasoning is None:
            raise SystemExit(f"{args.template} has no enable_thinking switch")
        try:
            for index, task in enumerate(tasks):
                for repeat in range(args.repeats):
                    for reasoning in (True, False) if (index + repeat) % 2 == 0 else (False, True):
                        run, stream = run_session(model, task, reasoning, Path(tmp) / "work", sandbox)
                        count_real(run, stream, forced_turns(task, reasoning), vocab)
                        results.setdefault((task.name, reasoning), []).append(run)
                        print(f"  {task.name:<20} {'on ' if reasoning else 'off'} {run}", flush=True)
        finally:
            model.close()
    costs = None
    if args.real_size != "none":
        print(f"\nper-token costs at real size ({args.real_size}):")
        costs = measure_costs(Path(args.real_size), rounds=3)
    counted = "Qwen's trained tokenizer" if args.vocab else "the session model's tokenizer"
    print(f"\nmedians per task ({counted}): written / read tokens, on vs off" + (
        "; time at real size = written x writing cost + read x prompt cost + tools" if costs else ""))
    sums: dict[bool, list[float]] = {True: [0, 0, 0], False: [0, 0, 0]}
    steps = sum(len(t.turns) for t in tasks)
    for task in tasks:
        line = f"  {task.name:<20}"
        for reasoning in (True, False):
            runs = results[(task.name, reasoning)]
            written, read = med(runs, "real_written" if args.vocab else "written"), med(runs, "real_read" if args.vocab else "read")
            real_s = written * costs.decode_s + read * costs.prompt_s + med(runs, "tools_s") if costs else 0.0
            sums[reasoning] = [sums[reasoning][0] + written, sums[reasoning][1] + read, sums[reasoning][2] + real_s]
            solved = "" if all(r.solved for r in runs) else " NOT SOLVED"
            line += f" | {'on ' if reasoning else 'off'} {written:5.0f} / {read:5.0f}" + (f"  {real_s:6.1f} s" if costs else "") + solved
        print(line)
    on, off = sums[True], sums[False]
    print(f"\nper task: written {on[0] / len(tasks):.0f} vs {off[0] / len(tasks):.0f} tokens (off/on {off[0] / on[0]:.2f}), "
          f"read {on[1] / len(tasks):.0f} vs {off[1] / len(tasks):.0f}; reasoning {(on[0] - off[0]) / steps:.0f} tokens a step")
    if costs:
        print(f"time per task at real size: on {on[2] / len(tasks):.1f} s, off {off[2] / len(tasks):.1f} s "
              f"(off/on {off[2] / on[2]:.2f}); each reasoning token costs {costs.decode_s * 1000:.0f} ms")
    print(f"session model wall time per task: on {sum(med(results[(t.name, True)], 'wall_s') for t in tasks) / len(tasks):.1f} s, "
          f"off {sum(med(results[(t.name, False)], 'wall_s') for t in tasks) / len(tasks):.1f} s")


if __name__ == "__main__":
    main()
