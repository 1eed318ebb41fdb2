"""Replay models for evaluation tests: an oracle that writes a task's known solution, and variants."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import xml_call


def solution_turns(solution: Path) -> list[str]:
    """Raw assistant turns that Read and then Write every file of a solution folder."""
    turns = []
    for path in sorted(p for p in solution.rglob("*") if p.is_file()):
        rel = path.relative_to(solution).as_posix()
        turns.append(xml_call("Read", file_path=rel))
        turns.append(xml_call("Write", file_path=rel, content=path.read_text()))
    return turns


def write_replay(path: Path, turns: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return path


def oracle_models(tasks_root: Path, folder: Path) -> str:
    """One replay per task from its solution/ folder; returns the `replay:.../{task}.jsonl` SPEC."""
    for task in sorted(p for p in tasks_root.iterdir() if (p / "solution").is_dir()):
        write_replay(folder / f"{task.name}.jsonl", solution_turns(task / "solution"))
    return f"replay:{folder}/{{task}}.jsonl"
