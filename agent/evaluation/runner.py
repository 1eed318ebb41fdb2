"""Evaluation jobs: for each (task, model), the agent in full-auto on a fresh worktree, then its one
candidate patch applied to a clean worktree with the hidden tests, and the test commands run.

A finished job is saved to results/MODEL/TASK.json at once; a later run over the same output folder
skips it (resumable). An interrupted job saves nothing and is redone next time.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from agent.approvals import RejectAll
from agent.evaluation.repos import (
    GitError, add_worktree, apply_patch, copy_over, prepare_cache, remove_worktree, restore_from_base,
)
from agent.evaluation.report import (
    CommandOutcome, JobResult, Outcome, json_report, markdown_report, predictions_jsonl, write_atomic,
)
from agent.evaluation.tasks import DEFAULT_TIME_LIMIT_S, EvalTask
from agent.evaluation.testlog import parse_test_log, status_of
from agent.events import AgentEvent, SummaryEvent, TurnStarted, UsageEvent
from agent.journal import JournalError
from agent.loop import AgentSession, Limits
from agent.sandbox import make_runner
from agent.transcript import TranscriptWriter, fanout
from agent.workspace import SetupError, open_workspace
from models.base import ChatModel, ModelError

LIMIT_STOPS = frozenset({"max_steps", "context", "turn_tokens"})
TEST_OUTPUT_LIMIT = 200_000  # characters of test output kept in the log file per command

ModelLoader = Callable[[str, Limits], ChatModel]


def default_loader(spec: str, limits: Limits) -> ChatModel:
    from models.spec import load_model

    return load_model(spec, context=limits.context)


def model_spec_for(spec: str, task: EvalTask) -> str:
    """`{task}` in a SPEC is the task id: `replay:answers/{task}.jsonl` gives each task its own replay."""
    return spec.replace("{task}", task.id)


def model_key(spec: str) -> str:
    """A folder name for a model SPEC: readable, and distinct for distinct SPECs."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", spec.rsplit("/", 1)[-1] or spec).strip("._")[-48:] or "model"
    return f"{readable}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def task_hash(task: EvalTask, limits: Limits) -> str:
    """Changes when the task or the limits do, so a stale saved result is not reused."""
    text = task.model_dump_json(exclude={"source"}) + limits.model_dump_json()
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

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, UsageEvent):
            self.peak_context = max(self.peak_context, event.prompt_tokens + event.completion_tokens)
            self.evaluated += event.evaluated_tokens
            self.completion += event.completion_tokens
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
        self._results: dict[tuple[str, str], JobResult] = {}

    # -- paths ----------------------------------------------------------------------------------

    def result_path(self, task: EvalTask, model: str) -> Path:
        return self.config.out / "results" / model_key(model) / f"{task.id}.json"

    def saved_result(self, task: EvalTask, model: str) -> JobResult | None:
        path = self.result_path(task, model)
        if not path.is_file():
            return None
        try:
            result = JobResult.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            return None  # a damaged result is redone
        if result.task_hash != task_hash(task, self.config.limits) or result.model != model:
            return None
        if result.outcome == "error" and self.config.retry_errors:
            return None
        return result

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        jobs = [(task, model) for task in self.tasks for model in self.models]
        total = len(jobs)
        todo: list[tuple[int, EvalTask, str]] = []
        for index, (task, model) in enumerate(jobs, start=1):
            saved = self.saved_result(task, model)
            if saved is not None:
                self._results[(task.id, model)] = saved
                self.progress(EvalProgress("skip", task.id, model, index, total, result=saved))
            else:
                todo.append((index, task, model))
        self.write_reports()
        interrupted = False
        ran = 0
        with ThreadPoolExecutor(max_workers=max(1, self.config.jobs), thread_name_prefix="ribbit-eval") as pool:
            pending: set[Future[JobResult | None]] = {
                pool.submit(self._job, index, total, task, model) for index, task, model in todo
            }
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
        order = {(t.id, m): i for i, (t, m) in enumerate((t, m) for t in self.tasks for m in self.models)}
        return sorted(self._results.values(), key=lambda r: order.get((r.task_id, r.model), 0))

    def write_reports(self) -> None:
        out = self.config.out
        results = self.results()
        ids = [t.id for t in self.tasks]
        with self._lock:
            write_atomic(out / "report.md", markdown_report(results, self.models, ids))
            write_atomic(out / "report.json", json_report(results, self.models, ids))
            write_atomic(out / "predictions.jsonl", predictions_jsonl(results))

    # -- one job --------------------------------------------------------------------------------

    def _job(self, index: int, total: int, task: EvalTask, model: str) -> JobResult | None:
        if self.stopping.is_set():
            return None
        self.progress(EvalProgress("start", task.id, model, index, total))
        try:
            result = self.run_job(task, model, lambda **kw: self.progress(EvalProgress(task_id=task.id, model=model, index=index, total=total, **kw)))
        except Exception as exc:  # a bug or an unexpected failure: the job is an error, the run goes on
            result = JobResult(task_id=task.id, model=model, outcome="error", message=f"internal error: {exc!r}"[:300],
                               task_hash=task_hash(task, self.config.limits))
        if result is None:
            return None
        write_atomic(self.result_path(task, model), result.model_dump_json(indent=2))
        with self._lock:
            self._results[(task.id, model)] = result
        self.write_reports()
        self.progress(EvalProgress("done", task.id, model, index, total, result=result))
        return result

    def run_job(self, task: EvalTask, model: str, report: Callable[..., None]) -> JobResult | None:
        started = time.monotonic()
        config = self.config
        key = model_key(model)
        work = config.out / "work" / key / task.id
        base_result = dict(task_id=task.id, model=model, task_hash=task_hash(task, config.limits))

        def failed(message: str, **extra: object) -> JobResult:
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
            agent = self._run_agent(task, model, agent_root, report)
        finally:
            if not config.keep_worktrees:
                remove_worktree(cache, agent_root)
        if agent is None:
            return None  # interrupted: nothing saved, redone next time
        if agent.error:
            return failed(agent.error, steps=agent.steps, agent_s=agent.seconds)

        common = dict(
            stop_reason=agent.stop_reason, steps=agent.steps, peak_context=agent.usage.peak_context,
            evaluated_tokens=agent.usage.evaluated, completion_tokens=agent.usage.completion,
            agent_s=round(agent.seconds, 2), patch=agent.patch,
        )
        limit_hit = agent.timed_out or agent.stop_reason in LIMIT_STOPS
        stop_note = agent.message if agent.stop_reason != "finished" else ""

        def finish(outcome: Outcome, message: str, **extra: object) -> JobResult:
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
        work = self.config.out / "work" / model_key(model) / task.id

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
        self, task: EvalTask, model_spec: str, root: Path, report: Callable[..., None]
    ) -> AgentRun | None:
        config = self.config
        started = time.monotonic()
        usage = UsageTotals(on_step=lambda step: report(kind="step", step=step))
        try:
            model = self.loader(model_spec_for(model_spec, task), config.limits)
        except ModelError as exc:
            return AgentRun(error=f"cannot load the model: {exc}", usage=usage)
        transcript = TranscriptWriter(config.out / "transcripts" / model_key(model_spec) / f"{task.id}.jsonl")
        timer: threading.Timer | None = None
        workspace = None
        timed_out = threading.Event()
        session: AgentSession | None = None
        try:
            workspace = open_workspace(
                model, root, mode="full-auto", approver=RejectAll(), sink=fanout([usage, transcript]),
                limits=config.limits, no_sandbox=config.no_sandbox, watch=False,
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
        )

    def _run_tests(
        self, task: EvalTask, base: str, root: Path, patch: str, work: Path, finish: Callable[..., JobResult]
    ) -> JobResult | None:
        started = time.monotonic()
        why = apply_patch(root, patch)
        if why is not None:
            return finish("patch_does_not_apply", why)
        try:
            if task.test_patch.strip():
                # As the SWE-bench harness does: the hidden tests replace whatever the model did to those files.
                restore_from_base(root, base, task.test_patch_files())
                why = apply_patch(root, task.test_patch)
                if why is not None:  # the task's fault, not the model's
                    return finish("error", f"the task's test patch does not apply: {why}").model_copy(
                        update={"outcome": "error"}
                    )
            if task.hidden_tests is not None:
                copy_over(task.hidden_tests, root)
        except (GitError, OSError) as exc:
            return finish("error", f"cannot install the hidden tests: {exc}")
        runner = make_runner(root, want_sandbox=not self.config.no_sandbox)
        # The interpreter ribbit runs on comes first; a fresh TMPDIR keeps runs from sharing temp state.
        prefix = (
            f'export PATH={_quote(str(Path(sys.executable).parent))}:"$PATH" PYTHONDONTWRITEBYTECODE=1\n'
            'export TMPDIR="$(mktemp -d)"\n'
        )
        commands: list[CommandOutcome] = []
        logs: list[str] = []
        try:
            for command in task.test_commands:
                # Stopping the run stops the tests too; the job then saves nothing.
                result = runner.run(prefix + command, root, self.config.test_timeout_s, self.stopping)
                if result.cancelled:
                    return None
                commands.append(CommandOutcome(command=command, exit_code=result.exit_code, timed_out=result.timed_out))
                logs.append(f"$ {command}\n{result.output[-TEST_OUTPUT_LIMIT:]}\n(exit {result.exit_code})\n")
        finally:
            close = getattr(runner, "close", None)
            if callable(close):
                close()
        try:
            write_atomic(work.parent / f"{task.id}.tests.log", "\n".join(logs))
        except OSError:
            pass
        statuses = parse_test_log("\n".join(logs))
        f2p = {name: status_of(name, statuses) for name in task.fail_to_pass}
        p2p = {name: status_of(name, statuses) for name in task.pass_to_pass}
        extra = dict(fail_to_pass=f2p, pass_to_pass=p2p, commands=commands, tests_s=round(time.monotonic() - started, 2))
        if f2p or p2p:
            bad_f2p = [n for n, s in f2p.items() if s != "passed"]
            bad_p2p = [n for n, s in p2p.items() if s != "passed"]
            if not bad_f2p and not bad_p2p:
                return finish("resolved", "", **extra)
            parts = []
            if bad_f2p:
                parts.append(f"{len(bad_f2p)}/{len(f2p)} fail-to-pass tests still fail ({bad_f2p[0]})")
            if bad_p2p:
                parts.append(f"{len(bad_p2p)}/{len(p2p)} pass-to-pass tests broke ({bad_p2p[0]})")
            return finish("tests_fail", "; ".join(parts), **extra)
        failing = [c for c in commands if c.exit_code != 0]
        if not failing:
            return finish("resolved", "", **extra)
        first = failing[0]
        state = "timed out" if first.timed_out else f"exit {first.exit_code}"
        return finish("tests_fail", f"{first.command}: {state}", **extra)


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


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
