"""Evaluation jobs: for each (task, model, sample), the agent in full-auto on a fresh worktree, then its one
candidate patch applied to a clean worktree — test files it changed put back, the hidden tests added —
and the test commands run; named tests the commands did not reach are run on their own.

A finished job is saved to results/MODEL/TASK[@SAMPLE].json at once; a later run over the same output
folder skips it (resumable). An interrupted job saves nothing and is redone next time.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from agent.core.approvals import RejectAll
from agent.evaluation.repos import (
    GitError,
    LinkInTheWay,
    add_worktree,
    apply_patch,
    copy_over,
    prepare_cache,
    remove_worktree,
    restore_from_base,
)
from agent.evaluation.grading import files_to_put_back, followup_commands, verdict
from agent.evaluation.report import (
    CommandOutcome,
    JobResult,
    Outcome,
    json_report,
    markdown_report,
    model_key,
    predictions_files,
    write_atomic,
)
from agent.evaluation.tasks import DEFAULT_TIME_LIMIT_S, EvalTask
from agent.evaluation.testlog import TestStatus, parse_test_log, status_of
from agent.core.events import AgentEvent, SummaryEvent, TurnStarted, UsageEvent
from agent.undo.journal import JournalError
from agent.core.loop import AgentSession, Limits
from agent.sandbox.runner import make_runner
from agent.sandbox.config import SandboxConfigError, load_settings
from agent.session.transcript import TranscriptWriter, fanout
from agent.session.workspace import SetupError, open_workspace
from models.base import ChatModel, ModelError

LIMIT_STOPS = frozenset({"max_steps", "context", "turn_tokens"})
TEST_OUTPUT_LIMIT = 200_000  # characters of test output kept in the log file per command

# (SPEC, limits, seed): the seed is None for the first sample, so one-sample runs sample as `ribbit run` does.
ModelLoader = Callable[[str, Limits, int | None], ChatModel]


def default_loader(spec: str, limits: Limits, seed: int | None = None) -> ChatModel:
    from models.backends import load_model

    return load_model(spec, context=limits.context, seed=seed)


def model_spec_for(spec: str, task: EvalTask) -> str:
    """`{task}` in a SPEC is the task id: `replay:answers/{task}.jsonl` gives each task its own replay."""
    return spec.replace("{task}", task.id)


def job_name(task: EvalTask, sample: int) -> str:
    """File stem of a job's result, transcript and work folder: the task id, `@N` from the second sample on
    (`@` cannot occur in a task id)."""
    return task.id if sample == 1 else f"{task.id}@{sample}"


def seed_for(sample: int) -> int | None:
    return None if sample == 1 else sample - 1


# Bumped when grading changes what a saved result would say, so results graded the old way are redone
# (2: named tests run wherever they live; test files the agent changed are put back).
GRADING_VERSION = 2


def task_hash(task: EvalTask, limits: Limits) -> str:
    """Changes when the task, the limits or the grading do, so a stale saved result is not reused."""
    text = task.model_dump_json(exclude={"source"}) + limits.model_dump_json() + f"grading {GRADING_VERSION}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class EvalConfig:
    out: Path
    limits: Limits = field(default_factory=Limits)
    jobs: int = 1
    time_limit_s: float | None = None  # overrides each task's own limit
    test_timeout_s: float = 600.0
    no_sandbox: bool = False
    keep_worktrees: bool = False
    retry_errors: bool = False
    samples: int = 1  # runs of each task per model (pass@1 mean and spread)


@dataclass
class EvalProgress:
    kind: Literal["skip", "start", "phase", "step", "done"]
    task_id: str
    model: str
    index: int  # 1-based position of the job in the run
    total: int
    phase: str = ""
    step: int = 0
    result: JobResult | None = None
    sample: int = 1


@dataclass(frozen=True)
class Job:
    task: EvalTask
    model: str
    sample: int = 1


@dataclass
class RunOutcome:
    results: list[JobResult]
    interrupted: bool
    ran: int  # jobs run now (not reused from an earlier run)


class UsageTotals:
    """Collects what the report needs from the agent's events."""

    def __init__(self, on_step: Callable[[int], None]) -> None:
        self.on_step = on_step
        self.peak_context = 0
        self.evaluated = 0
        self.completion = 0
        self.cost: float | None = None  # summed where the server reports it

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, UsageEvent):
            self.peak_context = max(self.peak_context, event.prompt_tokens + event.completion_tokens)
            self.evaluated += event.evaluated_tokens
            self.completion += event.completion_tokens
            if event.cost is not None:
                self.cost = round((self.cost or 0.0) + event.cost, 6)
        elif isinstance(event, TurnStarted):
            self.on_step(event.step)


