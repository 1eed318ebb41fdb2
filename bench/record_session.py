"""Record the session `bench.session` replays: scripted assistant turns, real tools, a real repository.

    python -m bench.record_session [--out bench/sessions/ribbit-fix.jsonl]

A copy of this repository (`git archive HEAD`) is the workspace; `ribbit run` drives the real agent
loop with a `replay:` model whose turns are written here (Qwen3-Coder XML calls, as FrogNano writes
them). Edits take their old_string from the files as they are, so they apply. The transcript — every
message with the tools' real outputs — is the fixture. Run once; commit the result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = "The engine's lookup drafter should not propose drafts shorter than two tokens. Find it, fix it, and check nothing else uses the old constant."


def this_python_first() -> dict[str, str]:
    """The environment `ribbit run` gets: this interpreter's folder first on PATH, as in an activated
    virtual environment, so that the session's `python` commands (recorded as a user types them, no
    machine's path in them) run on this interpreter and its packages."""
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def call(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def lines(repo: Path, path: str, first: int, count: int) -> str:
    return "\n".join(repo.joinpath(path).read_text().splitlines()[first - 1 : first - 1 + count])


def turns(repo: Path) -> list[str]:
    drafting = "models/drafting.py"
    old = lines(repo, drafting, 1, 200)
    start = old.index("    def draft_length(self, match: int) -> int:")
    draft_length = old[start : old.index("\n\n", start)]
    new_length = draft_length.replace("return MAX_DRAFT if match >= 4 else 2 * match", "return MAX_DRAFT if match >= 4 else max(2, 2 * match)")
    if new_length == draft_length:  # the scripted fix names the body draft_length had when this was recorded
        raise SystemExit("record_session: models/drafting.py's draft_length has changed since the session was scripted; "
                         "update the scripted Edit in bench/record_session.py before recording again")
    glob_old = lines(repo, "agent/core/tools/glob.py", 1, 400)
    doc_end = glob_old.index('"""', 3) + 3
    glob_doc = glob_old[:doc_end]
    think = "</think>\n\n"
    return [
        "I should find the lookup drafter first.\n" + think + call("Glob", pattern="models/*.py"),
        "drafting.py is the likely home.\n" + think + call("Read", file_path=drafting, limit=120),
        "Where is MIN_MATCH used?\n" + think + call("Bash", command="grep -rn 'MIN_MATCH\\|draft_length' --include=*.py ."),
        "Let me see how the backend calls it.\n" + think + call("Bash", command="grep -n '_lookup' models/llama_backend.py"),
        "And the tests for it.\n" + think + call("Glob", pattern="tests/engine/test_*.py"),
        "Read the drafting tests.\n" + think + call("Read", file_path="tests/engine/test_drafting.py", limit=60),
        "Fix draft_length so short matches still draft two tokens.\n" + think
        + call("Edit", file_path=drafting, old_string=draft_length, new_string=new_length),
        "Check it imports.\n" + think + call("Bash", command="python -c 'import models.drafting as d; print(d.LookupDrafter().draft_length(1))'"),
        "Look at the memory planner's rollback accounting too.\n" + think + call("Read", file_path="models/memory.py", offset=150, limit=50),
        "Does anything else mention the constant?\n" + think + call("Bash", command="git grep -n 'MAX_DRAFT' -- '*.py' | head -20"),
        "The glob tool's docstring mentions drafting? Let me check.\n" + think + call("Read", file_path="agent/core/tools/glob.py", limit=40),
        "It does not; but its docstring can say it respects .gitignore more clearly.\n" + think
        + call("Edit", file_path="agent/core/tools/glob.py", old_string=glob_doc,
               new_string=glob_doc.replace('"""', '"""Glob (respects .gitignore). ', 1)),
        "Check the diff so far.\n" + think + call("Bash", command="git diff --stat"),
        "Run the unit tests of the models package.\n" + think + call("Bash", command="python -m pytest -q -x tests/unit/test_models.py 2>&1 | tail -3"),
        "Read the README section about the engine.\n" + think + call("Bash", command="grep -n 'Engine' README.md | head"),
        "Check the README lines.\n" + think + call("Read", file_path="README.md", offset=60, limit=20),
        "Look at the whole diff.\n" + think + call("Bash", command="git diff"),
        "Confirm the drafter test still passes quickly.\n" + think + call("Bash", command="python -c 'from models.drafting import LookupDrafter; import numpy as np; print(LookupDrafter().propose(np.array([1,2,3,1,2],dtype=np.intc),3,4))'"),
        "Everything is in place.\n" + think + call("Bash", command="git status --short"),
        "Done.\n" + think + "draft_length now drafts at least two tokens after a short match; the glob docstring says it respects .gitignore.",
    ]


def record(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="ribbit-record-") as tmp:
        repo = Path(tmp) / "ribbit"
        repo.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=r", "-c", "user.email=r@r", "commit", "-qm", "base"]):
            subprocess.run(["git", "-C", str(repo), *args], check=True)
        replay = Path(tmp) / "turns.jsonl"
        replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns(repo)))
        transcript = Path(tmp) / "transcript.jsonl"
        subprocess.run([sys.executable, "-m", "app.cli", "run", TASK, "--repo", str(repo), "--model", f"replay:{replay}",
                        "--mode", "full-auto", "--no-sandbox", "--transcript", str(transcript)],
                       check=False, cwd=ROOT, env=this_python_first(), stdout=subprocess.DEVNULL)
        events = [json.loads(line) for line in transcript.read_text().splitlines()]
        raw = [json.loads(line)["text"] for line in replay.read_text().splitlines()]
    messages = [e["message"] for e in events if e["type"] == "message"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as handle:
        handle.write(json.dumps({"task": TASK, "assistant_raw": raw}) + "\n")
        for message in messages:
            handle.write(json.dumps(message) + "\n")
    tools = sum(1 for m in messages if m["role"] == "tool")
    print(f"recorded {len(raw)} assistant turns, {tools} tool results -> {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.record_session", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "sessions" / "ribbit-fix.jsonl")
    args = parser.parse_args(argv)
    record(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
