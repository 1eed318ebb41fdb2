"""What the ACP path costs: `ribbit acp` against the session API as `ribbit run` drives it, on the embedded model.

    flock -x /tmp/ribbit-cpu.lock python -m bench.acp_latency [--rounds 5] [--model default]

Each round, alternately:
- run: in this process, the pieces `ribbit run` uses (load_model, open_workspace, its ProgressPrinter on
  stderr, run_interruptibly's worker thread); the system prompt preloaded first, as the TUI and `ribbit acp` do.
- acp: `python -m app.cli acp` on pipes, initialize, session/new, a wait until the process is idle (its model
  loaded, its system prompt preloaded), then session/prompt; times are taken where an editor would see them (the bytes read from its stdout).
Both at temperature 0, the same --threads and (unless --run-omp default) the same OpenMP wait policy, on the same task in the same fixture repository, so both
write the same first turn.
Figures: time from the prompt to the first chunk (text or thought), and per-token time over the first
turn (from the first chunk to the turn's usage, over its completion tokens less one). The turn is then
cancelled. Medians and bests (the least disturbed round of each side), and acp / run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = "In one sentence, what does calc.py do?"


def fixture_repo(parent: Path) -> Path:
    root = parent / "repo"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root


Round = tuple[float, float, int, str]  # seconds to the first chunk, seconds of the first turn's stream, tokens, text


def run_round(model_spec: str, repo: Path, threads: int) -> Round:
    """Through the session API, as `ribbit run` drives it."""
    from agent.session import Limits, RejectAll, open_workspace
    from app.run import ProgressPrinter
    from models.backends import EngineOptions, load_model

    model = load_model(model_spec, context=8192, engine=EngineOptions(temperature=0.0, threads=threads))
    marks: dict[str, float] = {}
    tokens = [0]
    text: list[str] = []
    printer = ProgressPrinter(open(os.devnull, "w"))
    workspace = None

    def sink(event) -> None:  # type: ignore[no-untyped-def]
        printer(event)
        if event.type in ("text_delta", "reasoning_delta") and "usage" not in marks:
            marks.setdefault("first", time.perf_counter())
            text.append(event.text)
        if event.type == "usage" and "usage" not in marks:
            marks["usage"] = time.perf_counter()
            tokens[0] = event.completion_tokens
            assert workspace is not None
            workspace.cancel()

    try:
        workspace = open_workspace(model, repo, mode="ask", approver=RejectAll(), sink=sink,
                                   limits=Limits(context=8192), save=True)
        workspace.preload()
        start = time.perf_counter()
        workspace.run_interruptibly(TASK)
        workspace.close()
    finally:
        model.close()
    return marks["first"] - start, marks["usage"] - marks["first"], tokens[0], "".join(text)


def acp_round(model_spec: str, repo: Path, settle: float, threads: int) -> Round:
    """Through `ribbit acp`, timed where an editor reads it; tokens are not reported on the wire (0)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "acp", "--model", model_spec, "--temperature", "0", "--context", "8192",
         "--threads", str(threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def send(message: dict) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    def reply(request_id: int) -> dict:
        while True:
            message = json.loads(stdout.readline())
            if message.get("id") == request_id and "method" not in message:
                return message

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    reply(1)
    send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(repo), "mcpServers": []}})
    session_id = reply(2)["result"]["sessionId"]
    wait_idle(process.pid, settle)  # the model loads and reads the system prompt meanwhile (an editor's user types)
    send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": TASK}]}})
    start = time.perf_counter()
    first = used_at = None
    text: list[str] = []
    while True:
        message = json.loads(stdout.readline())
        now = time.perf_counter()
        if message.get("id") == 3:
            break
        update = message.get("params", {}).get("update", {})
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk") and used_at is None:
            first = first or now
            text.append(update["content"].get("text", ""))
        if kind == "usage_update" and used_at is None:
            used_at = now
            send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
    stdin.close()
    process.wait(timeout=120)
    assert first is not None and used_at is not None
    return first - start, used_at - first, 0, "".join(text)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_idle(pid: int, at_least: float, limit: float = 120.0) -> None:
    """Until the process has used (almost) no CPU for a second: its model loaded and its preload done."""
    started = time.monotonic()
    time.sleep(at_least)
    before = cpu_ticks(pid)
    while time.monotonic() - started < limit:
        time.sleep(1.0)
        now = cpu_ticks(pid)
        if now - before <= 2:
            return
        before = now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="default")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds to wait at least before waiting for the "
                        "agent to go idle (its preload done)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="llama.cpp threads on both sides (default: this machine's CPUs): the thread count ribbit "
                             "measures from other programs' load would otherwise differ between the two by chance")
    parser.add_argument("--run-omp", default="passive", choices=("passive", "default"),
                        help="the run side's OpenMP wait policy: passive as `ribbit acp` sets it (the protocol's own "
                             "cost, alone), or libgomp's default (what `ribbit run` has)")
    args = parser.parse_args()
    if args.run_omp == "passive":
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # read when llama.cpp loads, in run_round
    first: dict[str, list[float]] = {"run": [], "acp": []}
    per_token: dict[str, list[float]] = {"run": [], "acp": []}
    with tempfile.TemporaryDirectory() as temp:
        os.environ["XDG_STATE_HOME"] = str(Path(temp) / "state")  # the sessions it saves: not in the user's folder
        for n in range(args.rounds):
            got: dict[str, Round] = {}
            for side in (("run", "acp") if n % 2 == 0 else ("acp", "run")):
                # The same path each time: the system prompt names the folder.
                shutil.rmtree(Path(temp) / "repo", ignore_errors=True)
                repo = fixture_repo(Path(temp))
                got[side] = (run_round(args.model, repo, args.threads) if side == "run"
                             else acp_round(args.model, repo, args.settle, args.threads))
            tokens = got["run"][2]  # greedy: the same first turn both ways (checked on its text)
            same = got["run"][3].strip() == got["acp"][3].strip()
            for side, row in got.items():
                first[side].append(row[0])
                per_token[side].append(row[1] / max(1, tokens - 1))
                print(f"round {n + 1} {side}: first chunk {row[0] * 1000:.0f} ms, {row[1] / max(1, tokens - 1) * 1000:.2f} ms "
                      f"a token ({tokens} tokens; same text both ways: {same})", file=sys.stderr)
    for name, pick in (("median", statistics.median), ("best", min)):  # best: least disturbed by other programs
        f = {side: pick(v) for side, v in first.items()}
        t = {side: pick(v) for side, v in per_token.items()}
        print(f"{name}: time to the first chunk: run {f['run'] * 1000:.0f} ms, acp {f['acp'] * 1000:.0f} ms, "
              f"acp/run {f['acp'] / f['run']:.3f}; per token over the first turn: run {t['run'] * 1000:.2f} ms, "
              f"acp {t['acp'] * 1000:.2f} ms, acp/run {t['acp'] / t['run']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
