"""`ribbit eval` against a hosted endpoint (a scripted fake on 127.0.0.1): the key goes to the server as a
bearer token and nowhere else — not the transcript, the reports, the predictions, the test logs, the
agent's files, the state folders or temp files — even when Bash dumps the environment and the server
echoes the key back; a 429 with Retry-After is waited out; cost is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.fake_openai import FakeOpenAI, Recorded, Status, Stream, turn
from tests.eval.conftest import CALC_FIXED

# Loopback ports: a port this file finds free (bound, closed, then dialled as "nothing listens") can be taken
# meanwhile by test_sandbox.py's listener, which then counts the dial as an escape; the files share one
# worker (tests.suite).
pytestmark = pytest.mark.xdist_group("loopback_ports")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-or-v1-3b9e0c7d1a5f42e8b6c4d2a09f1e7c35"


def key_hits(folder: Path, key: bytes) -> list[str]:
    """Every file under `folder` holding the key, git objects included (they are compressed on disk)."""
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and key in path.read_bytes():
            hits.append(str(path.relative_to(folder)))
    for git_dir in [p for p in folder.rglob("*") if p.is_dir() and (p / "objects").is_dir() and (p / "HEAD").is_file()]:
        objects = subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch"], capture_output=True
        ).stdout
        if key in objects:
            hits.append(f"{git_dir.relative_to(folder)} (git objects)")
    return hits


def test_the_key_reaches_the_server_and_no_file(tmp_path: Path, task_set: Path) -> None:
    def echo_key(request: Recorded) -> Stream:
        seen = request.headers["Authorization"].removeprefix("Bearer ")
        return turn(f"Noted your key {seen}.", [("Write", {"file_path": "leak.txt", "content": seen})], cost=0.25)

    with FakeOpenAI(models=("gemma-4-12b-it",)) as server:
        server.chat.extend([
            Status(429, '{"error": {"message": "rate limited, slow down"}}', {"Retry-After": "1"}),
            turn("", [("Bash", {"command": "env > env.txt; echo \"key=$OPENROUTER_TEST_KEY\" >> env.txt; cat env.txt"})],
                 cost=0.25),
            turn("", [("Read", {"file_path": "calc.py"})], cost=0.25),
            turn("", [("Write", {"file_path": "calc.py", "content": CALC_FIXED})], cost=0.25),
            echo_key,
        ])
        server.after_script = turn("Fixed calc.add.", cost=0.25)
        spec = f"openai:{server.url}#gemma-4-12b-it?key_env=OPENROUTER_TEST_KEY&retries=3"
        home, state, cache, tmp = (tmp_path / name for name in ("home", "state", "cache", "tmp"))
        for folder in (home, state, cache, tmp):
            folder.mkdir()
        env = {**os.environ, "OPENROUTER_TEST_KEY": KEY, "HOME": str(home), "XDG_STATE_HOME": str(state),
               "XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp)}
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", "eval", str(task_set), "--task", "calc-one", "--model", spec,
             "--out", str(out), "--keep-worktrees"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
    assert proc.returncode == 0, proc.stderr
    chats = server.chat_requests()
    assert len(chats) == 6  # the 429, then five turns
    assert all(r.headers["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    # The key went nowhere else: not in any file under the output, home, state, cache or temp folders...
    assert key_hits(tmp_path, KEY.encode()) == []
    assert KEY not in proc.stdout + proc.stderr
    # ...and not to the model either: Bash ran without it, the echoed copy was redacted.
    bash_result = next(m for r in chats for m in r.body["messages"] if m["role"] == "tool")
    assert "OPENROUTER_TEST_KEY=" not in bash_result["content"] and "key=" in bash_result["content"].splitlines()
    result = json.loads(next((out / "results").rglob("calc-one.json")).read_text())
    assert result["outcome"] == "resolved", result["message"]
    assert result["cost"] == pytest.approx(1.25)  # five turns at 0.25, as the server reported
    report = json.loads((out / "report.json").read_text())
    assert report["models"][0]["cost"] == pytest.approx(1.25) and report["models"][0]["cost_per_resolved"] == pytest.approx(1.25)
    assert next((out / "work").rglob("leak.txt")).read_text() == "[redacted]"
    transcript = next((out / "transcripts").rglob("calc-one.jsonl")).read_text()
    usage = [json.loads(line) for line in transcript.splitlines() if '"type": "usage"' in line]
    assert [u["cost"] for u in usage] == [0.25] * 5


def test_a_dead_endpoint_fails_each_job_with_one_line(tmp_path: Path, task_set: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "eval", str(task_set), "--model", f"openai:http://127.0.0.1:{port}/v1#m",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    results = [json.loads(p.read_text()) for p in sorted((out / "results").rglob("*.json"))]
    assert [r["outcome"] for r in results] == ["error", "error"]
    assert all("connection refused" in r["message"] and "\n" not in r["message"] for r in results)


def test_a_key_env_that_is_not_set_stops_the_eval_before_it_starts(tmp_path: Path, task_set: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RIBBIT_TEST_UNSET_KEY"}
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "eval", str(task_set), "--model",
         "openai:http://127.0.0.1:9/v1#m?key_env=RIBBIT_TEST_UNSET_KEY", "--out", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "RIBBIT_TEST_UNSET_KEY" in proc.stderr and not (tmp_path / "out").exists()
