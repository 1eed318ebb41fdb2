from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class RunResult:
    code: int
    patch: str
    stderr: str
    events: list[dict]

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    def tool_results(self) -> list[str]:
        return [e["message"]["content"] for e in self.of_type("message") if e["message"]["role"] == "tool"]


def ribbit_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, repo: Path, model: Path | str, *extra: str, stdin: str = "",
    task: str = "fix the bug",
) -> RunResult:
    """`ribbit run` in-process, stdin scripted; returns exit code, stdout patch, stderr and transcript."""
    from app.cli import main

    transcript = tmp_path / "transcript.jsonl"
    spec = model if isinstance(model, str) else f"replay:{model}"
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(["run", task, "--repo", str(repo), "--model", spec, "--transcript", str(transcript), *extra])
    finally:
        sys.stdin = old_stdin
    captured = capsys.readouterr()
    events = [json.loads(line) for line in transcript.read_text().splitlines()] if transcript.exists() else []
    return RunResult(code=code, patch=captured.out, stderr=captured.err, events=events)


def ribbit_subprocess(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], input=stdin, capture_output=True, text=True, timeout=300,
        cwd=cwd or Path(__file__).resolve().parents[2],
    )
