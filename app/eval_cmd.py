"""`ribbit eval TASKS --model SPEC [--model SPEC ...] [--out DIR]`: candidate models, one harness, your tasks.

Progress on stderr; the report (Markdown) on stdout at the end, and report.md / report.json /
predictions.jsonl in the output folder. Exit codes: 0 done, 1 error, 2 usage error, 130 interrupted
(finished jobs are kept: run the same command again to resume).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from agent.evaluation.report import OUTCOME_LABELS, markdown_report
from agent.evaluation.runner import EvalConfig, EvalProgress, EvalRun
from agent.evaluation.tasks import TaskFileError, load_tasks, select
from agent.loop import Limits
from app.cli import Parser as EvalParser
from app.cli import UsageError
from app.cli import positive as positive_int
from app.visible import visible


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def eval_parser() -> EvalParser:
    parser = EvalParser(
        prog="ribbit eval",
        description="run candidate models in the same harness on your own tasks and report the resolved rate",
    )
    parser.add_argument("tasks", help="a task folder, a folder of task folders, or a .jsonl of tasks / SWE-bench instances")
    parser.add_argument("--model", action="append", required=True, metavar="SPEC",
                        help="model SPEC (repeat for several); {task} in a SPEC is replaced by the task id")
    parser.add_argument("--out", default="eval-out", help="output folder; rerunning into it resumes (default: eval-out)")
    parser.add_argument("--jobs", type=positive_int, default=None,
                        help="jobs in parallel (default: 1 when a llama.cpp model is involved, else up to 4)")
    parser.add_argument("--task", action="append", default=[], metavar="ID", help="only this task (repeatable)")
    parser.add_argument("--time-limit", type=positive_float, default=None, metavar="SECONDS",
                        help="per-task time limit for the agent (default: the task's, else 1800)")
    parser.add_argument("--test-timeout", type=positive_float, default=600.0, metavar="SECONDS",
                        help="time limit per test command (default: 600)")
    parser.add_argument("--max-steps", type=positive_int, default=150)
    parser.add_argument("--max-turn-tokens", type=positive_int, default=8192)
    parser.add_argument("--context", type=positive_int, default=131_072)
    parser.add_argument("--repos", default=None, metavar="DIR",
                        help="where SWE-bench instances' repositories are (owner__name, name or owner/name)")
    parser.add_argument("--test-cmd", default=None,
                        help="test command for tasks that have none ({test_files}: files the test patch touches)")
    parser.add_argument("--retry-errors", action="store_true", help="redo jobs that ended in an error")
    parser.add_argument("--keep-worktrees", action="store_true", help="keep each job's worktrees for inspection")
    parser.add_argument("--no-sandbox", action="store_true", help="run the agent's Bash and the tests without the sandbox")
    return parser


def default_jobs(models: list[str]) -> int:
    """llama.cpp already uses every core: one job. Servers and replays can overlap."""
    if any(not (m.startswith("openai:") or m.startswith("replay:")) for m in models):
        return 1
    return max(1, min(4, os.cpu_count() or 1))


class EvalProgressDisplay:
    """One line per finished job; on a terminal, also a live line for the running ones."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()
        self.running: dict[tuple[str, str], str] = {}
        self.started: dict[tuple[str, str], float] = {}
        self.resolved = 0
        self.finished = 0

    def __call__(self, p: EvalProgress) -> None:
        key = (p.task_id, p.model)
        if p.kind in ("skip", "done") and p.result is not None:
            self.finished += 1
            self.resolved += p.result.outcome == "resolved"
            self.running.pop(key, None)
            r = p.result
            what = "kept " if p.kind == "skip" else ""
            note = f" — {r.message}" if r.message and r.outcome != "resolved" else ""
            self._line(
                f"[{p.index:>{len(str(p.total))}}/{p.total}] {what}{p.task_id} · {p.model}: "
                f"{OUTCOME_LABELS[r.outcome]} ({r.steps} steps, {r.wall_s:.0f} s){note[:160]}"
            )
        elif p.kind == "start":
            self.started[key] = time.monotonic()
            self.running[key] = "starting"
            if not self.live:
                self._line(f"[{p.index:>{len(str(p.total))}}/{p.total}] {p.task_id} · {p.model}: running")
        elif p.kind == "phase":
            self.running[key] = p.phase
        elif p.kind == "step":
            self.running[key] = f"step {p.step}"
        self._status()

    def _line(self, text: str) -> None:
        if self.live:
            self.out.write("\r\033[K")
        self.out.write(visible(text, one_line=True) + "\n")  # task ids and messages carry agent text
        self.out.flush()

    def _status(self) -> None:
        if not self.live:
            return
        jobs = ", ".join(f"{t} {state}" for (t, _), state in self.running.items())
        self.out.write(f"\r\033[K{self.finished} done, {self.resolved} resolved · {jobs}"[:200])
        self.out.flush()


def eval_main(argv: list[str]) -> int:
    try:
        args = eval_parser().parse_args(argv)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    models = [m.strip() or "default" for m in args.model]
    if len(set(models)) != len(models):
        print("ribbit eval: error: the same --model is given twice", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(
            Path(args.tasks), repos_dir=Path(args.repos).expanduser() if args.repos else None, test_command=args.test_cmd,
        )
        tasks = select(tasks, args.task)
    except TaskFileError as exc:
        print(f"ribbit eval: error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out).expanduser().resolve()
    config = EvalConfig(
        out=out,
        limits=Limits(max_steps=args.max_steps, context=args.context, turn_tokens=args.max_turn_tokens),
        jobs=args.jobs or default_jobs(models), time_limit_s=args.time_limit, test_timeout_s=args.test_timeout,
        no_sandbox=args.no_sandbox, keep_worktrees=args.keep_worktrees, retry_errors=args.retry_errors,
    )
    print(
        f"ribbit eval: {len(tasks)} tasks × {len(models)} models, {config.jobs} at a time, results in {out}",
        file=sys.stderr,
    )
    run = EvalRun(tasks, models, config, progress=EvalProgressDisplay(sys.stderr))
    try:
        outcome = run.run()
    except OSError as exc:
        print(f"ribbit eval: error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if outcome.interrupted:
        print(f"\nribbit eval: interrupted; finished jobs are saved in {out} — run the same command to resume",
              file=sys.stderr)
        return 130
    sys.stdout.write(markdown_report(outcome.results, models, [t.id for t in tasks]))
    print(f"ribbit eval: report in {out / 'report.md'}, predictions in {out / 'predictions.jsonl'}", file=sys.stderr)
    return 0
