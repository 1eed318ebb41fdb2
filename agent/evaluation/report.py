"""Results of evaluation jobs, and what is made of them: resolved rates, the paired comparison of models,
Markdown / JSON reports, and one SWE-bench predictions file per model (and sample).

Everything written goes through `write_atomic`, which also takes any API key out (models.api_keys).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.evaluation.compare import Comparison, compare
from models.api_keys import redact
from models.backends import backend_for

Outcome = Literal["resolved", "tests_fail", "patch_does_not_apply", "no_patch", "error", "limit"]
OUTCOMES: tuple[Outcome, ...] = ("resolved", "tests_fail", "patch_does_not_apply", "no_patch", "error", "limit")
OUTCOME_LABELS: dict[str, str] = {
    "resolved": "resolved", "tests_fail": "tests fail", "patch_does_not_apply": "patch does not apply",
    "no_patch": "no patch", "error": "error", "limit": "limit",
}


class CommandOutcome(BaseModel):
    command: str
    exit_code: int | None
    timed_out: bool = False


class JobResult(BaseModel):
    """One (task, model, sample) job, as saved in results/MODEL/TASK[@SAMPLE].json; never redone once saved."""

    task_id: str
    model: str  # the SPEC as given on the command line
    sample: int = 1  # 1..N with --samples N
    outcome: Outcome
    message: str = ""
    stop_reason: str | None = None  # the agent's, when it ran
    steps: int = 0
    # Tokens: the largest context the conversation reached, prompt tokens actually evaluated, generated.
    peak_context: int = 0
    evaluated_tokens: int = 0
    completion_tokens: int = 0
    # What the server said the job's turns cost (hosted endpoints that report it); None when none did.
    cost: float | None = None
    agent_s: float = 0.0
    tests_s: float = 0.0
    wall_s: float = 0.0
    patch: str = ""
    # Test files the agent's patch changed, put back to the base commit before grading.
    tests_put_back: list[str] = Field(default_factory=list)
    # Files the agent changed that run code on the user's machine later (agent.undo.runs_later).
    runs_later: list[str] = Field(default_factory=list)
    fail_to_pass: dict[str, str] = Field(default_factory=dict)
    pass_to_pass: dict[str, str] = Field(default_factory=dict)
    commands: list[CommandOutcome] = Field(default_factory=list)
    task_hash: str = ""


class ModelSummary(BaseModel):
    model: str
    label: str
    tasks: int  # tasks with at least one finished job
    jobs: int
    samples: int
    resolved: int  # resolved jobs
    resolved_rate: float  # resolved / jobs: pass@1, the mean over samples
    # pass@1 of each complete sample (all tasks done): spread of the resolved rate between samples.
    sample_rates: list[float]
    pass_at_1_sd: float | None
    outcomes: dict[str, int]
    steps: int
    completion_tokens: int
    evaluated_tokens: int
    cost: float | None
    wall_s: float
    # Per resolved job: what a solved task costs (None when nothing was resolved).
    tokens_per_resolved: float | None
    completion_per_resolved: float | None
    wall_per_resolved: float | None
    cost_per_resolved: float | None


class EvalReport(BaseModel):
    models: list[ModelSummary]
    comparisons: list[Comparison]
    tasks: list[str]
    samples: int


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(redact(text), encoding="utf-8")
    os.replace(tmp, path)


def model_key(spec: str) -> str:
    """A folder / file name for a model SPEC: readable, and distinct for distinct SPECs."""
    source = backend_for(spec).key(spec)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", source).strip("._")[-48:] or "model"
    return f"{readable}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def short_label(spec: str) -> str:
    """What a reader calls the model: the served model's name, a GGUF's file name, a replay's files."""
    return backend_for(spec).label(spec)


def model_labels(models: Sequence[str]) -> dict[str, str]:
    """Short labels, unique within the run (a clash falls back to the folder key)."""
    labels = {m: short_label(m) for m in models}
    clashes = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {m: (model_key(m) if label in clashes else label) for m, label in labels.items()}


