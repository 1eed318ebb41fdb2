"""Results of evaluation jobs, and what is made of them: resolved rates, Markdown, JSON, predictions."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

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
    """One (task, model) job, as saved in results/MODEL/TASK.json; a saved result is never redone."""

    task_id: str
    model: str  # the SPEC as given on the command line
    outcome: Outcome
    message: str = ""
    stop_reason: str | None = None  # the agent's, when it ran
    steps: int = 0
    # Tokens: the largest context the conversation reached, prompt tokens actually evaluated, generated.
    peak_context: int = 0
    evaluated_tokens: int = 0
    completion_tokens: int = 0
    agent_s: float = 0.0
    tests_s: float = 0.0
    wall_s: float = 0.0
    patch: str = ""
    fail_to_pass: dict[str, str] = Field(default_factory=dict)
    pass_to_pass: dict[str, str] = Field(default_factory=dict)
    commands: list[CommandOutcome] = Field(default_factory=list)
    task_hash: str = ""


class ModelSummary(BaseModel):
    model: str
    tasks: int
    resolved: int
    resolved_rate: float
    outcomes: dict[str, int]
    steps: int
    completion_tokens: int
    evaluated_tokens: int
    wall_s: float


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def summarise(results: Sequence[JobResult], models: Sequence[str]) -> list[ModelSummary]:
    summaries = []
    for model in models:
        mine = [r for r in results if r.model == model]
        resolved = sum(r.outcome == "resolved" for r in mine)
        summaries.append(
            ModelSummary(
                model=model, tasks=len(mine), resolved=resolved,
                resolved_rate=round(resolved / len(mine), 4) if mine else 0.0,
                outcomes={o: sum(r.outcome == o for r in mine) for o in OUTCOMES},
                steps=sum(r.steps for r in mine), completion_tokens=sum(r.completion_tokens for r in mine),
                evaluated_tokens=sum(r.evaluated_tokens for r in mine), wall_s=round(sum(r.wall_s for r in mine), 1),
            )
        )
    return summaries


def markdown_report(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str]) -> str:
    summaries = summarise(results, models)
    lines = ["# ribbit eval", "", "| model | resolved | " + " | ".join(OUTCOME_LABELS[o] for o in OUTCOMES[1:])
             + " | steps | tokens in / out | wall |",
             "|---|---|" + "---|" * (len(OUTCOMES) - 1) + "---|---|---|"]
    for s in summaries:
        others = " | ".join(str(s.outcomes[o]) for o in OUTCOMES[1:])
        lines.append(
            f"| {s.model} | {s.resolved}/{s.tasks} ({s.resolved_rate:.1%}) | {others} | {s.steps} | "
            f"{_tokens(s.evaluated_tokens)} / {_tokens(s.completion_tokens)} | {_duration(s.wall_s)} |"
        )
    by_key = {(r.task_id, r.model): r for r in results}
    lines += ["", "## Per task", "", "| task | model | outcome | stop | steps | tokens in / out | wall | note |",
              "|---|---|---|---|---|---|---|---|"]
    for task_id in task_ids:
        for model in models:
            r = by_key.get((task_id, model))
            if r is None:
                lines.append(f"| {task_id} | {model} | (not run) | | | | | |")
                continue
            note = r.message.replace("|", "\\|").replace("\n", " ")[:120]
            lines.append(
                f"| {task_id} | {model} | {OUTCOME_LABELS[r.outcome]} | {r.stop_reason or ''} | {r.steps} | "
                f"{_tokens(r.evaluated_tokens)} / {_tokens(r.completion_tokens)} | {_duration(r.wall_s)} | {note} |"
            )
    return "\n".join(lines) + "\n"


def json_report(results: Sequence[JobResult], models: Sequence[str], task_ids: Sequence[str]) -> str:
    data = {
        "models": [s.model_dump() for s in summarise(results, models)],
        "tasks": list(task_ids),
        "results": [r.model_dump(exclude={"patch"}) for r in results],
    }
    return json.dumps(data, indent=2) + "\n"


def predictions_jsonl(results: Sequence[JobResult]) -> str:
    """SWE-bench predictions: one line per job, so the official harness can score the same patches."""
    return "".join(
        json.dumps({"instance_id": r.task_id, "model_name_or_path": r.model, "model_patch": r.patch}) + "\n"
        for r in results
    )


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def _duration(seconds: float) -> str:
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.1f}s"
