"""The repetition guard (agent/core/repeats.py) on recorded loops and on real files: how soon a loop is
cut, and that no real file is.

    python -m bench.repetition [--record] [--loops FILE] [--files DIR ...] [--chunk 12]

1. Loops. `--record` has the embedded model (SmolLM2-135M, the one that looped in issue 32) answer the
   prompts in LOOP_PROMPTS with no guard, up to 1,500 tokens each, and saves every streamed piece to
   `--loops` (JSON Lines, one answer a line). Then each recorded answer is streamed, piece by piece as the
   model wrote it, through a RepetitionGuard: the figure is the piece count at the cut against the
   whole answer (a loop cut early saves the rest; a prose answer that does not loop must not be cut).
2. Real files. Every text file under `--files` (default: this repository, Python's standard library and
   the installed packages), up to what one turn can write (32 KiB: 8,192 tokens), is streamed in
   `--chunk`-character pieces, as a model writing it in a Write call would: the
   figure is how many files are cut (a false cut) and the longest repeated run seen against the span
   a cut needs (REPEAT_MIN_SPAN), with the file that comes closest.

Prints figures; asserts nothing (tests/unit/test_repetition.py holds the behaviour).
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path

from agent.core.repeats import REPEAT_MIN_SPAN, RepetitionGuard

LOOP_PROMPTS = (
    "Fix the bug in calc.py: add() subtracts.",
    "Fix the bug in tabulate.py: the column width ignores wide characters.",
    "Add a test for add() in test_calc.py and run it.",
    "Rename add to plus everywhere.",
    "List every step to set up a Python project, with examples.",
    "Explain what a git rebase does, in detail.",
    "Write a haiku about frogs, then explain it.",
    "What does this function do? def f(x): return [i*i for i in range(x) if i % 2]",
    "Describe the files in this repository and what each one is for.",
)
SUFFIXES = {".py", ".txt", ".md", ".json", ".toml", ".cfg", ".ini", ".c", ".h", ".js", ".css", ".tcss", ".yaml",
            ".yml", ".csv", ".rst", ".html", ".jinja", ".sh", ".pyi"}
TURN_CHARS = 32 * 1024  # what one turn can write: 8,192 tokens (the turn cap) of about 4 characters


def record(path: Path, max_tokens: int) -> None:
    """The embedded model answers each prompt as ribbit asks it (its system prompt and tools, in a small
    project), with no guard: what it streams is saved."""
    import subprocess
    import tempfile

    from agent.session import Limits, RejectAll, open_workspace
    from models.base import GenerationRequest, TextChunk
    from models.chat import ChatMessage
    from models.backends import load_model

    model = load_model("default", context=4096)
    with tempfile.TemporaryDirectory() as temp, path.open("w") as out:
        root = Path(temp)
        (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        workspace = open_workspace(model, root, mode="ask", approver=RejectAll(), sink=lambda event: None,
                                   limits=Limits(context=4096))
        system = workspace.session.messages[0]
        specs = workspace.session.specs
        for prompt in LOOP_PROMPTS:
            request = GenerationRequest(messages=[system, ChatMessage(role="user", content=prompt)], tools=specs,
                                        max_tokens=max_tokens)
            pieces = [c.text for c in model.generate(request) if isinstance(c, TextChunk)]
            out.write(json.dumps({"prompt": prompt, "pieces": pieces}) + "\n")
            print(f"recorded {len(pieces)} pieces for {prompt[:40]!r}", file=sys.stderr)
        workspace.close()
    model.close()


def stream(pieces: list[str]) -> tuple[int | None, RepetitionGuard]:
    guard = RepetitionGuard()
    for index, piece in enumerate(pieces, start=1):
        if guard.feed(piece) is not None:
            return index, guard
    return None, guard


def loops(path: Path) -> None:
    print(f"recorded answers ({path}): pieces written / cut at (the rest saved)")
    for line in path.read_text().splitlines():
        answer = json.loads(line)
        pieces = answer["pieces"]
        cut, guard = stream(pieces)
        where = f"cut at {cut} ({guard.found.copies if guard.found else 0} copies: {guard.found.unit[:50]!r})" \
            if cut else "not cut"
        print(f"  {len(pieces):5d} pieces  {where}  ·  {answer['prompt'][:50]!r}")


def files(folders: list[Path], chunk: int) -> None:
    count = cut = 0
    closest = (0, 0, "")
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if {".git", ".venv", "node_modules"} & set(path.relative_to(folder).parts):
                continue  # the repository's own environment is scanned as site-packages, once
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")[:TURN_CHARS]
            except (UnicodeDecodeError, OSError):
                continue
            count += 1
            at, guard = stream([text[i:i + chunk] for i in range(0, len(text), chunk)])
            if at is not None:
                cut += 1
                print(f"  CUT {path}: {guard.found.copies if guard.found else 0} copies of "
                      f"{(guard.found.unit if guard.found else '')[:60]!r}")
            run, period = guard.longest
            if run > closest[0]:
                closest = (run, period, str(path))
    print(f"real files: {count} files, {cut} cut; longest repeated run {closest[0]} stream tokens "
          f"(period {closest[1]}) in {closest[2]}; a cut needs {REPEAT_MIN_SPAN}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repetition", description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record the loops first (the embedded model)")
    parser.add_argument("--loops", type=Path, default=Path("bench/data/repetition-loops.jsonl"))
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--files", type=Path, nargs="*", default=None)
    parser.add_argument("--chunk", type=int, default=12)
    args = parser.parse_args(argv)
    if args.record:
        args.loops.parent.mkdir(parents=True, exist_ok=True)
        record(args.loops, args.max_tokens)
    if args.loops.exists():
        loops(args.loops)
    folders = args.files if args.files is not None else [
        Path(__file__).resolve().parent.parent, Path(sysconfig.get_paths()["stdlib"]),
        Path(sysconfig.get_paths()["purelib"])]
    files(folders, args.chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