def summarise(results: Sequence[JobResult], models: Sequence[str], samples: int = 1,
              task_count: int | None = None) -> list[ModelSummary]:
    labels = model_labels(models)
    summaries = []
    for model in models:
        mine = [r for r in results if r.model == model]
        resolved = [r for r in mine if r.outcome == "resolved"]
        rates = []
        for sample in range(1, samples + 1):
            runs = [r for r in mine if r.sample == sample]
            if runs and (task_count is None or len(runs) == task_count):
                rates.append(round(sum(r.outcome == "resolved" for r in runs) / len(runs), 4))
        costs = [r.cost for r in mine if r.cost is not None]
        cost = round(sum(costs), 6) if costs else None
        n = len(resolved)
        tokens = sum(r.evaluated_tokens + r.completion_tokens for r in mine)
        completion = sum(r.completion_tokens for r in mine)
        wall = sum(r.wall_s for r in mine)
        summaries.append(
            ModelSummary(
                model=model, label=labels[model], tasks=len({r.task_id for r in mine}), jobs=len(mine),
                samples=samples, resolved=n, resolved_rate=round(n / len(mine), 4) if mine else 0.0,
                sample_rates=rates, pass_at_1_sd=round(statistics.stdev(rates), 4) if len(rates) > 1 else None,
                outcomes={o: sum(r.outcome == o for r in mine) for o in OUTCOMES},
                steps=sum(r.steps for r in mine), completion_tokens=completion,
                evaluated_tokens=sum(r.evaluated_tokens for r in mine), cost=cost, wall_s=round(wall, 1),
                tokens_per_resolved=round(tokens / n, 1) if n else None,
                completion_per_resolved=round(completion / n, 1) if n else None,
                wall_per_resolved=round(wall / n, 1) if n else None,
                cost_per_resolved=round(cost / n, 6) if n and cost is not None else None,
            )
        )
    return summaries


def task_rates(results: Sequence[JobResult], model: str, task_ids: Sequence[str], samples: int) -> dict[str, float]:
    """Task -> fraction of its samples the model resolved, for tasks with every sample finished."""
    rates = {}
    for task_id in task_ids:
        runs = [r for r in results if r.model == model and r.task_id == task_id]
        if len({r.sample for r in runs}) >= samples:
            rates[task_id] = sum(r.outcome == "resolved" for r in runs) / len(runs)
    return rates


def comparisons(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str],
                samples: int = 1) -> list[Comparison]:
    """Every pair of models, on the tasks both finished."""
    labels = model_labels(models)
    rates = {m: task_rates(results, m, task_ids, samples) for m in models}
    out = []
    for a, b in combinations(models, 2):
        common = [t for t in task_ids if t in rates[a] and t in rates[b]]
        out.append(compare(labels[a], labels[b], [rates[a][t] for t in common], [rates[b][t] for t in common], samples))
    return out


def build_report(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str],
                 samples: int = 1) -> EvalReport:
    return EvalReport(
        models=summarise(results, models, samples, len(task_ids)),
        comparisons=comparisons(results, models, task_ids, samples), tasks=list(task_ids), samples=samples,
    )