class EvalRun:
    def __init__(
        self,
        tasks: Sequence[EvalTask],
        models: Sequence[str],
        config: EvalConfig,
        *,
        progress: Callable[[EvalProgress], None] = lambda p: None,
        loader: ModelLoader = default_loader,
    ) -> None:
        self.tasks = list(tasks)
        self.models = list(models)
        self.config = config
        self.progress = progress
        self.loader = loader
        self.stopping = threading.Event()
        self._sessions: set[AgentSession] = set()
        self._lock = threading.Lock()
        self._results: dict[tuple[str, str, int], JobResult] = {}

    # -- paths ----------------------------------------------------------------------------------

    def result_path(self, task: EvalTask, model: str, sample: int = 1) -> Path:
        return self.config.out / "results" / model_key(model) / f"{job_name(task, sample)}.json"

    def saved_result(self, task: EvalTask, model: str, sample: int = 1) -> JobResult | None:
        path = self.result_path(task, model, sample)
        if not path.is_file():
            return None
        try:
            result = JobResult.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            return None  # a damaged result is redone
        if result.task_hash != task_hash(task, self.config.limits) or result.model != model or result.sample != sample:
            return None
        if result.outcome == "error" and self.config.retry_errors:
            return None
        return result

    def jobs(self) -> list[Job]:
        """Every job, the first sample of every task first (so a comparison is complete early)."""
        return [
            Job(task, model, sample)
            for sample in range(1, max(1, self.config.samples) + 1) for task in self.tasks for model in self.models
        ]

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        jobs = self.jobs()
        total = len(jobs)
        todo: list[tuple[int, Job]] = []
        for index, job in enumerate(jobs, start=1):
            saved = self.saved_result(job.task, job.model, job.sample)
            if saved is not None:
                self._results[(job.task.id, job.model, job.sample)] = saved
                self.progress(EvalProgress("skip", job.task.id, job.model, index, total, result=saved, sample=job.sample))
            else:
                todo.append((index, job))
        self.write_reports()
        interrupted = False
        ran = 0
        with ThreadPoolExecutor(max_workers=max(1, self.config.jobs), thread_name_prefix="ribbit-eval") as pool:
            pending: set[Future[JobResult | None]] = {pool.submit(self._job, index, total, job) for index, job in todo}
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    ran += sum(1 for f in done if f.result() is not None)
            except KeyboardInterrupt:
                interrupted = True
                self.stop()
                for future in pending:
                    future.cancel()
                wait(pending)
        interrupted = interrupted or self.stopping.is_set()
        self.write_reports()
        return RunOutcome(results=self.results(), interrupted=interrupted, ran=ran)

    def stop(self) -> None:
        """Stop every running job as soon as possible (any thread); stopped jobs save nothing."""
        self.stopping.set()
        with self._lock:
            for session in self._sessions:
                session.cancel()

    def results(self) -> list[JobResult]:
        """Finished jobs, by task, then model, then sample."""
        task_pos = {t.id: i for i, t in enumerate(self.tasks)}
        model_pos = {m: i for i, m in enumerate(self.models)}
        return sorted(self._results.values(),
                      key=lambda r: (task_pos.get(r.task_id, 0), model_pos.get(r.model, 0), r.sample))

    def write_reports(self) -> None:
        out = self.config.out
        samples = max(1, self.config.samples)
        ids = [t.id for t in self.tasks]
        with self._lock:
            results = self.results()
            write_atomic(out / "report.md", markdown_report(results, self.models, ids, samples))
            write_atomic(out / "report.json", json_report(results, self.models, ids, samples))
            for name, text in predictions_files(results, self.models, samples).items():
                write_atomic(out / "predictions" / name, text)

    # -- one job --------------------------------------------------------------------------------

    def _job(self, index: int, total: int, job: Job) -> JobResult | None:
        task, model, sample = job.task, job.model, job.sample
        if self.stopping.is_set():
            return None
        self.progress(EvalProgress("start", task.id, model, index, total, sample=sample))

        def report(**kw: object) -> None:
            self.progress(EvalProgress(task_id=task.id, model=model, index=index, total=total, sample=sample, **kw))  # type: ignore[arg-type]

        try:
            result = self.run_job(task, model, report, sample)
        except Exception as exc:  # a bug or an unexpected failure: the job is an error, the run goes on
            result = JobResult(task_id=task.id, model=model, sample=sample, outcome="error",
                               message=f"internal error: {exc!r}"[:300], task_hash=task_hash(task, self.config.limits))
        if result is None:
            return None
        write_atomic(self.result_path(task, model, sample), result.model_dump_json(indent=2))
        with self._lock:
            self._results[(task.id, model, sample)] = result
        self.write_reports()
        self.progress(EvalProgress("done", task.id, model, index, total, result=result, sample=sample))
        return result

    def run_job(self, task: EvalTask, model: str, report: Callable[..., None], sample: int = 1) -> JobResult | None:
        started = time.monotonic()
        config = self.config
        key = model_key(model)
        work = config.out / "work" / key / job_name(task, sample)
        base_result: dict[str, Any] = dict(task_id=task.id, model=model, sample=sample, task_hash=task_hash(task, config.limits))

        def failed(message: str, **extra: Any) -> JobResult:
            return JobResult(**base_result, outcome="error", message=message,  # type: ignore[arg-type]
                             wall_s=round(time.monotonic() - started, 2), **extra)

        try:
            cache, base = prepare_cache(task, config.out / "repos")
        except (GitError, OSError) as exc:
            return failed(f"cannot prepare the repository: {exc}")

        # Phase 1: the agent, in full-auto, on a fresh worktree at the base commit.
        report(kind="phase", phase="agent")
        agent_root = work / "agent"
        try:
            add_worktree(cache, agent_root, base)
        except (GitError, OSError) as exc:
            return failed(f"cannot make the agent's worktree: {exc}")
        try:
            agent = self._run_agent(task, model, agent_root, report, sample)
        finally:
            if not config.keep_worktrees:
                remove_worktree(cache, agent_root)
        if agent is None:
            return None  # interrupted: nothing saved, redone next time
        if agent.error:
            return failed(agent.error, steps=agent.steps, agent_s=round(agent.seconds, 2), cost=agent.usage.cost,
                          evaluated_tokens=agent.usage.evaluated, completion_tokens=agent.usage.completion)

        common = dict(
            stop_reason=agent.stop_reason, steps=agent.steps, peak_context=agent.usage.peak_context,
            evaluated_tokens=agent.usage.evaluated, completion_tokens=agent.usage.completion, cost=agent.usage.cost,
            agent_s=round(agent.seconds, 2), patch=agent.patch, runs_later=agent.runs_later,
        )
        limit_hit = agent.timed_out or agent.stop_reason in LIMIT_STOPS
        stop_note = agent.message if agent.stop_reason != "finished" else ""

        def finish(outcome: Outcome, message: str, **extra: Any) -> JobResult:
            if outcome != "resolved":
                if limit_hit:
                    outcome, message = "limit", _join(stop_note, message)
                elif agent.stop_reason == "error":
                    outcome, message = "error", _join(stop_note, message)
            return JobResult(**base_result, outcome=outcome, message=message,  # type: ignore[arg-type]
                             wall_s=round(time.monotonic() - started, 2), **common, **extra)  # type: ignore[arg-type]

        if not agent.patch.strip():
            return finish("no_patch", "the agent changed nothing")

        # Phase 2: the candidate patch on a clean worktree, plus the hidden tests.
        report(kind="phase", phase="tests")
        eval_root = work / "eval"
        try:
            add_worktree(cache, eval_root, base)
        except (GitError, OSError) as exc:
            return failed(f"cannot make the test worktree: {exc}", **common)
        try:
            return self._run_tests(task, base, eval_root, agent.patch, work, finish)
        finally:
            if not config.keep_worktrees:
                remove_worktree(cache, eval_root)

    def score_patch(self, task: EvalTask, model: str, patch: str) -> JobResult | None:
        """Phase 2 alone: a given patch on a clean worktree with the hidden tests (None if stopped)."""
        started = time.monotonic()
        cache, base = prepare_cache(task, self.config.out / "repos")
        work = self.config.out / "work" / model_key(model) / job_name(task, 1)

        def finish(outcome: Outcome, message: str, **extra: object) -> JobResult:
            return JobResult(
                task_id=task.id, model=model, outcome=outcome, message=message, patch=patch,  # type: ignore[arg-type]
                task_hash=task_hash(task, self.config.limits), wall_s=round(time.monotonic() - started, 2), **extra,
            )

        if not patch.strip():
            return finish("no_patch", "the patch is empty")
        root = add_worktree(cache, work / "eval", base)
        try:
            return self._run_tests(task, base, root, patch, work, finish)
        finally:
            if not self.config.keep_worktrees:
                remove_worktree(cache, root)

    def _run_agent(
        self, task: EvalTask, model_spec: str, root: Path, report: Callable[..., None], sample: int = 1
    ) -> AgentRun | None:
        config = self.config
        started = time.monotonic()
        usage = UsageTotals(on_step=lambda step: report(kind="step", step=step))
        try:
            model = self.loader(model_spec_for(model_spec, task), config.limits, seed_for(sample))
        except ModelError as exc:
            return AgentRun(error=f"cannot load the model: {exc}", usage=usage)
        name = job_name(task, sample)
        transcript = TranscriptWriter(config.out / "transcripts" / model_key(model_spec) / f"{name}.jsonl")
        timer: threading.Timer | None = None
        workspace = None
        timed_out = threading.Event()
        session: AgentSession | None = None
        try:
            workspace = open_workspace(
                model, root, mode="full-auto", approver=RejectAll(), sink=fanout([usage, transcript]),
                limits=config.limits, no_sandbox=config.no_sandbox, watch=False,
                listed=config.keep_worktrees,  # a worktree that is removed needs no entry in the state folder
            )
            session = workspace.session
            with self._lock:
                self._sessions.add(session)
            if self.stopping.is_set():
                return None
            limit = config.time_limit_s or task.time_limit_s or DEFAULT_TIME_LIMIT_S

            def out_of_time() -> None:
                timed_out.set()
                session.cancel()  # type: ignore[union-attr]

            timer = threading.Timer(limit, out_of_time)
            timer.daemon = True
            timer.start()
            summary: SummaryEvent = session.run(task.problem_statement)
            timer.cancel()
            patch = workspace.patch()
            later = list(workspace.report.runs_later) if workspace.report is not None else []
        except (SetupError, JournalError, ModelError, OSError) as exc:
            return AgentRun(error=str(exc), usage=usage, seconds=time.monotonic() - started)
        finally:
            if timer is not None:
                timer.cancel()
            if session is not None:
                with self._lock:
                    self._sessions.discard(session)
            if workspace is not None:
                workspace.close()
            transcript.close()
            model.close()
        if summary.stop_reason == "interrupted" and not timed_out.is_set():
            return None
        message = summary.message or ""
        if timed_out.is_set():
            message = f"stopped at the time limit of {limit:g} s"
        return AgentRun(
            usage=usage, steps=summary.steps, stop_reason="time" if timed_out.is_set() else summary.stop_reason,
            message=message, patch=patch, timed_out=timed_out.is_set(), seconds=time.monotonic() - started,
            runs_later=later,
        )

    def _run_tests(
        self, task: EvalTask, base: str, root: Path, patch: str, work: Path, finish: Callable[..., JobResult]
    ) -> JobResult | None:
        started = time.monotonic()
        why = apply_patch(root, patch)
        if why is not None:
            return finish("patch_does_not_apply", why)
        put_back = files_to_put_back(patch, task)
        try:
            # Test files are the task's: whatever the agent did to them (and to conftest.py and the like)
            # is undone, then the hidden tests replace or join them, as the SWE-bench harness does.
            restore_from_base(root, base, put_back)
            if task.test_patch.strip():
                why = apply_patch(root, task.test_patch)
                if why is not None:  # the task's fault, not the model's
                    return finish("error", f"the task's test patch does not apply: {why}").model_copy(
                        update={"outcome": "error"}
                    )
            if task.hidden_tests is not None:
                copy_over(task.hidden_tests, root)
        except LinkInTheWay as exc:  # the patch's doing (a folder made a link): not resolved, nothing written there
            return finish("tests_fail", f"the hidden tests cannot be installed: {exc}", tests_put_back=put_back)
        except (GitError, OSError) as exc:
            return finish("error", f"cannot install the hidden tests: {exc}")
        try:  # the test phase honours the user's sandbox.toml like the agent's own commands
            settings = load_settings()
        except SandboxConfigError as exc:
            return finish("error", str(exc))
        runner = make_runner(root, want_sandbox=not self.config.no_sandbox, settings=settings)
        # The interpreter ribbit runs on comes first; a fresh TMPDIR keeps runs from sharing temp state.
        prefix = (
            f'export PATH={_quote(str(Path(sys.executable).parent))}:"$PATH" PYTHONDONTWRITEBYTECODE=1\n'
            'export TMPDIR="$(mktemp -d)"\n'
        )
        commands: list[CommandOutcome] = []
        logs: list[str] = []
        statuses: dict[str, TestStatus] = {}

        def run(command: str) -> bool:
            """Run one test command; False when the run was stopped (the job then saves nothing)."""
            result = runner.run(prefix + command, root, self.config.test_timeout_s, self.stopping)
            if result.cancelled:
                return False
            commands.append(CommandOutcome(command=command, exit_code=result.exit_code, timed_out=result.timed_out))
            output = result.output[-TEST_OUTPUT_LIMIT:]
            logs.append(f"$ {command}\n{output}\n(exit {result.exit_code})\n")
            for name, status in parse_test_log(output).items():
                if statuses.get(name) != "failed":
                    statuses[name] = status
            return True

        try:
            for command in task.test_commands:
                if not run(command):
                    return None
            named = [*task.fail_to_pass, *task.pass_to_pass]
            # Named tests the task's commands never reported (they live elsewhere): run them where they are.
            missing = [n for n in named if status_of(n, statuses) == "missing"]
            for command in followup_commands(missing, exists=lambda path: _inside(root, path)):
                if not run(command):
                    return None
        finally:
            runner.close()
        try:
            write_atomic(work.parent / f"{work.name}.tests.log", "\n".join(logs))
        except OSError:
            pass
        f2p = {name: status_of(name, statuses) for name in task.fail_to_pass}
        p2p = {name: status_of(name, statuses) for name in task.pass_to_pass}
        extra = dict(fail_to_pass=f2p, pass_to_pass=p2p, commands=commands, tests_put_back=put_back,
                     tests_s=round(time.monotonic() - started, 2))
        own = commands[: len(task.test_commands)]
        failing = next((c for c in own if c.exit_code != 0), None)
        failing_text = None
        if failing is not None:
            failing_text = f"{failing.command}: {'timed out' if failing.timed_out else f'exit {failing.exit_code}'}"
        resolved, why_not = verdict(f2p, p2p, failing_text)
        return finish("resolved" if resolved else "tests_fail", why_not, **extra)


@dataclass
class AgentRun:
    usage: UsageTotals
    error: str = ""
    steps: int = 0
    stop_reason: str | None = None
    message: str = ""
    patch: str = ""
    timed_out: bool = False
    seconds: float = 0.0
    runs_later: list[str] = field(default_factory=list)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _inside(root: Path, path: str) -> bool:
    """A file in the worktree (a test name is task input: it may not point outside)."""
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError):
        return False
    return target.is_file() and target.is_relative_to(root.resolve())


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
