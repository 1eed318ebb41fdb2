"""`ribbit eval TASKS --model SPEC [--model SPEC ...] [--out DIR]`: candidate models, one harness, your tasks.

Progress on stderr (jobs done, resolved so far, ETA); the report (Markdown) on stdout at the end, and
report.md / report.json / predictions/MODEL.jsonl in the output folder. Exit codes: 0 done, 1 error,
2 usage error, 130 interrupted (finished jobs are kept: run the same command again to resume).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from agent.evaluation.report import OUTCOME_LABELS, markdown_report, model_labels, short_duration
from agent.evaluation.runner import EvalConfig, EvalProgress, EvalRun
from agent.evaluation.tasks import TaskFileError, load_tasks, select
from agent.session import Limits
from models.api_keys import redact
from models.backends import backend_for
from models.base import ModelError
from app.args import Parser as EvalParser
from app.args import positive as positive_int
from app.args import positive_float
from app.visible import visible
from app.words import counted


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
    parser.add_argument("--samples", type=positive_int, default=1, metavar="N",
                        help="run each task N times per model: pass@1 mean and spread (default: 1)")
    parser.add_argument("--task", action="append", default=[], metavar="ID", help="only this task (repeatable)")
    parser.add_argument("--first", type=positive_int, default=None, metavar="N",
                        help="only the first N tasks (in the file's order, after --task)")
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
    if any(backend_for(m).in_process for m in models):
        return 1
    return max(1, min(4, os.cpu_count() or 1))


def eta_seconds(remaining: int, finished: int, elapsed: float) -> float | None:
    """Time left at this run's pace so far: its wall time over the jobs it finished, times the jobs left.
    A pace, not a job's median over the jobs at once: it counts the contention of parallel jobs on the
    same cores, their waits and the slow jobs still running, which the median of the first (quick) jobs
    did not (issue 40: that was 3-5x off)."""
    if remaining <= 0:
        return 0.0
    if finished <= 0:
        return None
    return elapsed / finished * remaining


def format_eta(seconds: float | None) -> str:
    return "ETA after the first job" if seconds is None else f"ETA {short_duration(seconds, decimals=0)}"


class EvalProgressDisplay:
    """One line per finished job with jobs done, resolved so far and the ETA; on a terminal, also a live
    line for the running ones."""

    def __init__(self, out: TextIO, models: Sequence[str] = (), parallel: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.live = out.isatty()
        self.parallel = parallel
        self.labels = model_labels(models)
        self.running: dict[tuple[str, str, int], str] = {}
        self.clock = clock
        self.started = clock()
        self.ran = 0  # jobs finished by this run (kept ones from an earlier run have no pace)
        self.resolved: dict[str, int] = {}
        self.finished_by_model: dict[str, int] = {}
        self.finished = 0
        self.total = 0

    def __call__(self, p: EvalProgress) -> None:
        key = (p.task_id, p.model, p.sample)
        self.total = p.total
        if p.kind in ("skip", "done") and p.result is not None:
            r = p.result
            self.finished += 1
            self.finished_by_model[p.model] = self.finished_by_model.get(p.model, 0) + 1
            self.resolved[p.model] = self.resolved.get(p.model, 0) + (r.outcome == "resolved")
            self.running.pop(key, None)
            if p.kind == "done":
                self.ran += 1
            what = "kept " if p.kind == "skip" else ""
            sample = f" #{p.sample}" if p.sample > 1 else ""
            note = f" — {r.message}" if r.message and r.outcome != "resolved" else ""
            line = (f"[{p.index:>{len(str(p.total))}}/{p.total}] {what}{p.task_id}{sample} · {self._label(p.model)}: "
                    f"{OUTCOME_LABELS[r.outcome]} ({counted(r.steps, 'step')}, {r.wall_s:.0f} s){note[:160]}")
            if p.kind == "done":
                line += f" · {self.tally()}"
            self._line(line)
        elif p.kind == "start":
            self.running[key] = "starting"
            if not self.live:
                self._line(f"[{p.index:>{len(str(p.total))}}/{p.total}] {p.task_id} · {self._label(p.model)}: running")
        elif p.kind == "phase":
            self.running[key] = p.phase
        elif p.kind == "step":
            self.running[key] = f"step {p.step}"
        self._status()

    def tally(self) -> str:
        """`12/40 done, resolved so far: A 5/6, B 3/6, ETA 14m05s`."""
        order = [m for m in self.labels if m in self.finished_by_model]
        order += [m for m in self.finished_by_model if m not in order]
        so_far = ", ".join(f"{self._label(m)} {self.resolved[m]}/{self.finished_by_model[m]}" for m in order)
        eta = eta_seconds(self.total - self.finished, self.ran, self.clock() - self.started)
        return f"{self.finished}/{self.total} done, resolved so far: {so_far}, {format_eta(eta)}"

    def _label(self, model: str) -> str:
        return self.labels.get(model, model)

    def _line(self, text: str) -> None:
        if self.live:
            self.out.write("\r\033[K")
        self.out.write(visible(text, one_line=True) + "\n")  # task ids and messages carry agent text
        self.out.flush()

    def _status(self) -> None:
        if not self.live:
            return
        jobs = ", ".join(f"{t} {state}" for (t, _, _), state in self.running.items())
        self.out.write(f"\r\033[K{self.tally()} · {jobs}"[:200])
        self.out.flush()


def check_endpoints(models: Sequence[str]) -> None:
    """openai: SPECs are checked before any job runs, and their keys read (and so taken out of the
    environment that Bash and the tests would inherit). A bad one is a one-line ModelError."""
    for model in models:
        backend_for(model).prepare(model)


def check_specs(models: Sequence[str], task_ids: Sequence[str]) -> str | None:
    """Every model SPEC for every task (`{task}` replaced), checked as `ribbit doctor` checks a SPEC, before
    the first job starts: the first problem and how many more there are, as one line; None when all pass."""
    from models.backends import backend_for, resolve_spec

    problems: list[str] = []
    for model in models:
        for spec in dict.fromkeys(resolve_spec(model.replace("{task}", t)) for t in task_ids or [""]):
            check = backend_for(spec).spec_check(spec, "")
            if not check.ok:
                problems.append(f"--model {model}: {check.detail}")
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""
    return problems[0] + more


SHELL_WORDS = {"cd", "exit", "export", "set", "source", ".", "test", "[", "echo", "true", "false", "eval", "exec",
               "(", "{", "if", "for", "while", "!"}


def missing_programs(commands: Sequence[str]) -> str | None:
    """The programs the tasks' test commands start that are not on PATH (a fresh Debian or Ubuntu has
    `python3` and no `python`): one line, before any job runs, instead of every job's tests "not run"."""
    import shlex
    import shutil

    missing: dict[str, str] = {}
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            continue  # the shell will say what is wrong with it, in the job's test log
        words = [w for w in words if not (("=" in w) and w.split("=", 1)[0].isidentifier())] or [""]
        program = words[0]
        if program and program not in SHELL_WORDS and "/" not in program and "{" not in program \
                and shutil.which(program) is None:
            missing.setdefault(program, command)
    if not missing:
        return None
    names = ", ".join(f"`{p}`" for p in missing)
    return (f"the tasks' test commands need {names}, which {'is' if len(missing) == 1 else 'are'} not on PATH "
            f"(e.g. {next(iter(missing.values()))}); run ribbit eval where they are (a virtual environment "
            "with the tasks' test tools, active)")