def markdown_report(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str],
                    samples: int = 1) -> str:
    report = build_report(results, models, task_ids, samples)
    labels = model_labels(models)
    runs = f" × {samples} samples" if samples > 1 else ""
    lines = ["# ribbit eval", "", f"{len(task_ids)} tasks × {len(models)} models{runs}.", ""]
    rate_head = "pass@1 (mean ± sd over samples)" if samples > 1 else "resolved"
    lines += [f"| model | {rate_head} | " + " | ".join(OUTCOME_LABELS[o] for o in OUTCOMES[1:])
              + " | steps | tokens in / out | cost | wall |",
              "|---|---|" + "---|" * (len(OUTCOMES) - 1) + "---|---|---|---|"]
    for s in report.models:
        others = " | ".join(str(s.outcomes[o]) for o in OUTCOMES[1:])
        rate = f"{s.resolved}/{s.jobs} ({s.resolved_rate:.1%})"
        if samples > 1 and s.sample_rates:
            spread = f" ± {s.pass_at_1_sd:.1%}" if s.pass_at_1_sd is not None else ""
            rate = (f"{s.resolved_rate:.1%}{spread} (samples {min(s.sample_rates):.0%}–{max(s.sample_rates):.0%}; "
                    f"{s.resolved}/{s.jobs} runs)")
        lines.append(
            f"| {_cell(s.label)} | {rate} | {others} | {s.steps} | "
            f"{_tokens(s.evaluated_tokens)} / {_tokens(s.completion_tokens)} | {_money(s.cost)} | {_duration(s.wall_s)} |"
        )
    if len(models) > 1:
        lines += ["", "## Comparison", ""]
        for c in report.comparisons:
            lines.append(f"- {_cell(c.verdict)}")
        if samples == 1:
            lines += ["", "The interval is exact McNemar's, conditional on the tasks where the two disagree: "
                      "only those say which model is better."]
    lines += ["", "## What a resolved task costs", "",
              "| model | tokens per resolved task (all / generated) | wall per resolved task | cost per resolved task |",
              "|---|---|---|---|"]
    for s in report.models:
        per = (f"{_tokens(s.tokens_per_resolved)} / {_tokens(s.completion_per_resolved)}"
               if s.tokens_per_resolved is not None else "—")
        lines.append(f"| {_cell(s.label)} | {per} | {_duration(s.wall_per_resolved)} | {_money(s.cost_per_resolved)} |")
    lines += ["", "## Per task, side by side", "", "| task | " + " | ".join(_cell(labels[m]) for m in models) + " |",
              "|---|" + "---|" * len(models)]
    by_key = {(r.task_id, r.model, r.sample): r for r in results}
    for task_id in task_ids:
        cells = []
        for model in models:
            task_runs = [by_key[(task_id, model, s)] for s in range(1, samples + 1) if (task_id, model, s) in by_key]
            cells.append(_task_cell(task_runs, samples))
        lines.append(f"| {_cell(task_id)} | " + " | ".join(cells) + " |")
    several = samples > 1
    lines += ["", "## Jobs", "", "| task | model | " + ("sample | " if several else "")
              + "outcome | stop | steps | tokens in / out | wall | note |",
              "|---|---|---|---|---|---|---|---|" + ("---|" if several else "")]
    for task_id in task_ids:
        for model in models:
            for sample in range(1, samples + 1):
                head = f"| {_cell(task_id)} | {_cell(labels[model])} | " + (f"{sample} | " if several else "")
                r = by_key.get((task_id, model, sample))
                if r is None:
                    lines.append(head + "(not run) | | | | | |")
                    continue
                note = r.message
                if r.runs_later:
                    note = _join(note, "changed files that run code later: " + ", ".join(r.runs_later[:3])
                                 + (f" and {len(r.runs_later) - 3} more" if len(r.runs_later) > 3 else ""))
                if r.tests_put_back:
                    note = _join(note, "put back the agent's changes to " + ", ".join(r.tests_put_back[:3]))
                lines.append(
                    head + f"{OUTCOME_LABELS[r.outcome]} | {r.stop_reason or ''} | {r.steps} | "
                    f"{_tokens(r.evaluated_tokens)} / {_tokens(r.completion_tokens)} | {_duration(r.wall_s)} | "
                    f"{_cell(note)[:160]} |"
                )
    lines += ["", "Models: " + "; ".join(f"{_cell(labels[m])} = `{m}`" for m in models)]
    return "\n".join(lines) + "\n"


def json_report(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str], samples: int = 1) -> str:
    report = build_report(results, models, task_ids, samples)
    data = {**report.model_dump(), "results": [r.model_dump(exclude={"patch"}) for r in results]}
    return json.dumps(data, indent=2) + "\n"


def prediction_name(model: str, sample: int = 1) -> str:
    """`model_name_or_path` of a predictions file, also its file name: one per model and sample."""
    return model_key(model) + (f"@{sample}" if sample > 1 else "")


def predictions_files(results: Sequence[JobResult], models: Sequence[str], samples: int = 1) -> dict[str, str]:
    """File name -> SWE-bench predictions JSONL, one file per model (and sample).

    The official harness keys a file by instance_id (swebench 5.0.2 run_evaluation.py:
    `{pred["instance_id"]: pred for pred in predictions}`), so one file holds one patch per task.
    """
    files = {}
    for model in models:
        for sample in range(1, samples + 1):
            name = prediction_name(model, sample)
            mine = [r for r in results if r.model == model and r.sample == sample]
            files[f"{name}.jsonl"] = "".join(
                json.dumps({"instance_id": r.task_id, "model_name_or_path": name, "model_patch": r.patch}) + "\n"
                for r in mine
            )
    return files


def _task_cell(runs: Sequence[JobResult], samples: int) -> str:
    if not runs:
        return "—"
    if samples == 1:
        return OUTCOME_LABELS[runs[0].outcome]
    done = sum(r.outcome == "resolved" for r in runs)
    pending = f" ({samples - len(runs)} to run)" if len(runs) < samples else ""
    return f"{done}/{len(runs)} resolved{pending}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _tokens(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1000:.1f}k" if n >= 1000 else f"{n:.0f}"


def _money(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.4f}" if value < 1 else f"{value:.2f}"


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else short_duration(seconds)


def short_duration(seconds: float, decimals: int = 1) -> str:
    """`1h05m`, `2m07s`, or under a minute the seconds with `decimals` places: the report's and the ETA's."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.{decimals}f}s"
