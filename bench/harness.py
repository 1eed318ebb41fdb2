"""Per-step harness overhead on a 100-step replayed session.

Overhead = a step's wall time minus the model's time (generate) minus the tools' own run time:
parsing, validation, events, transcript writing, approvals policy, journal snapshots, prompt
bookkeeping. Prints figures; asserts nothing.

    python -m bench.harness [--steps 100] [--files 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agent.core.approvals import RejectAll
from agent.core.events import AgentEvent
from agent.session.transcript import TranscriptWriter
from agent.session.workspace import open_workspace
from models.replay import ReplayModel


def xml_call(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"Next step.\n<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def make_repo(root: Path, files: int) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for i in range(files):
        path = root / f"pkg{i % 10}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(40)))
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init"], check=True)


def script(steps: int) -> list[str]:
    turns = []
    for i in range(steps - 1):
        target = f"pkg{i % 10}/mod{i % 10}.py"
        kind = i % 4
        if kind == 0:
            turns.append(xml_call("Read", file_path=target))
        elif kind == 1:
            turns.append(xml_call("Edit", file_path=target, old_string=f"return x + {i % 40}\n", new_string=f"return x + {i % 40} + {i}\n"))
        elif kind == 2:
            turns.append(xml_call("Glob", pattern="**/*.py"))
        else:
            turns.append(xml_call("Bash", command="true"))
    turns.append("All done.")
    return turns


class Timed:
    """Accumulates seconds spent inside wrapped callables."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap_generate(self, generate):  # type: ignore[no-untyped-def]
        def timed(request):  # type: ignore[no-untyped-def]
            iterator = generate(request)
            while True:
                start = time.perf_counter()
                try:
                    chunk = next(iterator)
                except StopIteration:
                    self.seconds += time.perf_counter() - start
                    return
                self.seconds += time.perf_counter() - start
                yield chunk

        return timed

    def wrap_run(self, run):  # type: ignore[no-untyped-def]
        def timed(args, ctx):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return run(args, ctx)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--files", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ribbit-bench-"))
    repo = work / "repo"
    repo.mkdir()
    make_repo(repo, args.files)
    replay = work / "session.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in script(args.steps)))
    model = ReplayModel(replay)
    model_time, tool_time = Timed(), Timed()
    model.generate = model_time.wrap_generate(model.generate)  # type: ignore[method-assign]
    transcript = TranscriptWriter(work / "transcript.jsonl")
    marks: list[tuple[float, float, float]] = []

    def sink(event: AgentEvent) -> None:
        transcript(event)
        if event.type == "turn_started":
            marks.append((time.perf_counter(), model_time.seconds, tool_time.seconds))

    workspace = open_workspace(model, repo, mode="full-auto", approver=RejectAll(), sink=sink)
    for tool in workspace.session.tools.values():
        tool.run = tool_time.wrap_run(tool.run)  # type: ignore[method-assign]
    started = time.perf_counter()
    summary = workspace.session.run("benchmark task")
    marks.append((time.perf_counter(), model_time.seconds, tool_time.seconds))
    total = time.perf_counter() - started
    transcript.close()
    overheads = [
        ((t1 - t0) - (m1 - m0) - (u1 - u0)) * 1000 for (t0, m0, u0), (t1, m1, u1) in zip(marks, marks[1:])
    ]
    overheads.sort()
    print(f"session: {summary.steps} steps, stop_reason={summary.stop_reason}, {args.files} files, sandbox={workspace.runner.name}")
    print(f"wall {total:.2f} s | model {model_time.seconds:.2f} s | tools {tool_time.seconds:.2f} s")
    print(
        f"harness overhead per step: median {statistics.median(overheads):.2f} ms, "
        f"p90 {overheads[int(len(overheads) * 0.9)]:.2f} ms, max {overheads[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
