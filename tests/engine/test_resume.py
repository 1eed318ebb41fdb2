"""Resume on real llama.cpp models, each `ribbit run` a new process: with the same model the saved state is
loaded and no token of the old conversation is evaluated (usage events prove it); with another model the
conversation is read again once, and after that the new model's own saved state is used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent.session.store import SessionStore
from tests.functional.helpers import ribbit_subprocess

ENGINE = ["--threads", "1", "--temperature", "0", "--draft", "none", "--mode", "auto-edit", "--no-sandbox",
          "--max-steps", "1", "--max-turn-tokens", "16", "--context", "2048"]


def run(repo: Path, transcript: Path, task: str, *extra: str) -> list[dict]:
    proc = ribbit_subprocess("run", task, "--repo", str(repo), "--transcript", str(transcript), *ENGINE, *extra)
    assert proc.returncode in (0, 3), proc.stderr  # finished, or the step / turn limit of these short runs
    assert "Traceback" not in proc.stderr
    return [json.loads(line) for line in transcript.read_text().splitlines()]


def usage(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "usage"]


def stream_end(events: list[dict]) -> tuple[int, int]:
    """The tokens the model held after its last turn: all it wrote, or all but a closing stop token."""
    last = usage(events)[-1]
    end = last["prompt_tokens"] + last["completion_tokens"]
    return end - 1, end


def test_resume_with_the_same_model_evaluates_nothing_of_the_old_conversation(tmp_path: Path, repo: Path) -> None:
    first = run(repo, tmp_path / "1.jsonl", "Say hello.")
    second = run(repo, tmp_path / "2.jsonl", "Now say goodbye.", "--continue")
    turn = usage(second)[0]
    low, high = stream_end(first)
    assert low <= turn["cached_tokens"] <= high, (turn, usage(first))  # the saved state, whole
    assert turn["evaluated_tokens"] == turn["prompt_tokens"] - turn["cached_tokens"] < 40  # the new prompt only
    # Control: the same step without the saved state reads the old conversation again.
    folder = SessionStore(repo).latest()
    (SessionStore(repo).folder / folder.session_id / "latest.state").unlink()
    third = run(repo, tmp_path / "3.jsonl", "And hello again.", "--continue")
    low2, _ = stream_end(second)
    reread = usage(third)[0]
    assert reread["cached_tokens"] < low2  # at best the saved system prompt
    assert reread["evaluated_tokens"] >= low2 - reread["cached_tokens"]  # the old conversation, read again


def test_resume_with_another_model_reads_the_conversation_once(tmp_path: Path, repo: Path, thinking_qwen35: Path) -> None:
    model = tmp_path / "other.gguf"
    shutil.copy(thinking_qwen35, model)  # a hybrid model (its tiny tokenizer: ~3,300 tokens of system prompt)
    first = run(repo, tmp_path / "1.jsonl", "Say hello.")
    session = SessionStore(repo).latest().session_id
    other = run(repo, tmp_path / "2.jsonl", "Now say goodbye.", "--resume", session, "--model", str(model), "--context", "8192")
    reread = usage(other)[0]
    assert reread["cached_tokens"] == 0 and reread["evaluated_tokens"] == reread["prompt_tokens"]
    again = run(repo, tmp_path / "3.jsonl", "Once more.", "--continue", "--model", str(model), "--context", "8192")
    low, high = stream_end(other)
    assert low <= usage(again)[0]["cached_tokens"] <= high  # once: from now on the new model's own state
    assert SessionStore(repo).latest().session_id == session
    assert usage(first)[0]["cached_tokens"] == 0