def demo_note(models: Sequence[str]) -> str | None:
    """A line when a candidate is the embedded demo model, which never uses the tools (it resolves nothing)."""
    from models.embedded import EMBEDDED_NAME, is_embedded
    from models.backends import DEFAULT_SPECS, resolve_spec

    demo = [m for m in models if resolve_spec(m) in DEFAULT_SPECS or is_embedded(resolve_spec(m))]
    if not demo:
        return None
    return (f"ribbit eval: note: {', '.join(demo)} is the embedded {EMBEDDED_NAME}, a demo model that does not use "
            "the tools: expect it to resolve nothing (it is a baseline, not a candidate)")


def eval_main(argv: list[str]) -> int:
    args = eval_parser().parse_args(list(argv))
    models = [m.strip() or "default" for m in args.model]
    if len(set(models)) != len(models):
        print("ribbit eval: error: the same --model is given twice", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(
            Path(args.tasks), repos_dir=Path(args.repos).expanduser() if args.repos else None, test_command=args.test_cmd,
        )
        tasks = select(tasks, args.task)
        if args.first is not None:
            tasks = tasks[: args.first]
    except TaskFileError as exc:
        print(f"ribbit eval: error: {exc}", file=sys.stderr)
        return 1
    try:
        check_endpoints(models)
    except ModelError as exc:
        print(f"ribbit eval: error: {exc}", file=sys.stderr)
        return 2
    problem = check_specs(models, [t.id for t in tasks]) or missing_programs(
        [c for t in tasks for c in t.test_commands])
    if problem is not None:
        print(f"ribbit eval: error: {visible(problem, one_line=True)}; nothing was run", file=sys.stderr)
        return 1
    if note := demo_note(models):
        print(note, file=sys.stderr)
    out = Path(args.out).expanduser().resolve()
    config = EvalConfig(
        out=out,
        limits=Limits(max_steps=args.max_steps, context=args.context, turn_tokens=args.max_turn_tokens),
        jobs=args.jobs or default_jobs(models), time_limit_s=args.time_limit, test_timeout_s=args.test_timeout,
        no_sandbox=args.no_sandbox, keep_worktrees=args.keep_worktrees, retry_errors=args.retry_errors,
        samples=args.samples,
    )
    samples = f" × {args.samples} samples" if args.samples > 1 else ""
    print(
        f"ribbit eval: {len(tasks)} tasks × {len(models)} models{samples}, {config.jobs} at a time, results in {out}",
        file=sys.stderr,
    )
    run = EvalRun(tasks, models, config, progress=EvalProgressDisplay(sys.stderr, models, config.jobs))
    try:
        outcome = run.run()
    except OSError as exc:
        print(f"ribbit eval: error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if outcome.interrupted:
        print(f"\nribbit eval: interrupted; finished jobs are saved in {out} — run the same command to resume",
              file=sys.stderr)
        return 130
    sys.stdout.write(redact(markdown_report(outcome.results, models, [t.id for t in tasks], args.samples)))
    print(f"ribbit eval: report in {out / 'report.md'}, SWE-bench predictions (one file per model) in "
          f"{out / 'predictions'}", file=sys.stderr)
    return 0
